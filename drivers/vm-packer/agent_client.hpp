#pragma once

#include <chrono>
#include <filesystem>
#include <string>

#include <sandboxer/driver.hpp>
#include <sandboxer/lock_file.hpp>

#include "drivers/vm-packer/unix_socket.hpp"

namespace sandboxer::drivers::vm_packer {

// The host's side of the guest agent (agent/wire.hpp) on one of a VM's virtio-serial ports,
// whose sockets are `dir`/agentN.sock. A port serves one session at a time: a session holds the
// port's lock file (agentN.lock) for its whole life.
class AgentSession {
public:
  // The first free port that answers a hello within `timeout`; throws sandboxer::Error when none
  // does (the guest is not up, or every port is busy).
  static AgentSession open(const std::filesystem::path& dir, int ports,
                           std::chrono::milliseconds timeout);
  // Whether the agent on port 0 answers a hello within `timeout`: readiness, for create.
  static bool answers(const std::filesystem::path& dir, std::chrono::milliseconds timeout);

  // Runs the command to its end: streams its output to `io`, forwards stdin, terminal size
  // changes and the signals sandboxer receives (interrupt.hpp). Returns the shell's status
  // (128+N when killed by signal N; 127/126 when it could not start, said on io.err).
  int exec(const ExecRequest& request, ExecIo& io);

private:
  AgentSession(UnixSocket socket, LockFile::Guard lock)
      : m_socket(std::move(socket)), m_lock(std::move(lock)) {}
  static UnixSocket greet(const std::filesystem::path& socket, std::chrono::milliseconds timeout);

  UnixSocket m_socket;
  LockFile::Guard m_lock;
};

} // namespace sandboxer::drivers::vm_packer
