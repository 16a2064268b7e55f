// What is done with a running sandbox: extend its deadline, exec in it, ask its status, read its
// logs.
#include "core/errors.hpp"
#include "core/lifecycle/engine_internal.hpp"

namespace sandboxer {
using namespace engine_internal;
using namespace lifecycle_rules;

ExtendOutcome Engine::extend(const std::string& id_or_name, const ExtendOptions& options) {
  SandboxRecord record = get(id_or_name);
  if (!is_live(record.state)) {
    throw Error(ExitCode::runtime, fmt::format("sandbox {} is {}; only a live sandbox can be "
                                               "extended",
                                               record.id, to_string(record.state)));
  }
  // Under a lease, extend moves the TTL that caps the lease; the lease keeps the deadline while
  // its holder renews it (docs/run.md, "extend").
  const std::optional<TimePoint> current = ttl_deadline(record);
  if (!current) {
    throw PolicyError(fmt::format("sandbox {} has no TTL (its profile says ttl: none); there is "
                                  "nothing to extend",
                                  record.id));
  }
  TimePoint now = m_clock.now();
  std::optional<TimePoint> wanted_or_none =
      options.to ? options.to : add_checked(*current, options.by.value_or(Seconds(0)));
  if (!wanted_or_none) {
    throw UsageError(fmt::format("extending {} by {} would go past the year 9999", record.id,
                                 format_duration(options.by.value_or(Seconds(0)))));
  }
  TimePoint wanted = *wanted_or_none;
  if (wanted <= now) {
    throw UsageError(
        fmt::format("the new deadline {} of {} is in the past", format_time(wanted), record.id));
  }
  std::vector<std::string> notices;
  TimePoint granted = wanted;
  if (record.max_expires_at && wanted > *record.max_expires_at) {
    granted = *record.max_expires_at;
    if (granted <= *current) {
      throw PolicyError(fmt::format("sandbox {} already lives until its maximum {} (ttl.max of "
                                    "profile {}); it cannot be extended",
                                    record.id, format_time(granted), record.profile.name));
    }
    notices.push_back(fmt::format("deadline {} capped to {} (ttl.max of profile {})",
                                  format_time(wanted), format_time(granted), record.profile.name));
  }
  if (record.lease) {
    notices.push_back(fmt::format(
        "{} is held by a {} lease of {} (now until {}): extend moved the "
        "TTL that caps the lease to {}; the sandbox still ends when its holder stops renewing, "
        "or at that TTL",
        record.id, format_duration(record.lease->duration.value_or(Seconds(0))),
        record.lease->holder, format_time(record.expires_at.value_or(now)), format_time(granted)));
  }
  Opened opened = open_driver(record);
  if (opened.factory->capabilities().native_ttl) {
    opened.driver->extend(handle_of(record), granted);
  }
  auto updated = update(record.id, [&](SandboxRecord& r) {
    const std::optional<TimePoint> from = ttl_deadline(r);
    nlohmann::json details = {{"from", from ? format_time(*from) : ""},
                              {"to", format_time(granted)}};
    if (record.max_expires_at && wanted > *record.max_expires_at) {
      details["capped"] = notices.front();
      details["requested"] = format_time(wanted);
    }
    if (r.lease) {
      details["lease_holder"] = r.lease->holder;
      r.lease->ttl_expires_at = granted;
    } else {
      r.expires_at = granted;
    }
    // An expired sandbox whose destroy failed lives again once its deadline moves ahead.
    State to = r.state == State::expired ? State::running : r.state;
    r.transition(EventKind::extended, to, now, m_actor, "extended to " + format_time(granted),
                 details);
  });
  for (const auto& notice : notices) {
    spdlog::warn("{}: {}", record.id, notice);
  }
  return {updated, notices};
}

int Engine::exec(const std::string& id_or_name, const ExecRequest& request, ExecIo& io) {
  SandboxRecord record = get(id_or_name);
  Opened opened = open_driver(record);
  require(*opened.factory, opened.factory->capabilities().exec, "exec");
  if (record.state == State::paused && record.policy.resume_on_exec) {
    record = resume(record.id, "resume on exec (resume: {on_exec: true})");
  }
  if (record.state != State::running) {
    // Its own code (docs/exit-codes.md): a CI script tells "the sandbox never ran" from "the
    // command failed".
    throw Error(ExitCode::conflict,
                fmt::format("sandbox {} is {}, not running: exec needs a running sandbox{}",
                            record.id, to_string(record.state), not_running_hint(record)));
  }
  if (request.user) {
    // Refused before any backend call: a driver that does not honour `user` would run the
    // command as the default user, silently.
    require(*opened.factory, opened.factory->capabilities().exec_user,
            fmt::format("exec -u {}", *request.user));
  }
  // The command is part of the evidence; registered secret values are masked in it.
  nlohmann::json exec = {{"argv", nlohmann::json::array()}, {"tty", request.tty}};
  if (request.user) {
    exec["user"] = *request.user;
  }
  for (const auto& arg : request.argv) {
    exec["argv"].push_back(log::redact(arg));
  }
  if (request.workdir) {
    exec["workdir"] = *request.workdir;
  }
  std::string summary = "exec " + log::redact(request.argv.empty() ? "" : request.argv.front());
  update(record.id, [&](SandboxRecord& r) {
    r.transition(EventKind::exec_started, r.state, m_clock.now(), m_actor, summary,
                 {{"exec", exec}});
  });
  const auto started = Stopwatch::now();
  Stopwatch driver_time;
  // The end of the command, whichever way it ended: its exit code (null when the driver failed).
  auto record_end = [&](nlohmann::json exit_code, const std::string& reason) {
    update(record.id, [&](SandboxRecord& r) {
      nlohmann::json details = driver_time.details(started);
      exec["exit_code"] = std::move(exit_code);
      details["exec"] = exec;
      r.transition(EventKind::exec_finished, r.state, m_clock.now(), m_actor, reason, details);
    });
  };
  int status = -1;
  const int signals_before = interrupt::count();
  try {
    status = driver_time.time([&] { return opened.driver->exec(handle_of(record), request, io); });
  } catch (const Interrupted& e) {
    // The driver could not hand the signal on, or its stream was cut: the end is recorded anyway.
    interrupt::Shield recording;
    exec["interrupted"] = interrupt::signal_name(e.signal());
    record_end(nullptr,
               fmt::format("{} interrupted by {}", summary, interrupt::signal_name(e.signal())));
    throw;
  } catch (const Error& e) {
    interrupt::Shield recording;
    std::string message = log::redact(e.what());
    exec["error"] = message;
    record_end(nullptr, summary + " failed: " + message);
    throw;
  }
  interrupt::Shield recording;
  if (interrupt::count() != signals_before) {
    // The signal went on to the command (as it would to a local one): its own exit is the end.
    const std::string name = interrupt::signal_name(interrupt::last_signal());
    exec["interrupted"] = name;
    record_end(status, fmt::format("{} interrupted by {}, exited {}", summary, name, status));
    return status;
  }
  record_end(status, fmt::format("{} exited {}", summary, status));
  return status;
}

BackendStatus Engine::status(const std::string& id_or_name) {
  SandboxRecord record = get(id_or_name);
  if (record.backend_id.empty()) {
    if (is_live(record.state) && m_drivers.find(record.driver).capabilities().list_by_label) {
      // A create killed before its outcome: what it made carries the sandbox's id.
      auto found = list_remote(record, {{"sandboxer.id", record.id}});
      if (!found.empty()) {
        return {found.front().state == "running" ? BackendStatus::State::running
                                                 : BackendStatus::State::unknown,
                fmt::format("create interrupted: {} ({}) found by its labels; 'sandboxer reap' "
                            "settles it",
                            found.front().backend_id, found.front().state)};
      }
    }
    return {BackendStatus::State::missing, "no backend resource was recorded"};
  }
  return open_driver(record).driver->status(handle_of(record));
}

void Engine::logs(const std::string& id_or_name, const LogsRequest& request, LogSink& sink) {
  SandboxRecord record = get(id_or_name);
  Opened opened = open_driver(record);
  require(*opened.factory, opened.factory->capabilities().logs, "logs");
  if (record.backend_id.empty() || record.state == State::destroyed) {
    // A destroyed sandbox's output went with its backend resource; the history remains. A failed
    // one is asked: what it printed may say why it failed, if the backend still has it.
    throw NotFoundError(fmt::format("sandbox {} is {}{}; its logs went with it ('sandboxer "
                                    "history {}' shows what happened to it)",
                                    record.id, to_string(record.state),
                                    record.backend_id.empty() ? " with no backend resource" : "",
                                    record.id));
  }
  opened.driver->logs(handle_of(record), request, sink);
}

} // namespace sandboxer
