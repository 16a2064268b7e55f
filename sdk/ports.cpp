#include <algorithm>
#include <arpa/inet.h>
#include <cerrno>
#include <cstring>
#include <dirent.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <fstream>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <sandboxer/error.hpp>
#include <sandboxer/ports.hpp>

#include "sdk/file_descriptor.hpp"

namespace sandboxer {
namespace {

bool is_wildcard(const std::string& address) {
  return address == "0.0.0.0" || address == "::";
}

// The socket inode that listens on (or is bound to) `port` of `protocol`, from /proc/net.
std::optional<std::string> inode_of(const std::string& protocol, int port) {
  for (const char* family : {"", "6"}) {
    std::ifstream table(fmt::format("/proc/net/{}{}", protocol, family));
    std::string line;
    std::getline(table, line); // the header
    while (std::getline(table, line)) {
      // "  0: 0100007F:3A98 00000000:0000 0A ... uid timeout inode"
      char local[64] = {};
      unsigned long inode = 0;
      unsigned state = 0;
      if (std::sscanf(line.c_str(), " %*d: %63s %*s %x %*s %*s %*s %*s %*s %lu", local, &state,
                      &inode) != 3) {
        continue;
      }
      const char* colon = std::strrchr(local, ':');
      // TCP: only a listener (state 0A) holds the port; UDP: any bound socket.
      if (colon && std::stoi(colon + 1, nullptr, 16) == port && inode != 0 &&
          (protocol != "tcp" || state == 0x0A)) {
        return std::to_string(inode);
      }
    }
  }
  return std::nullopt;
}

// "docker-proxy (pid 812)": the process with the socket `inode` open, when this user may look.
std::optional<std::string> holder_of(const std::string& inode) {
  const std::string wanted = "socket:[" + inode + "]";
  DIR* proc = ::opendir("/proc");
  if (!proc) {
    return std::nullopt;
  }
  std::optional<std::string> found;
  while (dirent* entry = ::readdir(proc)) {
    const std::string pid = entry->d_name;
    if (pid.find_first_not_of("0123456789") != std::string::npos) {
      continue;
    }
    DIR* fds = ::opendir(("/proc/" + pid + "/fd").c_str());
    if (!fds) {
      continue;
    }
    while (dirent* fd = ::readdir(fds)) {
      char target[64] = {};
      const std::string link = "/proc/" + pid + "/fd/" + fd->d_name;
      const ssize_t n = ::readlink(link.c_str(), target, sizeof target - 1);
      if (n > 0 && wanted == std::string(target, static_cast<size_t>(n))) {
        std::ifstream comm("/proc/" + pid + "/comm");
        std::string name;
        std::getline(comm, name);
        found = fmt::format("{} (pid {})", name.empty() ? "?" : name, pid);
        break;
      }
    }
    ::closedir(fds);
    if (found) {
      break;
    }
  }
  ::closedir(proc);
  return found;
}

// An IP literal and a port as a sockaddr; `length` 0 when the text is no IP address.
struct SocketAddress {
  sockaddr_storage storage{};
  socklen_t length = 0;
  SocketAddress(const std::string& address, int port) {
    auto* v4 = reinterpret_cast<sockaddr_in*>(&storage);
    auto* v6 = reinterpret_cast<sockaddr_in6*>(&storage);
    if (inet_pton(AF_INET, address.c_str(), &v4->sin_addr) == 1) {
      v4->sin_family = AF_INET;
      v4->sin_port = htons(static_cast<uint16_t>(port));
      length = sizeof *v4;
    } else if (inet_pton(AF_INET6, address.c_str(), &v6->sin6_addr) == 1) {
      v6->sin6_family = AF_INET6;
      v6->sin6_port = htons(static_cast<uint16_t>(port));
      length = sizeof *v6;
    }
  }
  sockaddr* get() { return reinterpret_cast<sockaddr*>(&storage); }
  // A socket of `protocol` of this address's family; -1 for no address.
  int open(const std::string& protocol) const {
    return length ? ::socket(storage.ss_family,
                             (protocol == "udp" ? SOCK_DGRAM : SOCK_STREAM) | SOCK_CLOEXEC, 0)
                  : -1;
  }
  int port() const {
    return ntohs(storage.ss_family == AF_INET
                     ? reinterpret_cast<const sockaddr_in*>(&storage)->sin_port
                     : reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_port);
  }
};

// A relay in front of the port (docker-proxy, QEMU's user-network forward, an ssh -L) accepts the
// connection itself and closes it at once when nothing listens behind it: a connection counts
// only when it is not ended within this while. A service that speaks first (ssh, smtp) has sent
// bytes by then, and one that waits for its client (http) keeps it open.
constexpr std::chrono::milliseconds k_relay_settle{200};

bool stays_open(int fd, std::chrono::milliseconds timeout) {
  pollfd reading{fd, POLLIN | POLLRDHUP, 0};
  const int settle = static_cast<int>(std::min(k_relay_settle, timeout).count());
  if (::poll(&reading, 1, settle) != 1) {
    return true;
  }
  char byte = 0;
  return ::recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT) > 0;
}

} // namespace

