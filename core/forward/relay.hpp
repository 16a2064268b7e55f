#pragma once
// `sandboxer forward` for ports already on this machine (docker, vm-packer, a local external
// driver): a TCP relay from 127.0.0.1:LOCAL to the binding, in this process.

#include <vector>

#include <sandboxer/driver.hpp>

namespace sandboxer::forward {

// Listens on 127.0.0.1:local_port for each port and joins every connection to the binding's
// host:host_port, until io.keep_going() is false (polled every half second) or a signal
// (Interrupted). A local port that cannot be bound is a ConflictError naming it.
void relay(const std::vector<PortForward>& ports, ForwardIo& io);

} // namespace sandboxer::forward
