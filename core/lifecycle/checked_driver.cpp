#include "core/lifecycle/checked_driver.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <sandboxer/error.hpp>
#include <sandboxer/log.hpp>

#include "sdk/json/limits.hpp"
#include "sdk/json/utf8.hpp"

namespace sandboxer {
namespace {

using json = nlohmann::json;

std::string text_problem(const std::string& text, size_t max_bytes) {
  if (text.size() > max_bytes) {
    return fmt::format("{} bytes long, over the limit of {}", text.size(), max_bytes);
  }
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  const auto* end = p + text.size();
  while (p < end) {
    if (*p < 0x20 || *p == 0x7f) {
      return "it holds a control character";
    }
    if (*p < 0x80) {
      ++p;
      continue;
    }
    const size_t length = json_text::utf8_sequence_length(p, static_cast<size_t>(end - p));
    if (length == 0) {
      return "it is not UTF-8";
    }
    p += length;
  }
  if (log::redact(text) != text) {
    return "it holds a secret's value";
  }
  return "";
}

// `value` with every secret the sandbox was handed masked, in keys and strings alike. The depth
// was checked first, so the recursion is bounded.
json masked(const json& value) {
  if (value.is_string()) {
    return log::redact(value.get_ref<const std::string&>());
  }
  if (value.is_array()) {
    json out = json::array();
    for (const auto& item : value) {
      out.push_back(masked(item));
    }
    return out;
  }
  if (value.is_object()) {
    json out = json::object();
    for (const auto& [key, item] : value.items()) {
      out[log::redact(key)] = masked(item);
    }
    return out;
  }
  return value;
}

class CheckedDriver final : public Driver {
public:
  CheckedDriver(std::unique_ptr<Driver> inner, std::string name, json spec)
      : m_inner(std::move(inner)), m_name(std::move(name)), m_spec(std::move(spec)) {}

  CreateResult create(const CreateRequest& request) override {
    CreateResult result = m_inner->create(request);
    if (auto problem = backend_id_problem(result.backend_id); !problem.empty()) {
      // Nothing can address what it made: its labels are what `reap --orphans` goes by.
      fail(fmt::format("create answered a backend id that cannot be kept: {}; what it made, if "
                       "anything, carries the label sandboxer.id={} for 'sandboxer reap "
                       "--orphans'",
                       problem, request.sandbox_id));
    }
    std::optional<std::string> problem;
    if (!result.info.is_object()) {
      problem = "it is not a JSON object";
    } else {
      problem = json_limits::problem_of(result.info, json_limits::k_max_info_bytes);
    }
    if (problem) {
      fail(fmt::format("create answered an info that cannot be kept ({}); {}", *problem,
                       undo_create(request, result.backend_id)));
    }
    result.info = masked(result.info);
    return result;
  }

  void destroy(const SandboxHandle& sandbox) override { m_inner->destroy(sandbox); }

private:
  // A pause's or resume's info, merged into the record's: an object within the limits, masked.
  json kept_info(json info, std::string_view verb) {
    if (!info.is_object()) {
      fail(fmt::format("{} answered an info that cannot be kept (it is not a JSON object)", verb));
    }
    if (auto problem = json_limits::problem_of(info, json_limits::k_max_info_bytes)) {
      fail(fmt::format("{} answered an info that cannot be kept ({})", verb, *problem));
    }
    return masked(info);
  }

public:
  BackendStatus status(const SandboxHandle& sandbox) override {
    BackendStatus status = m_inner->status(sandbox);
    status.detail = log::redact(status.detail);
    if (status.detail.size() > k_max_status_detail_bytes) {
      status.detail.resize(k_max_status_detail_bytes);
      status.detail += " [cut]";
    }
    return status;
  }

  SnapshotResult snapshot(const SandboxHandle& sandbox, const SnapshotRequest& request) override {
    SnapshotResult result = m_inner->snapshot(sandbox, request);
    if (auto problem = backend_id_problem(result.backend_ref); !problem.empty()) {
      fail(fmt::format("snapshot {} answered a reference that cannot be kept: {}",
                       request.snapshot_id, problem));
    }
    return result;
  }

  void delete_snapshot(const std::string& backend_ref) override {
    m_inner->delete_snapshot(backend_ref);
  }

  int exec(const SandboxHandle& sandbox, const ExecRequest& request, ExecIo& io) override {
    const int code = m_inner->exec(sandbox, request, io);
    if (code < 0 || code > 255) {
      fail(fmt::format("exec answered the exit status {}, outside 0-255", code));
    }
    return code;
  }

