// `sandboxer cp`: files into and out of a running sandbox, through the driver's own copy or tar
// over its exec, each copy one `files.copied` entry in the sandbox's history.
#include "core/lifecycle/engine_internal.hpp"

namespace sandboxer {
using namespace engine_internal;
using namespace lifecycle_rules;

namespace {

using Via = cp::Channel::Via;

std::string size_text(uint64_t bytes) {
  if (bytes < 1024) {
    return fmt::format("{} B", bytes);
  }
  if (bytes < 1024 * 1024) {
    return fmt::format("{:.1f} KiB", static_cast<double>(bytes) / 1024);
  }
  return fmt::format("{:.1f} MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
}

// The driver's own copy where it has one, else tar over its exec; refused before any transfer
// when it has neither, or not the one asked for (exit 7).
Via choose_via(const DriverFactory& factory, const CopyRequest& request, const std::string& id) {
  const Capabilities caps = factory.capabilities();
  const bool native = caps.copy && request.via != CopyRequest::Via::exec;
  const bool exec = caps.exec && request.via != CopyRequest::Via::native;
  if (!native && !exec) {
    throw PolicyError(fmt::format(
        "cp: driver {} cannot copy files into or out of sandbox {}: it has {}{}", factory.name(),
        id,
        request.via == CopyRequest::Via::any      ? "neither a copy of its own nor exec with stdin"
        : request.via == CopyRequest::Via::native ? "no copy of its own (--via native)"
                                                  : "no exec (--via exec)",
        " (docs/cp.md)"));
  }
  if (native && request.options.owner && request.direction == CopyRequest::Direction::in &&
      !caps.copy_owner) {
    throw PolicyError(fmt::format("cp --owner: driver {} cannot choose who owns the files it "
                                  "copies (docs/cp.md)",
                                  factory.name()));
  }
  return native ? Via::native : Via::exec;
}

} // namespace

cp::CopyResult Engine::copy(const std::string& id_or_name, const CopyRequest& request) {
  SandboxRecord record = get(id_or_name);
  Opened opened = open_driver(record);
  const Via via = choose_via(*opened.factory, request, record.id);
  if (record.state == State::paused && record.policy.resume_on_exec) {
    record = resume(record.id, "resume on cp (resume: {on_exec: true})");
  }
  if (record.state != State::running) {
    throw ConflictError(fmt::format("sandbox {} is {}, not running: cp needs a running sandbox{}",
                                    record.id, to_string(record.state), not_running_hint(record)));
  }
  cp::Channel channel(*opened.driver, handle_of(record), via);
  spdlog::debug("cp: sandbox {} through {} ({})", record.id,
                via == Via::native ? "the driver's own copy" : "tar over exec",
                opened.factory->name());
  const bool in = request.direction == CopyRequest::Direction::in;
  // Where it goes is decided before any byte moves; a refusal there changes nothing, so it is not
  // history.
  std::optional<cp::InPlan> in_plan;
  std::optional<cp::OutPlan> out_plan;
  if (in) {
    in_plan =
        cp::plan_copy_in(channel, request.sources, request.destination, request.options.follow);
  } else {
    out_plan = cp::plan_copy_out(channel, request.sources.front(), request.destination);
  }
  cp::CopyResult result;
  auto record_copy = [&](const std::string& outcome, const std::string& reason) {
    nlohmann::json copy = cp::to_json(result);
    copy["outcome"] = outcome;
    for (auto& source : copy["sources"]) {
      source = log::redact(source.get<std::string>());
    }
    copy["destination"] = log::redact(copy["destination"].get<std::string>());
    update(record.id, [&](SandboxRecord& r) {
      r.transition(EventKind::files_copied, r.state, m_clock.now(), m_actor, reason,
                   {{"copy", copy}});
    });
  };
  const std::string what = in ? fmt::format("cp into {}", log::redact(in_plan->directory))
                              : fmt::format("cp out of {}", log::redact(out_plan->sandbox_path));
  try {
    if (in) {
      cp::copy_in(channel, *in_plan, request.options, result);
    } else {
      cp::copy_out(channel, *out_plan, request.options, result);
    }
  } catch (const Interrupted& e) {
    interrupt::Shield recording;
    record_copy("interrupted",
                fmt::format("{} interrupted by {} after {}", what,
                            interrupt::signal_name(e.signal()), size_text(result.stream_bytes)));
    throw;
  } catch (const Error& e) {
    interrupt::Shield recording;
    const bool unverified = e.code() == ExitCode::unverified;
    record_copy(unverified ? "unverified" : "failed",
                fmt::format("{} {}: {}", what, unverified ? "did not verify" : "failed",
                            log::redact(e.what())));
    throw;
  }
  interrupt::Shield recording;
  record_copy("complete",
              fmt::format("{}: {} file(s), {}{}", what, result.files, size_text(result.bytes),
                          result.verified ? ", verified" : ""));
  return result;
}

} // namespace sandboxer
