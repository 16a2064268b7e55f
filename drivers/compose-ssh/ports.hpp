#pragma once
// The profile's `ports:` on a compose host (docs/drivers/compose-ssh.md, "Ports"): published by
// compose on the host, read back from the engine there, and brought to this machine through ssh.

#include <chrono>
#include <string>
#include <vector>

#include <sandboxer/driver.hpp>

#include "drivers/compose-ssh/ssh.hpp"

namespace sandboxer::drivers::compose_ssh {

// `port` in compose's short syntax: "127.0.0.1::8080/tcp" (the engine picks the host port) or
// "127.0.0.1:15432:5432/tcp".
std::string compose_port(const PortSpec& port);

// Where the engine on the host published the project's ports, from lines "SERVICE PORTS" (the
// service's container's NetworkSettings.Ports, as JSON): first
// one binding per `asked` port (of `service`, in order), then every other port the compose file
// itself publishes. An address the host binds on all of its interfaces is reported as `host_name`
// (the ssh host), any other as the host's own address. Throws DriverError when an asked port is
// not there.
std::vector<PortBinding> read_bindings(const std::string& inspect_lines,
                                       const std::vector<PortSpec>& asked,
                                       const std::string& service, const std::string& host_name);

// The address on the host that ssh forwards to for `binding`: its own address, or loopback for a
// port published on all of the host's interfaces.
std::string forward_target(const PortBinding& binding);

// Brings each port to 127.0.0.1:local_port through a connection of its own to the host (ssh -N
// -L), made again when it drops, until io.keep_going() is false or a signal.
void forward_over_ssh(const Ssh& ssh, const std::vector<PortForward>& ports, ForwardIo& io);

// Whether a TCP connection from the host to `binding` opens (ssh -W over the shared connection).
bool answers_over_ssh(const Ssh& ssh, const PortBinding& binding,
                      std::chrono::milliseconds timeout);

} // namespace sandboxer::drivers::compose_ssh
