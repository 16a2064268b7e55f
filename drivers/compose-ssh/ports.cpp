#include "drivers/compose-ssh/ports.hpp"

#include <algorithm>
#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <unistd.h>

#include <sandboxer/error.hpp>
#include <sandboxer/interrupt.hpp>
#include <sandboxer/ports.hpp>

namespace sandboxer::drivers::compose_ssh {
namespace {

using Kind = DriverError::Kind;
using nlohmann::json;

bool is_wildcard(const std::string& address) {
  return address.empty() || address == "0.0.0.0" || address == "::";
}

std::string bracketed(const std::string& address) {
  return address.find(':') != std::string::npos ? "[" + address + "]" : address;
}

// One published port of one container, as the engine reports it.
struct Published {
  std::string service;
  int port = 0;
  std::string protocol;
  std::string host_ip;
  int host_port = 0;
};

std::vector<Published> parse_published(const std::string& inspect_lines) {
  std::vector<Published> found;
  std::set<std::tuple<std::string, int, std::string, int>> seen;
  std::istringstream lines(inspect_lines);
  for (std::string line; std::getline(lines, line);) {
    const size_t space = line.find(' ');
    if (space == std::string::npos) {
      continue;
    }
    json ports = json::parse(line.substr(space + 1), nullptr, false);
    if (!ports.is_object()) {
      continue;
    }
    const std::string service = line.substr(0, space);
    for (const auto& [key, hosts] : ports.items()) {
      const size_t slash = key.find('/');
      const auto port = port_number(key.substr(0, slash));
      if (!port || slash == std::string::npos || !hosts.is_array()) {
        continue; // exposed, not published
      }
      for (const auto& host : hosts) {
        const auto host_port = port_number(host.value("HostPort", ""));
        // The engine lists a port published on every address twice (0.0.0.0 and ::): one is it.
        if (host_port && seen.emplace(service, *port, key.substr(slash + 1), *host_port).second) {
          found.push_back(
              {service, *port, key.substr(slash + 1), host.value("HostIp", ""), *host_port});
        }
      }
    }
  }
  return found;
}

} // namespace

std::string compose_port(const PortSpec& port) {
  return fmt::format("{}:{}:{}/{}", bracketed(port.bind),
                     port.host_port ? std::to_string(*port.host_port) : "", port.port,
                     port.protocol);
}

std::vector<PortBinding> read_bindings(const std::string& inspect_lines,
                                       const std::vector<PortSpec>& asked,
                                       const std::string& service, const std::string& host_name) {
  std::vector<Published> published = parse_published(inspect_lines);
  std::vector<bool> taken(published.size(), false);
  auto binding_of = [&](const Published& p) {
    return host_binding(p.port, p.protocol, is_wildcard(p.host_ip) ? host_name : p.host_ip,
                        p.host_port);
  };
  std::vector<PortBinding> bindings;
  for (const auto& want : asked) {
    std::optional<size_t> match;
    for (size_t i = 0; i < published.size(); ++i) {
      const Published& p = published[i];
      if (taken[i] || p.service != service || p.port != want.port || p.protocol != want.protocol ||
          (want.host_port && *want.host_port != p.host_port)) {
        continue;
      }
      // The user's compose file may publish the same port too: the profile's is on its bind.
      if (!match || p.host_ip == want.bind) {
        match = i;
      }
    }
    if (!match) {
      throw DriverError(Kind::error,
                        fmt::format("compose-ssh: the engine on {} did not publish port {}/{} of "
                                    "service {}",
                                    host_name, want.port, want.protocol, service));
    }
    taken[*match] = true;
    bindings.push_back(binding_of(published[*match]));
  }
  for (size_t i = 0; i < published.size(); ++i) {
    if (!taken[i]) {
      bindings.push_back(binding_of(published[i]));
    }
  }
  return bindings;
}

std::string forward_target(const PortBinding& binding) {
  const bool address =
      binding.host.find_first_not_of("0123456789.:abcdefABCDEF") == std::string::npos &&
      (binding.host.find('.') != std::string::npos || binding.host.find(':') != std::string::npos);
  return !address || is_wildcard(binding.host) ? "127.0.0.1" : binding.host;
}

namespace {

constexpr auto k_look_interval = std::chrono::milliseconds(200);
constexpr auto k_longest_backoff = std::chrono::seconds(10);
// How long a probe's connection must stay open to count as answered (see answers_over_ssh).
constexpr auto k_held_means_answered = std::chrono::milliseconds(500);

// What a tunnel's ssh said on stderr, once it ended.
std::string said_by(proc::Child& child) {
  std::string text;
  char buffer[4096];
  ssize_t n;
  while (text.size() < 16384 && (n = ::read(child.stderr_fd(), buffer, sizeof buffer)) > 0) {
    text.append(buffer, static_cast<size_t>(n));
  }
  return text;
}

std::string local_ports(const std::vector<PortForward>& ports) {
  std::vector<std::string> listed;
  for (const auto& forward : ports) {
    listed.push_back(fmt::format("127.0.0.1:{}", forward.local_port));
  }
  return fmt::format("{}", fmt::join(listed, ", "));
}

bool all_listening(const std::vector<PortForward>& ports) {
  return std::all_of(ports.begin(), ports.end(), [](const PortForward& forward) {
    return port_unavailable("tcp", "127.0.0.1", forward.local_port).has_value();
  });
}

} // namespace

void forward_over_ssh(const Ssh& ssh, const std::vector<PortForward>& ports, ForwardIo& io) {
  std::vector<std::string> options = {"-N",
                                      "-o",
                                      "ExitOnForwardFailure=yes",
                                      "-o",
                                      "ServerAliveInterval=5",
                                      "-o",
                                      "ServerAliveCountMax=3"};
  for (const auto& forward : ports) {
    options.push_back("-L");
    options.push_back(fmt::format("127.0.0.1:{}:{}:{}", forward.local_port,
                                  bracketed(forward_target(forward.binding)),
                                  forward.binding.host_port.value_or(0)));
  }
  proc::Command command;
  command.argv = ssh.argv_without_command(options, true);
  bool ever_listened = false;
  auto backoff = std::chrono::milliseconds(1000);
  while (io.keep_going()) {
    proc::Child tunnel(command);
    tunnel.close_stdin();
    bool listening = false;
    while (!tunnel.exited()) {
      if (!listening && all_listening(ports)) {
        listening = ever_listened = true;
        backoff = std::chrono::milliseconds(1000);
        for (const auto& forward : ports) {
          io.listening(forward);
        }
      }
      if (!io.keep_going()) {
        tunnel.stop(std::chrono::milliseconds(0));
        return;
      }
      interrupt::sleep_for(k_look_interval); // a signal ends the tunnel with the Child
    }
    const std::string said = said_by(tunnel);
    if (!ever_listened) {
      // The first connection is the user's setup: a wrong key, a host down, a local port taken.
      auto failure = classify_ssh_failure(said, ssh.target(), ssh.where());
      const bool port_taken = said.find("forwarding") != std::string::npos ||
                              said.find("Address already in use") != std::string::npos;
      throw DriverError(port_taken                 ? Kind::conflict
                        : failure && failure->auth ? Kind::auth
                                                   : Kind::error,
                        failure && !port_taken
                            ? failure->message
                            : fmt::format("compose-ssh: forwarding {} through ssh to {} failed: {}",
                                          local_ports(ports), ssh.where(), last_lines(said, 1)));
    }
    io.notice(fmt::format("compose-ssh: the ssh connection to {} {}{}; reconnecting in {}s",
                          ssh.where(), listening ? "dropped" : "could not be made again",
                          said.empty() ? "" : " (" + last_lines(said, 1) + ")",
                          backoff.count() / 1000));
    const auto resume = std::chrono::steady_clock::now() + backoff;
    while (std::chrono::steady_clock::now() < resume) {
      if (!io.keep_going()) {
        return;
      }
      interrupt::sleep_for(k_look_interval);
    }
    backoff = std::min<std::chrono::milliseconds>(backoff * 2, k_longest_backoff);
  }
}

bool answers_over_ssh(const Ssh& ssh, const PortBinding& binding,
                      std::chrono::milliseconds timeout) {
  if (binding.protocol != "tcp" || !binding.host_port) {
    return false;
  }
  // ssh -W opens a connection from the host and joins it to ssh's stdin and stdout, which stay
  // open and quiet. A refusal ends ssh at once (its "open failed"), and so does the host's
  // docker-proxy, which accepts the connection itself and closes it while nothing listens behind
  // it: only a connection still held after a moment is a service that answered, as tcp_answers
  // judges one on this machine.
  ssh.connect();
  proc::Command command;
  command.argv = ssh.argv_without_command(
      {"-W", fmt::format("{}:{}", bracketed(forward_target(binding)), *binding.host_port)}, false);
  proc::Child probe(command);
  const auto held_for = std::min<std::chrono::milliseconds>(timeout, k_held_means_answered);
  const auto until = std::chrono::steady_clock::now() + held_for;
  while (std::chrono::steady_clock::now() < until) {
    if (probe.exited()) {
      return false;
    }
    interrupt::sleep_for(std::chrono::milliseconds(20));
  }
  return !probe.exited();
}

} // namespace sandboxer::drivers::compose_ssh