std::optional<int> port_number(std::string_view text) {
  if (text.empty() || text.size() > 5 || text.find_first_not_of("0123456789") != text.npos) {
    return std::nullopt;
  }
  const int port = std::stoi(std::string(text));
  if (port < 1 || port > 65535) {
    return std::nullopt;
  }
  return port;
}

void refuse_host_side_ports(std::string_view driver, std::string_view how,
                            const std::vector<PortSpec>& ports) {
  for (const auto& port : ports) {
    if (port.protocol != "tcp" || port.host_port || port.bind != PortSpec{}.bind) {
      throw DriverError(DriverError::Kind::invalid_spec,
                        fmt::format("{}: port {}/{}: {}; udp, host_port and bind have no meaning "
                                    "there",
                                    driver, port.port, port.protocol, how));
    }
  }
}

PortBinding host_binding(int port, std::string protocol, std::string host, int host_port) {
  PortBinding binding{port, std::move(protocol), std::move(host), host_port, ""};
  binding.url = port_url(binding);
  return binding;
}

std::string connect_host(const std::string& host) {
  return host == "0.0.0.0" ? "127.0.0.1" : host == "::" ? "::1" : host;
}

std::string exposed_ports_text(const std::vector<PortBinding>& ports) {
  std::vector<std::string> listed;
  for (const auto& binding : ports) {
    listed.push_back(fmt::format("{}/{}", binding.port, binding.protocol));
  }
  return listed.empty() ? std::string("it exposes none")
                        : fmt::format("it exposes {}", fmt::join(listed, ", "));
}

std::string port_url(const PortBinding& binding) {
  std::string host = connect_host(binding.host);
  if (host.find(':') != std::string::npos) {
    host = "[" + host + "]";
  }
  return fmt::format("{}://{}:{}", binding.protocol, host, binding.host_port.value_or(0));
}

bool tcp_answers(const std::string& host, int port, std::chrono::milliseconds timeout) {
  const std::string target = connect_host(host);
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(target.c_str(), std::to_string(port).c_str(), &hints, &found) != 0) {
    return false;
  }
  bool answered = false;
  for (addrinfo* at = found; at && !answered; at = at->ai_next) {
    FileDescriptor fd(::socket(at->ai_family, at->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (fd.get() < 0) {
      continue;
    }
    if (::connect(fd.get(), at->ai_addr, at->ai_addrlen) == 0) {
      answered = stays_open(fd.get(), timeout);
      continue;
    }
    if (errno != EINPROGRESS) {
      continue;
    }
    pollfd waiting{fd.get(), POLLOUT, 0};
    int error = 0;
    socklen_t length = sizeof error;
    answered = ::poll(&waiting, 1, static_cast<int>(timeout.count())) == 1 &&
               ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &error, &length) == 0 && error == 0 &&
               stays_open(fd.get(), timeout);
  }
  ::freeaddrinfo(found);
  return answered;
}

