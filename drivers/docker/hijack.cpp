#include "drivers/docker/hijack.hpp"

#include <cstring>
#include <fmt/format.h>
#include <netdb.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

namespace sandboxer::drivers::docker {
namespace {

struct UrlParts {
  std::string host;
  std::string port = "80";
  std::string target = "/";
};

UrlParts split_url(const std::string& url) {
  if (!url.starts_with("http://")) {
    throw DriverError(DriverError::Kind::unsupported,
                      fmt::format("cannot hijack {}: only plain http is supported", url));
  }
  UrlParts parts;
  std::string rest = url.substr(7);
  auto slash = rest.find('/');
  std::string authority = rest.substr(0, slash);
  if (slash != std::string::npos) {
    parts.target = rest.substr(slash);
  }
  auto colon = authority.rfind(':');
  parts.host = authority.substr(0, colon);
  if (colon != std::string::npos) {
    parts.port = authority.substr(colon + 1);
  }
  return parts;
}

int connect_unix(const std::string& path) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    throw DriverError(DriverError::Kind::error,
                      fmt::format("cannot open a socket for {}: {}", path, strerror(errno)));
  }
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (path.size() >= sizeof address.sun_path) {
    close(fd);
    throw DriverError(DriverError::Kind::error, "socket path too long: " + path);
  }
  std::strcpy(address.sun_path, path.c_str());
  if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
    int saved = errno;
    close(fd);
    throw DriverError(DriverError::Kind::error,
                      fmt::format("Couldn't connect to {}: {}", path, strerror(saved)));
  }
  return fd;
}

int connect_tcp(const UrlParts& parts) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(parts.host.c_str(), parts.port.c_str(), &hints, &found) != 0 || !found) {
    throw DriverError(DriverError::Kind::error, "cannot resolve " + parts.host);
  }
  int fd = -1;
  for (auto* ai = found; ai; ai = ai->ai_next) {
    fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd >= 0 && connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
      break;
    }
    if (fd >= 0) {
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(found);
  if (fd < 0) {
    throw DriverError(DriverError::Kind::error,
                      fmt::format("Couldn't connect to {}:{}", parts.host, parts.port));
  }
  return fd;
}

void send_all(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    ssize_t n = send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n <= 0) {
      throw DriverError(DriverError::Kind::error,
                        fmt::format("connection lost while sending: {}", strerror(errno)));
    }
    bytes.remove_prefix(n);
  }
}

} // namespace

RawStream::~RawStream() {
  if (fd >= 0) {
    close(fd);
  }
}

std::unique_ptr<RawStream> hijack(const http::Request& request) {
  UrlParts parts = split_url(request.url);
  auto stream = std::make_unique<RawStream>();
  stream->fd = request.unix_socket ? connect_unix(*request.unix_socket) : connect_tcp(parts);

  std::string head =
      fmt::format("{} {} HTTP/1.1\r\nHost: {}\r\n", request.method, parts.target, parts.host);
  for (const auto& [name, value] : request.headers) {
    head += name + ": " + value + "\r\n";
  }
  head += fmt::format("Content-Length: {}\r\n\r\n", request.body.size());
  send_all(stream->fd, head);
  send_all(stream->fd, request.body);

  std::string received;
  size_t end = std::string::npos;
  char buffer[4096];
  // The answer to the upgrade is bounded by the request's timeout (an engine that accepts the
  // connection and never answers must not hang `exec`); the stream that follows is not: it lasts
  // as long as the user's command.
  const auto answer_within = request.answer_timeout.value_or(request.timeout);
  const auto answer_by = std::chrono::steady_clock::now() + answer_within;
  while ((end = received.find("\r\n\r\n")) == std::string::npos) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        answer_by - std::chrono::steady_clock::now());
    pollfd ready{stream->fd, POLLIN, 0};
    int polled = left.count() > 0 ? poll(&ready, 1, static_cast<int>(left.count())) : 0;
    if (polled < 0 && errno == EINTR) {
      continue;
    }
    if (polled <= 0) {
      throw DriverError(DriverError::Kind::timeout,
                        fmt::format("{} {}: no response within {} ms", request.method, parts.target,
                                    answer_within.count()));
    }
    ssize_t n = recv(stream->fd, buffer, sizeof buffer, 0);
    if (n <= 0) {
      throw DriverError(DriverError::Kind::error, "connection closed before the response headers");
    }
    received.append(buffer, n);
    if (received.size() > 1 << 20) {
      throw DriverError(DriverError::Kind::error, "response headers too large");
    }
  }
  if (std::sscanf(received.c_str(), "HTTP/%*s %ld", &stream->status) != 1) {
    throw DriverError(DriverError::Kind::error,
                      fmt::format("{} {}: not an HTTP response: {}", request.method, parts.target,
                                  received.substr(0, std::min<size_t>(end, 100))));
  }
  spdlog::debug("{} {} -> {} (hijacked)", request.method, parts.target, stream->status);
  std::string body = received.substr(end + 4);
  if (stream->status != 101 && stream->status != 200) {
    http::Response response;
    response.status = stream->status;
    throw DriverError(http::kind_of_status(stream->status),
                      fmt::format("{} {} -> HTTP {}: {}", request.method, parts.target,
                                  stream->status, body.substr(0, 300)));
  }
  stream->initial = std::move(body);
  return stream;
}

} // namespace sandboxer::drivers::docker