  void extend(const SandboxHandle& sandbox, TimePoint new_deadline) override {
    m_inner->extend(sandbox, new_deadline);
  }

  // The lines are the sandbox's own output, handed on as exec's are.
  void logs(const SandboxHandle& sandbox, const LogsRequest& request, LogSink& sink) override {
    m_inner->logs(sandbox, request, sink);
  }

  PathInfo stat_path(const SandboxHandle& sandbox, const std::string& path) override {
    PathInfo info = m_inner->stat_path(sandbox, path);
    if (info.kind == PathInfo::Kind::symlink) {
      if (auto problem = text_problem(info.link_target, k_max_status_detail_bytes);
          !problem.empty()) {
        fail(fmt::format("stat of {} answered a link target that cannot be used: {}", path,
                         problem));
      }
    }
    return info;
  }

  // The streams are checked where they are used: core/cp/extract reads what comes out as
  // untrusted, and what goes in is the core's own.
  void copy_in(const SandboxHandle& sandbox, const CopyInRequest& request,
               CopySource& source) override {
    m_inner->copy_in(sandbox, request, source);
  }

  void copy_out(const SandboxHandle& sandbox, const CopyOutRequest& request,
                CopySink& sink) override {
    m_inner->copy_out(sandbox, request, sink);
  }

  void forward(const SandboxHandle& sandbox, const std::vector<PortForward>& ports,
               ForwardIo& io) override {
    m_inner->forward(sandbox, ports, io);
  }

  bool port_answers(const SandboxHandle& sandbox, const PortBinding& binding,
                    std::chrono::milliseconds timeout) override {
    return m_inner->port_answers(sandbox, binding, timeout);
  }

  PauseResult pause(const SandboxHandle& sandbox, const PauseRequest& request) override {
    PauseResult result = m_inner->pause(sandbox, request);
    result.info = kept_info(std::move(result.info), "pause");
    result.how = log::redact(result.how.substr(0, 64));
    return result;
  }

  ResumeResult resume(const SandboxHandle& sandbox, const ResumeRequest& request) override {
    ResumeResult result = m_inner->resume(sandbox, request);
    if (result.backend_id) {
      if (auto problem = backend_id_problem(*result.backend_id); !problem.empty()) {
        fail(fmt::format("resume answered a backend id that cannot be kept: {}; what it made, if "
                         "anything, carries the label sandboxer.id={} for 'sandboxer reap "
                         "--orphans'",
                         problem, sandbox.sandbox_id));
      }
    }
    result.info = kept_info(std::move(result.info), "resume");
    return result;
  }

  std::vector<RemoteResource> list_remote(const Labels& selector) override {
    std::vector<RemoteResource> kept;
    for (auto& resource : m_inner->list_remote(selector)) {
      if (auto problem = backend_id_problem(resource.backend_id); !problem.empty()) {
        spdlog::warn("driver {}: list answered a resource whose id cannot be used ({}); "
                     "skipped",
                     m_name, problem);
        continue;
      }
      resource.state = log::redact(resource.state.substr(0, k_max_status_detail_bytes));
      kept.push_back(std::move(resource));
    }
    return kept;
  }

private:
  [[noreturn]] void fail(const std::string& what) const {
    throw DriverError(DriverError::Kind::error, fmt::format("driver {}: {}", m_name, what));
  }

  // Destroys what a create made before its answer was refused; says how that went.
  std::string undo_create(const CreateRequest& request, const std::string& backend_id) {
    SandboxHandle handle;
    handle.sandbox_id = request.sandbox_id;
    handle.backend_id = backend_id;
    handle.info = json::object();
    handle.spec = m_spec;
    try {
      m_inner->destroy(handle);
      return fmt::format("the resource it made ({}) was destroyed", backend_id);
    } catch (const Error& e) {
      return fmt::format("the resource it made ({}) could not be destroyed ({}); it carries the "
                         "label sandboxer.id={} for 'sandboxer reap --orphans'",
                         backend_id, log::redact(e.what()), request.sandbox_id);
    }
  }

  std::unique_ptr<Driver> m_inner;
  std::string m_name;
  json m_spec;
};

} // namespace

std::string backend_id_problem(const std::string& id) {
  if (id.empty()) {
    return "it is empty";
  }
  return text_problem(id, k_max_backend_id_bytes);
}

std::unique_ptr<Driver> checked_driver(std::unique_ptr<Driver> inner, std::string name,
                                       nlohmann::json spec) {
  return std::make_unique<CheckedDriver>(std::move(inner), std::move(name), std::move(spec));
}

} // namespace sandboxer
