// Pause and resume (docs/pause.md): the sandbox keeps its files (and, where the driver can, its
// running processes) while it holds no CPU and, for some drivers, no memory.
#include <algorithm>

#include <sandboxer/ports.hpp>

#include "core/errors.hpp"
#include "core/lifecycle/engine_internal.hpp"

namespace sandboxer {
using namespace engine_internal;
using namespace lifecycle_rules;

namespace {

// Refused before any call, with nothing written (exit 7), as a verb the driver lacks is.
void require_pause(const DriverFactory& factory, std::string_view verb) {
  if (!factory.capabilities().pause) {
    throw PolicyError(fmt::format("{} is not supported by driver {} (docs/pause.md lists the "
                                  "drivers that can pause)",
                                  verb, factory.name()));
  }
}

// The deadline while paused: with ttl.paused_max, the pause's own allowance; without, the TTL
// runs on. Never past ttl.max.
std::optional<TimePoint> paused_deadline(const SandboxRecord& record, TimePoint now) {
  std::optional<TimePoint> deadline = record.expires_at;
  if (record.policy.paused_max) {
    deadline = now + *record.policy.paused_max;
  }
  if (deadline && record.max_expires_at) {
    deadline = std::min(*deadline, *record.max_expires_at);
  }
  return deadline;
}

// The deadline once running again: what the TTL had left when it paused, when paused_max froze
// it; else the TTL as it ran on. Never past ttl.max.
std::optional<TimePoint> resumed_deadline(const SandboxRecord& record, TimePoint now) {
  std::optional<TimePoint> deadline = record.expires_at;
  if (record.pause && record.pause->ttl_left) {
    deadline = now + *record.pause->ttl_left;
  }
  if (deadline && record.max_expires_at) {
    deadline = std::min(*deadline, *record.max_expires_at);
  }
  return deadline;
}

nlohmann::json time_or_null(const std::optional<TimePoint>& time) {
  return time ? nlohmann::json(format_time(*time)) : nlohmann::json();
}

// Where the backend stands after a failed pause or resume; unknown when it cannot say either.
BackendStatus::State backend_state_or_unknown(Driver& driver, const SandboxRecord& record) {
  try {
    return driver.status(handle_of(record)).state;
  } catch (const Error&) {
    return BackendStatus::State::unknown;
  }
}

} // namespace

PauseOutcome Engine::pause(const std::string& id_or_name, const PauseOptions& options) {
  SandboxRecord record = get(id_or_name);
  Opened opened = open_driver(record);
  require_pause(*opened.factory, "pause");
  const std::string& actor = options.actor.empty() ? m_actor : options.actor;
  {
    auto tx = m_ledger.begin();
    auto& found = find_or_throw(m_ledger, tx, record.id);
    if (found.state == State::paused) {
      return {found, true};
    }
    if (found.state != State::running) {
      throw ConflictError(fmt::format("sandbox {} is {}; only a running sandbox can be paused{}",
                                      found.id, to_string(found.state), not_running_hint(found)));
    }
    if (found.lease) {
      throw ConflictError(fmt::format("sandbox {} is held by a lease of {} (sandboxer run): it is "
                                      "in use; pause it when that run has ended",
                                      found.id, found.lease->holder));
    }
    if (options.blocker) {
      if (auto why = options.blocker(found)) {
        throw ConflictError(fmt::format("sandbox {} was not paused: {}", found.id, *why));
      }
    }
    const TimePoint now = m_clock.now();
    PauseState pause;
    pause.id = new_pause_id();
    pause.cause = options.cause;
    pause.requested_at = now;
    pause.emulated = opened.factory->capabilities().pause_emulated;
    if (found.policy.paused_max && found.expires_at) {
      pause.ttl_left =
          std::max(Seconds(0), std::chrono::duration_cast<Seconds>(*found.expires_at - now));
    }
    found.pause = pause;
    size_t before = found.history.size();
    nlohmann::json details = options.details;
    details["pause_id"] = pause.id;
    details["cause"] = pause.cause;
    found.transition(EventKind::pausing, State::pausing, now, actor, options.reason, details);
    commit(tx, found, before);
    record = found;
  }
  m_events.deliver();
  return {run_pause(record, opened, actor), false};
}

// The driver's part of a pause recorded as `pausing`, and its outcome: also what reap's repair
// calls again for one whose process died (the same pause id: drivers take a repeat as done).
SandboxRecord Engine::run_pause(const SandboxRecord& record, Opened& opened,
                                const std::string& actor) {
  const auto started = Stopwatch::now();
  Stopwatch driver_time;
  PauseRequest request;
  request.pause_id = record.pause ? record.pause->id : new_pause_id();
  request.memory = record.policy.pause_memory;
  request.keep_until = paused_deadline(record, m_clock.now());
  try {
    PauseResult result =
        driver_time.time([&] { return opened.driver->pause(handle_of(record), request); });
    return update(record.id, [&](SandboxRecord& r) {
      const TimePoint now = m_clock.now();
      if (!r.pause) {
        r.pause = PauseState{.id = request.pause_id, .requested_at = now};
      }
      r.pause->at = now;
      r.pause->how = result.how;
      r.pause->memory = result.memory_kept;
      r.pause->held_bytes = result.held_bytes;
      r.info.update(result.info);
      r.expires_at = paused_deadline(r, now);
      nlohmann::json details = driver_time.details(started);
      details["pause_id"] = r.pause->id;
      details["how"] = result.how;
      details["memory"] = result.memory_kept;
      if (r.pause->emulated) {
        details["emulated"] = true;
      }
      if (result.held_bytes) {
        details["held_bytes"] = *result.held_bytes;
      }
      details["until"] = time_or_null(r.expires_at);
      r.transition(EventKind::paused, State::paused, now, actor,
                   fmt::format("paused ({}{})", result.how,
                               result.memory_kept ? ", memory kept" : ", files only"),
                   details);
    });
  } catch (const Interrupted&) {
    // Left `pausing`: reap's repair finishes it (or finds it running) once this process is gone.
    throw;
  } catch (const Error& e) {
    // Where the backend is now decides the record: still running (the pause did nothing), or left
    // `pausing` for reap's repair to settle.
    const BackendStatus::State now = backend_state_or_unknown(*opened.driver, record);
    const bool runs = now == BackendStatus::State::running;
    const std::string message = log::redact(e.what());
    try {
      update(record.id, [&](SandboxRecord& r) {
        r.error = message;
        nlohmann::json details = driver_time.details(started);
        details["pause_id"] = request.pause_id;
        if (runs) {
          r.pause.reset();
          r.transition(EventKind::pause_failed, State::running, m_clock.now(), actor,
                       "pause failed: " + message, details);
        } else {
          details["backend"] = to_string(now);
          r.transition(EventKind::pause_failed, State::pausing, m_clock.now(), actor,
                       "pause failed; 'sandboxer reap' settles it: " + message, details);
        }
      });
    } catch (const Error& recording) {
      spdlog::error("{}: could not record the failed pause: {}", record.id,
                    log::redact(recording.what()));
    }
    throw;
  }
}

SandboxRecord Engine::resume(const std::string& id_or_name, const std::string& reason) {
  SandboxRecord record = get(id_or_name);
  Opened opened = open_driver(record);
  require_pause(*opened.factory, "resume");
  std::string ledger_id;
  {
    auto tx = m_ledger.begin();
    auto& found = find_or_throw(m_ledger, tx, record.id);
    if (found.state == State::running) {
      return found; // resumed already: nothing to do
    }
    if (found.state != State::paused) {
      throw ConflictError(fmt::format("sandbox {} is {}; only a paused sandbox can be resumed{}",
                                      found.id, to_string(found.state), not_running_hint(found)));
    }
    size_t before = found.history.size();
    found.transition(EventKind::resuming, State::resuming, m_clock.now(), m_actor, reason,
                     {{"pause_id", found.pause ? found.pause->id : ""}});
    commit(tx, found, before);
    record = found;
    ledger_id = tx->ledger_id();
  }
  m_events.deliver();
  return run_resume(record, opened, ledger_id, m_actor);
}

SandboxRecord Engine::run_resume(const SandboxRecord& record, Opened& opened,
                                 const std::string& ledger_id, const std::string& actor) {
  const auto started = Stopwatch::now();
  Stopwatch driver_time;
  const CreateRequest made = create_request(record, ledger_id);
  ResumeRequest request;
  request.pause_id = record.pause ? record.pause->id : "";
  request.expires_at = resumed_deadline(record, m_clock.now());
  request.labels = made.labels;
  request.ports = made.ports;
  request.bindings = record.ports;
  SandboxRecord resumed;
  try {
    ResumeResult result =
        driver_time.time([&] { return opened.driver->resume(handle_of(record), request); });
    resumed = update(record.id, [&](SandboxRecord& r) {
      const TimePoint now = m_clock.now();
      nlohmann::json details = driver_time.details(started);
      details["pause_id"] = request.pause_id;
      if (r.pause && r.pause->at) {
        details["paused_for"] =
            format_duration(std::chrono::duration_cast<Seconds>(now - *r.pause->at));
      }
      if (result.backend_id && *result.backend_id != r.backend_id) {
        details["backend_id"] = {{"before", r.backend_id}, {"now", *result.backend_id}};
        r.backend_id = *result.backend_id;
      }
      r.info.update(result.info);
      const bool ports_moved = result.ports && *result.ports != r.ports;
      if (result.ports) {
        r.ports = *result.ports;
      }
      r.expires_at = resumed_deadline(r, now);
      details["until"] = time_or_null(r.expires_at);
      r.pause.reset();
      r.error.reset();
      r.transition(EventKind::resumed, State::running, now, actor, "resumed", details);
      if (ports_moved && !r.ports.empty()) {
        r.transition(
            EventKind::ports_exposed, State::running, now, actor,
            fmt::format("{} port(s) exposed again after the resume", r.ports.size()),
            {{"ports", port_bindings_json(r.ports)}, {"until", time_or_null(r.expires_at)}});
      }
    });
  } catch (const Interrupted&) {
    throw; // left `resuming`: reap's repair finishes it
  } catch (const DriverError& e) {
    const std::string message = log::redact(e.what());
    if (e.kind() == DriverError::Kind::not_found) {
      record_failure(
          record.id, e, EventKind::resume_failed, State::paused, actor,
          "the backend vanished while it was paused: ", {{"pause_id", request.pause_id}});
      throw NotFoundError(fmt::format("sandbox {} cannot be resumed: its backend vanished while it "
                                      "was paused ({}); 'sandboxer destroy {}' closes the record",
                                      record.id, message, record.id));
    }
    settle_failed_resume(record, opened, e, request.pause_id, actor);
    throw;
  } catch (const Error& e) {
    settle_failed_resume(record, opened, e, request.pause_id, actor);
    throw;
  }
  if (resumed.policy.ready) {
    // As at create: the port must answer before it is called ready; a timeout leaves it running
    // (exit 11), since the files and processes are the user's.
    wait_until_ready(resumed, *opened.driver);
  }
  return resumed;
}

// A resume failed: back to paused when the backend still is (or says nothing), running when it
// runs after all.
void Engine::settle_failed_resume(const SandboxRecord& record, Opened& opened, const Error& error,
                                  const std::string& pause_id, const std::string& actor) {
  const BackendStatus::State now = backend_state_or_unknown(*opened.driver, record);
  if (now == BackendStatus::State::running) {
    record_failure(record.id, error, EventKind::resume_failed, State::resuming, actor,
                   "resume failed, though the backend runs; 'sandboxer reap' settles it: ",
                   {{"pause_id", pause_id}, {"backend", to_string(now)}});
    return;
  }
  record_failure(record.id, error, EventKind::resume_failed, State::paused, actor,
                 "resume failed: ", {{"pause_id", pause_id}, {"backend", to_string(now)}});
}

SandboxRecord Engine::finish_pause(const SandboxRecord& stuck, const std::string& actor) {
  Opened opened = open_driver(stuck);
  if (stuck.state == State::pausing) {
    return run_pause(stuck, opened, actor);
  }
  std::string ledger_id = m_ledger.read().ledger_id;
  return run_resume(stuck, opened, ledger_id, actor);
}

} // namespace sandboxer