bool is_local_address(const std::string& address) {
  if (is_wildcard(address)) {
    return true;
  }
  in6_addr wanted6{};
  in_addr wanted4{};
  const bool v4 = inet_pton(AF_INET, address.c_str(), &wanted4) == 1;
  const bool v6 = !v4 && inet_pton(AF_INET6, address.c_str(), &wanted6) == 1;
  if (!v4 && !v6) {
    return false;
  }
  if (v4 && (ntohl(wanted4.s_addr) >> 24) == 127) {
    return true; // all of 127.0.0.0/8 is this machine's
  }
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) {
    return false;
  }
  bool found = false;
  for (ifaddrs* item = list; item && !found; item = item->ifa_next) {
    if (!item->ifa_addr) {
      continue;
    }
    if (v4 && item->ifa_addr->sa_family == AF_INET) {
      found = reinterpret_cast<sockaddr_in*>(item->ifa_addr)->sin_addr.s_addr == wanted4.s_addr;
    } else if (v6 && item->ifa_addr->sa_family == AF_INET6) {
      found = std::memcmp(&reinterpret_cast<sockaddr_in6*>(item->ifa_addr)->sin6_addr, &wanted6,
                          sizeof wanted6) == 0;
    }
  }
  ::freeifaddrs(list);
  return found;
}

std::optional<std::string> port_unavailable(const std::string& protocol, const std::string& address,
                                            int port) {
  SocketAddress at(address, port);
  if (!at.length) {
    return fmt::format("{} is not an IP address", address);
  }
  FileDescriptor fd(at.open(protocol));
  if (fd.get() < 0) {
    return std::nullopt; // no socket to try with: the backend will say
  }
  if (::bind(fd.get(), at.get(), at.length) == 0) {
    return std::nullopt;
  }
  const int error = errno;
  if (error == EADDRINUSE) {
    if (auto inode = inode_of(protocol, port)) {
      if (auto holder = holder_of(*inode)) {
        return "in use by " + *holder;
      }
    }
    return std::string("in use");
  }
  return std::nullopt; // not ours to judge (a port below 1024 for a root daemon): the backend's
}

int free_port(const std::string& protocol, const std::string& address) {
  SocketAddress at(address, 0);
  FileDescriptor fd(at.open(protocol));
  socklen_t size = at.length;
  if (fd.get() < 0 || ::bind(fd.get(), at.get(), at.length) != 0 ||
      ::getsockname(fd.get(), at.get(), &size) != 0) {
    throw DriverError(DriverError::Kind::error,
                      fmt::format("no free {} port on {}", protocol, address));
  }
  return at.port();
}

nlohmann::json port_specs_json(const std::vector<PortSpec>& ports) {
  nlohmann::json list = nlohmann::json::array();
  for (const auto& port : ports) {
    list.push_back({{"port", port.port},
                    {"protocol", port.protocol},
                    {"host_port", port.host_port ? nlohmann::json(*port.host_port) : nullptr},
                    {"bind", port.bind}});
  }
  return list;
}

std::vector<PortSpec> port_specs_from_json(const nlohmann::json& ports) {
  std::vector<PortSpec> specs;
  for (const auto& item : ports) {
    PortSpec spec;
    spec.port = item.value("port", 0);
    spec.protocol = item.value("protocol", "tcp");
    if (item.contains("host_port") && item["host_port"].is_number_integer()) {
      spec.host_port = item["host_port"].get<int>();
    }
    spec.bind = item.value("bind", "127.0.0.1");
    specs.push_back(std::move(spec));
  }
  return specs;
}

nlohmann::json port_bindings_json(const std::vector<PortBinding>& ports) {
  nlohmann::json list = nlohmann::json::array();
  for (const auto& port : ports) {
    list.push_back({{"port", port.port},
                    {"protocol", port.protocol},
                    {"host", port.host},
                    {"host_port", port.host_port ? nlohmann::json(*port.host_port) : nullptr},
                    {"url", port.url}});
  }
  return list;
}

} // namespace sandboxer
