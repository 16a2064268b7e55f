#include "drivers/vm-packer/qmp.hpp"

#include <fmt/format.h>
#include <thread>

#include <sandboxer/error.hpp>
#include <sandboxer/interrupt.hpp>

namespace sandboxer::drivers::vm_packer {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

// QMP's own limit is far above this; a line past it is not QEMU talking.
constexpr std::size_t k_max_line = 16 << 20;

} // namespace

Qmp Qmp::connect(const std::filesystem::path& socket, std::chrono::milliseconds timeout) {
  Qmp qmp(UnixSocket::connect(socket));
  auto deadline = Clock::now() + timeout;
  json greeting = qmp.next_message(deadline);
  if (!greeting.contains("QMP")) {
    throw DriverError(DriverError::Kind::error, "the QMP socket did not greet like QEMU");
  }
  qmp.execute("qmp_capabilities", json::object(), timeout);
  return qmp;
}

json Qmp::next_message(UnixSocket::Deadline deadline) {
  while (true) {
    auto end = m_buffer.find('\n');
    if (end != std::string::npos) {
      std::string line = m_buffer.substr(0, end);
      m_buffer.erase(0, end + 1);
      json message = json::parse(line, nullptr, false);
      if (message.is_discarded() || !message.is_object()) {
        throw DriverError(DriverError::Kind::error, "QEMU sent something that is not QMP");
      }
      return message;
    }
    if (m_buffer.size() > k_max_line) {
      throw DriverError(DriverError::Kind::error, "QEMU sent an over-long QMP line");
    }
    if (!m_socket.read_some(m_buffer, deadline)) {
      throw DriverError(DriverError::Kind::error, "QEMU closed its QMP socket");
    }
  }
}

json Qmp::execute(const std::string& command, const json& arguments,
                  std::chrono::milliseconds timeout) {
  auto deadline = Clock::now() + timeout;
  json request = {{"execute", command}};
  if (!arguments.empty()) {
    request["arguments"] = arguments;
  }
  json reply;
  try {
    m_socket.write_all(request.dump() + "\n", deadline);
    // Events ({"event": ...}) may come first: not what we wait for.
    do {
      reply = next_message(deadline);
    } while (!reply.contains("return") && !reply.contains("error"));
  } catch (const Interrupted&) {
    throw;
  } catch (const Error& e) {
    throw DriverError(DriverError::Kind::error, fmt::format("QMP {}: {}", command, e.what()));
  }
  if (reply.contains("error")) {
    throw DriverError(DriverError::Kind::error,
                      fmt::format("QEMU refused {}: {}", command,
                                  reply["error"].value("desc", reply["error"].dump())));
  }
  return reply["return"];
}

void Qmp::run_job(const std::string& command, const std::string& job_id, json arguments,
                  std::chrono::milliseconds timeout) {
  auto deadline = Clock::now() + timeout;
  arguments["job-id"] = job_id;
  execute(command, arguments);
  while (true) {
    for (const json& job : execute("query-jobs")) {
      if (job.value("id", "") != job_id || job.value("status", "") != "concluded") {
        continue;
      }
      std::string error = job.value("error", "");
      execute("job-dismiss", {{"id", job_id}});
      if (!error.empty()) {
        throw DriverError(DriverError::Kind::error,
                          fmt::format("QEMU's {} failed: {}", command, error));
      }
      return;
    }
    if (Clock::now() > deadline) {
      throw DriverError(DriverError::Kind::error,
                        fmt::format("QEMU's {} did not finish in time", command));
    }
    interrupt::sleep_for(std::chrono::milliseconds(20));
  }
}

} // namespace sandboxer::drivers::vm_packer
