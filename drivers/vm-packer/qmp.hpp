#pragma once

#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "drivers/vm-packer/unix_socket.hpp"

namespace sandboxer::drivers::vm_packer {

// A QEMU Machine Protocol session on a VM's QMP socket: the greeting and qmp_capabilities on
// connect, then commands one at a time, each with a deadline. Events that arrive in between
// are skipped. Errors are sandboxer::Error naming the command and QEMU's words.
class Qmp {
public:
  static Qmp connect(const std::filesystem::path& socket, std::chrono::milliseconds timeout);

  // The command's "return" value.
  nlohmann::json execute(const std::string& command,
                         const nlohmann::json& arguments = nlohmann::json::object(),
                         std::chrono::milliseconds timeout = std::chrono::seconds(10));
  // Starts a job command (snapshot-save, snapshot-delete) with `job_id` and waits until it has
  // concluded, then dismisses it; a job that ended with an error throws its error.
  void run_job(const std::string& command, const std::string& job_id, nlohmann::json arguments,
               std::chrono::milliseconds timeout);

private:
  explicit Qmp(UnixSocket socket) : m_socket(std::move(socket)) {}
  nlohmann::json next_message(UnixSocket::Deadline deadline);

  UnixSocket m_socket;
  std::string m_buffer;
};

} // namespace sandboxer::drivers::vm_packer
