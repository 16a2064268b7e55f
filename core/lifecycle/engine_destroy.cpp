// Destroying a sandbox: by a user, by reap at its deadline, and an orphan that has no live record.
#include "core/lifecycle/engine_internal.hpp"

namespace sandboxer {
using namespace engine_internal;
using namespace lifecycle_rules;

namespace {

// A leased sandbox keeps its lease while it is being destroyed, so that a holder killed mid-destroy
// leaves it to reap; the lease ends with it, in the entry before `destroyed`.
void end_lease(SandboxRecord& r, const std::string& actor, TimePoint now) {
  if (!r.lease) {
    return;
  }
  r.transition(EventKind::lease_ended, r.state, now, actor,
               fmt::format("lease of {} ended by the destroy ({} renewal(s))", r.lease->holder,
                           r.lease->renewals),
               lease_summary(*r.lease, now, "destroyed"));
  r.lease.reset();
}

} // namespace

SandboxRecord Engine::destroy(const std::string& id_or_name, const std::string& reason,
                              const DestroyOptions& options) {
  SandboxRecord record;
  {
    auto tx = m_ledger.begin();
    auto& found = find_or_throw(m_ledger, tx, id_or_name);
    if (found.state == State::destroyed) {
      return found;
    }
    size_t before = found.history.size();
    found.transition(EventKind::destroying, State::destroying, m_clock.now(), m_actor, reason);
    commit(tx, found, before);
    record = found;
  }
  m_events.deliver();
  // The closed record comes from the commit itself: reading it back would scan the day's journal.
  return destroy_one(record, m_actor, reason, State::destroying, nlohmann::json::object(), options);
}

size_t Engine::remove_resources(const SandboxRecord& record, Opened& opened, bool recorded_too) {
  std::vector<std::string> backend_ids;
  if (opened.factory->capabilities().list_by_label) {
    for (const auto& found : opened.driver->list_remote({{"sandboxer.id", record.id}})) {
      if (recorded_too || found.backend_id != record.backend_id) {
        backend_ids.push_back(found.backend_id);
      }
    }
  }
  if (recorded_too && !record.backend_id.empty() &&
      std::find(backend_ids.begin(), backend_ids.end(), record.backend_id) == backend_ids.end()) {
    backend_ids.push_back(record.backend_id);
  }
  size_t removed = 0;
  for (const auto& backend_id : backend_ids) {
    SandboxHandle handle = handle_of(record);
    handle.backend_id = backend_id;
    try {
      opened.driver->destroy(handle);
      ++removed;
    } catch (const DriverError& e) {
      if (e.kind() != DriverError::Kind::not_found) {
        throw;
      }
    }
  }
  return removed;
}

// Calls the backend for a record whose intent (`intent`) is already committed, and records the
// outcome: destroyed, or back to the state before the intent with the error.
SandboxRecord Engine::destroy_one(const SandboxRecord& record, const std::string& actor,
                                  const std::string& reason, State intent,
                                  const nlohmann::json& failure_details,
                                  const DestroyOptions& options) {
  SandboxHandle handle = handle_of(record);
  if (options.force) {
    handle.stop_grace = std::chrono::seconds(0);
  } else if (options.grace) {
    handle.stop_grace = *options.grace;
  }
  // The intent entry's `from` is where the sandbox was before this destroy began.
  State before = record.history.back().from.value_or(State::running);
  const auto started = Stopwatch::now();
  Stopwatch driver_time;
  try {
    if (!record.backend_id.empty()) {
      Opened opened = open_driver(record);
      try {
        driver_time.time([&] { opened.driver->destroy(handle); });
      } catch (const DriverError& e) {
        if (e.kind() != DriverError::Kind::not_found) {
          throw;
        }
        spdlog::info("{}: already gone from the backend", record.id);
      }
      // A create whose answer was lost and then repeated may have left a second resource with
      // this record's id: every one of them goes with the record.
      if (opened.factory->capabilities().list_by_label) {
        size_t extra = driver_time.time([&] { return remove_resources(record, opened, false); });
        if (extra) {
          spdlog::warn("{}: also removed {} other backend resource(s) carrying its id", record.id,
                       extra);
        }
      }
    } else if (m_drivers.find(record.driver).capabilities().list_by_label) {
      // A create interrupted before it recorded its backend id (a SIGKILL, a crash) may still
      // have made something: the backend is asked by label before the sandbox is called gone.
      Opened opened = open_driver(record);
      size_t removed = driver_time.time([&] { return remove_resources(record, opened); });
      if (removed) {
        spdlog::info("{}: removed {} backend resource(s) found by its label", record.id, removed);
      }
    }
    return record_outcome(record.id, record.backend_id, "destroyed", [&](SandboxRecord& r) {
      r.error.reset();
      end_lease(r, actor, m_clock.now());
      r.transition(EventKind::destroyed, State::destroyed, m_clock.now(), actor, reason,
                   driver_time.details(started));
    });
  } catch (const OutcomeNotRecorded&) {
    throw;
  } catch (const Error& e) {
    if (options.forget) {
      // The operator closes the record whatever the backend says; its labels let
      // `reap --orphans` find what it may still hold.
      const std::string message = log::redact(e.what());
      spdlog::warn("{}: --forget: recorded as destroyed although the backend failed: {}; "
                   "'sandboxer reap --orphans' finds what it still has",
                   record.id, message);
      nlohmann::json details = driver_time.details(started);
      details["forgotten"] = true;
      details["backend_error"] = message;
      return record_outcome(record.id, record.backend_id, "destroyed", [&](SandboxRecord& r) {
        r.error = message;
        end_lease(r, actor, m_clock.now());
        r.transition(EventKind::destroyed, State::destroyed, m_clock.now(), actor,
                     reason + " (forgotten)", details);
      });
    }
    // An expired sandbox stays expired so the next reap retries it; a user's destroy goes back to
    // where it was, with the error in its history.
    State back = intent == State::expired ? State::expired : before;
    nlohmann::json details = driver_time.details(started);
    details.update(failure_details);
    record_failure(record.id, e, EventKind::destroy_failed, back, actor,
                   "destroy failed: ", std::move(details));
    throw;
  }
}

ExpiredDestroy Engine::destroy_expired(const std::string& id,
                                       const std::function<EndVerdict(const SandboxRecord&)>& judge,
                                       const RetryPolicy& retry, const std::string& actor) {
  ExpiredDestroy result;
  try {
    // Several reapers go through the same due sandboxes: one that another has is passed over
    // without waiting for the writers' turn.
    if (auto taken = m_ledger.store().taken_elsewhere(id, m_actor)) {
      result.message = *taken;
      return result;
    }
  } catch (const Error& e) {
    spdlog::debug("{}: claim pre-check: {}", id, e.what()); // the transaction below decides
  }
  SandboxRecord claimed;
  std::string ended_by;
  {
    // Claim it under the lock: a user (or, without the reaper lock, another reaper) may have
    // changed it since it was planned.
    auto tx = m_ledger.begin();
    auto* r = tx.find(id);
    if (!r) {
      result.message = "no longer in the ledger";
      return result;
    }
    EndVerdict verdict = judge(*r);
    if (verdict.blocked) {
      result.message = *verdict.blocked;
      return result;
    }
    // The engine's actor names this process (user@host pid): the claim's holder.
    if (!tx->claim(r->id, m_actor, retry.claim_lease)) {
      result.message = "claimed by another reaper";
      return result;
    }
    result.attempt = failed_attempts(*r) + 1;
    size_t before = r->history.size();
    std::string reason = verdict.reason;
    ended_by = verdict.ended_by;
    if (result.attempt > 1) {
      reason += fmt::format(" (attempt {})", result.attempt);
    }
    if (r->lease) {
      // The lease's end, in the history with its renewals, before what it leads to.
      r->transition(EventKind::lease_ended, r->state, m_clock.now(), actor, deadline_reason(*r),
                    lease_summary(*r->lease, m_clock.now(), "lapsed"));
      r->lease.reset();
    }
    nlohmann::json details = std::move(verdict.details);
    details["attempt"] = result.attempt;
    details["ended_by"] = ended_by; // a retry after a failed destroy says the same
    r->transition(EventKind::expired, State::expired, m_clock.now(), actor, reason, details);
    commit(tx, *r, before);
    claimed = *r;
  }
  m_events.deliver();
  TimePoint next = m_clock.now() + backoff_after(result.attempt, retry.base, retry.max);
  try {
    destroy_one(claimed, actor, ended_by, State::expired,
                {{"attempt", result.attempt}, {"next_attempt_at", format_time(next)}});
    result.outcome = ExpiredDestroy::Outcome::destroyed;
  } catch (const Error& e) {
    result.outcome = ExpiredDestroy::Outcome::failed;
    result.message = log::redact(e.what());
    result.next_attempt_at = next;
  }
  return result;
}

std::optional<SandboxRecord> Engine::destroy_orphan(const OrphanTarget& target,
                                                    const std::string& actor) {
  SandboxRecord record;
  {
    auto tx = m_ledger.begin();
    SandboxRecord* found = tx.find(target.sandbox_id);
    if (found && found->id != target.sandbox_id) {
      found = nullptr; // a record that only bears the id as its name
    }
    TimePoint now = m_clock.now();
    size_t before = 0;
    if (found && is_live(found->state) && found->state != State::orphaned) {
      return std::nullopt;
    }
    if (found) {
      before = found->history.size();
      if (found->state != State::orphaned) {
        found->transition(EventKind::orphan_found, State::orphaned, now, actor,
                          fmt::format("backend resource {} found after the record was {}",
                                      target.backend_id, to_string(found->state)));
      }
      found->backend_id = target.backend_id;
    } else {
      SandboxRecord fresh;
      fresh.id = target.sandbox_id;
      fresh.name = target.sandbox_id;
      fresh.profile.name = target.profile;
      fresh.driver = target.driver;
      fresh.spec = target.spec;
      fresh.secret_refs = target.secret_refs;
      fresh.info = target.location;
      fresh.backend_id = target.backend_id;
      fresh.state = State::orphaned;
      fresh.created_at = now;
      fresh.owner = current_owner();
      for (const auto& [key, value] : target.labels) {
        if (!key.starts_with("sandboxer.")) {
          fresh.labels[key] = value;
        }
      }
      fresh.transition(EventKind::orphan_found, State::orphaned, now, actor,
                       "found on the backend with this ledger's label and no record",
                       {{"backend_id", target.backend_id}});
      found = &tx->insert(std::move(fresh));
    }
    found->transition(EventKind::destroying, State::destroying, now, actor, "orphan");
    commit(tx, *found, before);
    record = *found;
  }
  m_events.deliver();
  destroy_one(record, actor, "orphan", State::destroying);
  return get(record.id);
}

} // namespace sandboxer
