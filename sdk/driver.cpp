#include <fmt/format.h>

#include <sandboxer/driver.hpp>
#include <sandboxer/error.hpp>
#include <sandboxer/log.hpp>
#include <sandboxer/ports.hpp>

namespace sandboxer {

void check_keys(const nlohmann::json& section, const std::vector<std::string>& allowed,
                const std::string& pointer_prefix) {
  if (!section.is_object()) {
    throw SpecError(pointer_prefix, "expected a map");
  }
  for (const auto& [key, value] : section.items()) {
    if (std::find(allowed.begin(), allowed.end(), key) != allowed.end()) {
      continue;
    }
    std::string message = fmt::format("unknown key \"{}\"", key);
    if (auto guess = closest_match(key, allowed)) {
      message += fmt::format(", did you mean \"{}\"?", *guess);
    } else {
      message += fmt::format(" (known keys: {})", fmt::join(allowed, ", "));
    }
    throw SpecError(pointer_prefix + "/" + key, message);
  }
}

const char* to_string(BackendStatus::State state) {
  switch (state) {
  case BackendStatus::State::running:
    return "running";
  case BackendStatus::State::stopped:
    return "stopped";
  case BackendStatus::State::paused:
    return "paused";
  case BackendStatus::State::missing:
    return "missing";
  case BackendStatus::State::unknown:
    return "unknown";
  }
  return "unknown";
}

int unstartable_command(std::string_view program, bool missing, ExecIo& io) {
  // log::prefix(): off a terminal the line carries its time, as every other stderr line does.
  io.err(fmt::format("{}exec: {}: {}\n", log::prefix(), program,
                     missing ? "command not found in the sandbox"
                             : "cannot be executed in the sandbox (permission denied or not a "
                               "program)"));
  return missing ? 127 : 126;
}

void Driver::unsupported(std::string_view driver, std::string_view verb) const {
  throw DriverError(DriverError::Kind::unsupported,
                    fmt::format("{} is not supported by driver {}", verb, driver));
}

// The defaults are only reached when the core's capability check was bypassed; they still fail
// cleanly rather than half-run.
SnapshotResult Driver::snapshot(const SandboxHandle&, const SnapshotRequest&) {
  unsupported("this", "snapshot");
}
void Driver::delete_snapshot(const std::string&) {
  unsupported("this", "snapshot rm");
}
int Driver::exec(const SandboxHandle&, const ExecRequest&, ExecIo&) {
  unsupported("this", "exec");
}
void Driver::extend(const SandboxHandle&, TimePoint) {
  unsupported("this", "native extend");
}
std::vector<RemoteResource> Driver::list_remote(const Labels&) {
  unsupported("this", "list by label");
}
std::vector<LogLine> select_log_lines(std::vector<LogLine> lines, const LogsRequest& request) {
  if (request.since) {
    std::erase_if(lines,
                  [&](const LogLine& line) { return line.time && *line.time < *request.since; });
  }
  if (request.tail && lines.size() > *request.tail) {
    lines.erase(lines.begin(), lines.end() - static_cast<std::ptrdiff_t>(*request.tail));
  }
  return lines;
}

void Driver::logs(const SandboxHandle&, const LogsRequest&, LogSink&) {
  unsupported("this", "logs");
}
PathInfo Driver::stat_path(const SandboxHandle&, const std::string&) {
  unsupported("this", "cp");
}
void Driver::copy_in(const SandboxHandle&, const CopyInRequest&, CopySource&) {
  unsupported("this", "cp");
}
void Driver::copy_out(const SandboxHandle&, const CopyOutRequest&, CopySink&) {
  unsupported("this", "cp");
}
void Driver::forward(const SandboxHandle&, const std::vector<PortForward>&, ForwardIo&) {
  unsupported("this", "forward");
}
PauseResult Driver::pause(const SandboxHandle&, const PauseRequest&) {
  unsupported("this", "pause");
}
ResumeResult Driver::resume(const SandboxHandle&, const ResumeRequest&) {
  unsupported("this", "resume");
}
bool Driver::port_answers(const SandboxHandle&, const PortBinding& binding,
                          std::chrono::milliseconds timeout) {
  return binding.protocol == "tcp" && binding.host_port &&
         tcp_answers(binding.host, *binding.host_port, timeout);
}

const char* to_string(PathInfo::Kind kind) {
  switch (kind) {
  case PathInfo::Kind::missing:
    return "missing";
  case PathInfo::Kind::file:
    return "file";
  case PathInfo::Kind::directory:
    return "directory";
  case PathInfo::Kind::symlink:
    return "symlink";
  case PathInfo::Kind::other:
    return "other";
  }
  return "other";
}

} // namespace sandboxer
