#include "core/forward/relay.hpp"

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fmt/format.h>
#include <list>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <sandboxer/interrupt.hpp>
#include <sandboxer/ports.hpp>

#include "core/errors.hpp"

namespace sandboxer::forward {
namespace {

constexpr size_t k_buffer = 64 * 1024;
// A bound on what one forward holds open: a client that opens more is refused at once.
constexpr size_t k_most_connections = 512;
constexpr int k_keep_going_every_ms = 500;

class Fd {
public:
  explicit Fd(int fd = -1) : m_fd(fd) {}
  ~Fd() { reset(); }
  Fd(Fd&& other) noexcept : m_fd(other.m_fd) { other.m_fd = -1; }
  Fd& operator=(Fd&&) = delete;
  Fd(const Fd&) = delete;
  int get() const { return m_fd; }
  void reset() {
    if (m_fd >= 0) {
      ::close(m_fd);
    }
    m_fd = -1;
  }

private:
  int m_fd;
};

struct Target {
  sockaddr_storage address{};
  socklen_t length = 0;
};

Target target_of(const PortBinding& binding) {
  const std::string host = connect_host(binding.host);
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), std::to_string(binding.host_port.value_or(0)).c_str(), &hints,
                    &found) != 0 ||
      !found) {
    throw Error(ExitCode::runtime, fmt::format("forward: cannot resolve {} (port {}/{})", host,
                                               binding.port, binding.protocol));
  }
  Target target;
  std::memcpy(&target.address, found->ai_addr, found->ai_addrlen);
  target.length = found->ai_addrlen;
  ::freeaddrinfo(found);
  return target;
}

Fd listen_on(int local_port) {
  Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  const int yes = 1;
  ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(static_cast<uint16_t>(local_port));
  if (fd.get() < 0 ||
      ::bind(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
      ::listen(fd.get(), 64) != 0) {
    const int error = errno;
    auto holder = port_unavailable("tcp", "127.0.0.1", local_port);
    throw ConflictError(fmt::format("forward: cannot listen on 127.0.0.1:{}: {}", local_port,
                                    holder ? *holder : std::string(std::strerror(error))));
  }
  return fd;
}

// One direction of a connection: bytes read from one side, not yet written to the other.
struct Flow {
  std::string pending;
  bool ended = false; // the reading side said EOF (or failed)
  bool shut = false;  // the end was passed on (shutdown of the writing side)
};

struct Connection {
  Fd client;
  Fd upstream;
  bool connecting = true;
  Flow up;   // client -> upstream
  Flow down; // upstream -> client
  bool broken = false;
  bool done() const { return broken || (up.shut && down.shut); }
};

void read_into(int from, Flow& flow, bool& broken) {
  char buffer[k_buffer];
  const ssize_t n = ::read(from, buffer, sizeof buffer);
  if (n > 0) {
    flow.pending.append(buffer, static_cast<size_t>(n));
  } else if (n == 0) {
    flow.ended = true;
  } else if (errno != EAGAIN && errno != EINTR) {
    broken = true;
  }
}

void write_from(int to, Flow& flow, bool& broken) {
  if (!flow.pending.empty()) {
    const ssize_t n = ::send(to, flow.pending.data(), flow.pending.size(), MSG_NOSIGNAL);
    if (n > 0) {
      flow.pending.erase(0, static_cast<size_t>(n));
    } else if (n < 0 && errno != EAGAIN && errno != EINTR) {
      broken = true;
    }
  }
  if (flow.ended && flow.pending.empty() && !flow.shut) {
    ::shutdown(to, SHUT_WR);
    flow.shut = true;
  }
}

} // namespace

void relay(const std::vector<PortForward>& ports, ForwardIo& io) {
  struct Listener {
    Fd fd;
    Target target;
  };
  std::vector<Listener> listeners;
  for (const auto& forward : ports) {
    listeners.push_back({listen_on(forward.local_port), target_of(forward.binding)});
  }
  for (const auto& forward : ports) {
    io.listening(forward);
  }
  std::list<Connection> connections;
  auto next_look = std::chrono::steady_clock::now();
  while (true) {
    if (std::chrono::steady_clock::now() >= next_look) {
      if (!io.keep_going()) {
        return;
      }
      next_look =
          std::chrono::steady_clock::now() + std::chrono::milliseconds(k_keep_going_every_ms);
    }
    std::vector<pollfd> waits;
    waits.push_back({interrupt::wake_fd(), POLLIN, 0});
    for (const auto& listener : listeners) {
      waits.push_back({listener.fd.get(), POLLIN, 0});
    }
    for (auto& c : connections) {
      if (c.connecting) {
        waits.push_back({c.upstream.get(), POLLOUT, 0});
        waits.push_back({-1, 0, 0});
        continue;
      }
      // Read a side only while what it sent before has been written: memory stays bounded.
      const short client_wants =
          static_cast<short>((c.up.ended || !c.up.pending.empty() ? 0 : POLLIN) |
                             (c.down.pending.empty() ? 0 : POLLOUT));
      const short upstream_wants =
          static_cast<short>((c.down.ended || !c.down.pending.empty() ? 0 : POLLIN) |
                             (c.up.pending.empty() ? 0 : POLLOUT));
      waits.push_back({c.client.get(), client_wants, 0});
      waits.push_back({c.upstream.get(), upstream_wants, 0});
    }
    ::poll(waits.data(), waits.size(), k_keep_going_every_ms);
    interrupt::check();
    const size_t polled = connections.size();
    size_t at = 1;
    for (auto& listener : listeners) {
      if (waits[at++].revents & POLLIN) {
        Fd client(::accept4(listener.fd.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
        if (client.get() < 0 || connections.size() >= k_most_connections) {
          continue;
        }
        Fd upstream(::socket(listener.target.address.ss_family,
                             SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
        if (upstream.get() < 0 ||
            (::connect(upstream.get(), reinterpret_cast<const sockaddr*>(&listener.target.address),
                       listener.target.length) != 0 &&
             errno != EINPROGRESS)) {
          continue; // the client sees its connection closed, as with nothing listening
        }
        connections.push_back({std::move(client), std::move(upstream)});
      }
    }
    // Connections accepted just now were not polled: they start at the next round.
    auto c = connections.begin();
    for (size_t i = 0; i < polled; ++i, ++c) {
      const short client_events = waits[at].revents;
      const short upstream_events = waits[at + 1].revents;
      at += 2;
      if (c->connecting) {
        if (client_events != 0) { // the upstream's connect ended, one way or the other
          int error = 0;
          socklen_t length = sizeof error;
          ::getsockopt(c->upstream.get(), SOL_SOCKET, SO_ERROR, &error, &length);
          c->broken = error != 0;
          c->connecting = false;
        }
        continue;
      }
      if (client_events & (POLLIN | POLLHUP | POLLERR)) {
        read_into(c->client.get(), c->up, c->broken);
      }
      if (upstream_events & (POLLIN | POLLHUP | POLLERR)) {
        read_into(c->upstream.get(), c->down, c->broken);
      }
      write_from(c->upstream.get(), c->up, c->broken);
      write_from(c->client.get(), c->down, c->broken);
    }
    connections.remove_if([](const Connection& connection) { return connection.done(); });
  }
}

} // namespace sandboxer::forward
