// Creating a sandbox: intent, the driver's create, outcome; undoing what a failed create left.
#include <algorithm>

#include <sandboxer/ports.hpp>

#include "core/errors.hpp"
#include "core/lifecycle/engine_internal.hpp"
#include "core/lifecycle/port_readiness.hpp"

namespace sandboxer {
namespace fs = std::filesystem;
using namespace engine_internal;
using namespace lifecycle_rules;

namespace {

// A host-local backend exposes its ports on this machine: a bind to an address it does not have,
// or a host port something already holds, is refused before anything is made.
void check_local_ports(const Profile& profile) {
  for (size_t i = 0; i < profile.ports.size(); ++i) {
    const PortSpec& port = profile.ports[i];
    if (!is_local_address(port.bind)) {
      throw ProfileError(fmt::format("{}: ports[{}].bind {} is not an address of this machine",
                                     profile.location_of(fmt::format("/ports/{}/bind", i)), i,
                                     port.bind));
    }
    if (!port.host_port) {
      continue;
    }
    if (auto why = port_unavailable(port.protocol, port.bind, *port.host_port)) {
      throw Error(ExitCode::conflict,
                  fmt::format("{}: ports[{}]: host port {}/{} on {} is {}; pick another "
                              "host_port or leave it out (the backend then picks a free one)",
                              profile.location_of(fmt::format("/ports/{}", i)), i, *port.host_port,
                              port.protocol, port.bind, *why));
    }
  }
}

// The exposed port of `ready:` did not answer in time (or the backend did not expose it): the
// create fails with this, and what the backend made is removed.
class NotReady : public Error {
public:
  NotReady(ExitCode code, const std::string& what, nlohmann::json details)
      : Error(code, what), m_details(std::move(details)) {}
  const nlohmann::json& details() const { return m_details; }

private:
  nlohmann::json m_details;
};

} // namespace

nlohmann::json Engine::wait_until_ready(const SandboxRecord& record, Driver& driver) {
  const ReadyPolicy& ready = *record.policy.ready;
  const Seconds timeout = ready.timeout.value_or(Seconds(60));
  auto binding = std::find_if(record.ports.begin(), record.ports.end(), [&](const PortBinding& b) {
    return b.port == ready.port && b.protocol == "tcp";
  });
  if (binding == record.ports.end()) {
    throw NotReady(ExitCode::backend,
                   fmt::format("sandbox {}: driver {} did not say where port {}/tcp is exposed, "
                               "so its readiness (ready.port) cannot be checked",
                               record.id, record.driver, ready.port),
                   {{"port", ready.port}, {"answered", false}});
  }
  if (m_progress) {
    m_progress->update(
        fmt::format("waiting for port {}/tcp to answer at {}", binding->port, binding->url));
  }
  spdlog::info("{}: waiting up to {} for port {}/tcp to answer at {}", record.id,
               format_duration(timeout), binding->port, binding->url);
  const PortWait wait = wait_for_port(driver, handle_of(record), *binding, timeout);
  nlohmann::json details = port_wait_details(*binding, wait, timeout);
  if (!wait.answered) {
    throw NotReady(ExitCode::wait_timeout,
                   fmt::format("sandbox {}: port {}/tcp did not answer at {} within {} "
                               "(ready.timeout of profile {})",
                               record.id, binding->port, binding->url, format_duration(timeout),
                               record.profile.name),
                   std::move(details));
  }
  spdlog::info("{}: port {}/tcp answered after {} ms", record.id, binding->port,
               wait.waited.count());
  return details;
}

CreateOutcome Engine::create(const Profile& profile, const CreateOptions& options) {
  for (const auto& warning : profile.warnings) {
    spdlog::warn("{}", warning);
  }
  SandboxRecord record = record_from(profile);
  auto decision = decide_ttl(profile.ttl, options.ttl, profile.name);
  set_ttl_policy(record.policy, decision, options.ttl);
  if (profile.pool && !options.no_pool) {
    check_create_options(options);
    if (auto claimed = claim_from_pool(profile, record, options, decision)) {
      return std::move(*claimed);
    }
    spdlog::info("pool {} has no ready member: a cold create", pool_key_of(record));
  }
  if (!record.home_host.empty()) {
    check_local_ports(profile);
  }
  record.transition(EventKind::created, State::creating, m_clock.now(), m_actor, "create");
  return run_create(std::move(record), options, std::nullopt, std::move(decision.notices));
}

SandboxRecord Engine::record_from(const Profile& profile) const {
  SandboxRecord record;
  // Absolute: the record outlives the directory this command ran in (cron, another shell).
  std::error_code absolute_error;
  fs::path stored_path = fs::absolute(profile.path, absolute_error).lexically_normal();
  record.profile = {profile.name, (absolute_error ? profile.path : stored_path).string(),
                    profile.hash};
  record.driver = profile.driver;
  record.spec = m_drivers.check_profile(profile);
  if (m_drivers.find(record.driver).host_local(record.spec)) {
    record.home_host = host_name();
  }
  record.labels = profile.labels;
  record.env = profile.env;
  record.secret_refs = secret_refs_of(profile);
  if (profile.snapshots_keep) {
    record.policy.snapshots_keep = *profile.snapshots_keep;
  }
  if (!profile.events.empty()) {
    record.policy.events = profile.events;
  }
  record.policy.ports = port_specs_json(profile.ports);
  if (profile.ready) {
    record.policy.ready = ReadyPolicy{profile.ready->port, profile.ready->timeout};
  }
  set_pause_policy(record.policy, profile.pause);
  if (profile.pause.on_idle == "pause" && !m_drivers.find(record.driver).capabilities().pause) {
    // Refused now rather than at the first idle reap, which could only destroy it instead.
    throw PolicyError(fmt::format("profile {}: ttl.on_idle: pause, but driver {} cannot pause "
                                  "(docs/pause.md lists the drivers that can); use destroy or "
                                  "snapshot",
                                  profile.name, record.driver));
  }
  const auto& pause = profile.pause;
  if ((pause.on_idle == "snapshot" || pause.on_paused_max == "snapshot") &&
      !m_drivers.find(record.driver).capabilities().snapshot) {
    throw PolicyError(fmt::format(
        "profile {}: ttl.{}: snapshot, but driver {} cannot snapshot; "
        "use destroy",
        profile.name, pause.on_idle == "snapshot" ? "on_idle" : "on_paused_max", record.driver));
  }
  return record;
}

nlohmann::json engine_internal::lease_at_create(SandboxRecord& record, Seconds duration,
                                                TimePoint now, const std::string& holder) {
  Lease lease;
  lease.holder = holder;
  lease.duration = duration;
  lease.acquired_at = now;
  lease.renewed_at = now;
  lease.ttl_expires_at = record.expires_at;
  record.expires_at = lease_deadline(lease, now);
  record.lease = lease;
  return {{"holder", holder}, {"duration", format_duration(duration)}};
}

void engine_internal::refuse_taken_name(Ledger::Transaction& tx,
                                        const std::optional<std::string>& name) {
  if (!name) {
    return;
  }
  if (const SandboxRecord* existing = tx->find_live_by_name(*name)) {
    throw Error(ExitCode::conflict, fmt::format("the name \"{}\" is taken by {} ({}); pick another "
                                                "or destroy that one first",
                                                *name, existing->id, to_string(existing->state)));
  }
}

void engine_internal::record_exposure(SandboxRecord& record, TimePoint at,
                                      const std::string& actor) {
  if (record.ports.empty()) {
    return;
  }
  record.transition(EventKind::ports_exposed, State::running, at, actor,
                    fmt::format("{} port(s) exposed", record.ports.size()),
                    {{"ports", port_bindings_json(record.ports)},
                     {"until", record.expires_at ? nlohmann::json(format_time(*record.expires_at))
                                                 : nlohmann::json()}});
}

void engine_internal::check_create_options(const CreateOptions& options) {
  if (options.idempotency_key &&
      options.idempotency_key->find_first_not_of(" \t\r\n") == std::string::npos) {
    // An unset CI variable expands to "" (or to the spaces around it): every job on the host
    // would share one sandbox.
    throw UsageError("--idempotency-key is empty or blank (is the variable that should give it "
                     "unset?); "
                     "give a key unique to the job, e.g. \"$CI_JOB_ID\" or "
                     "\"$GITHUB_RUN_ID-$GITHUB_RUN_ATTEMPT-$GITHUB_JOB\", or leave the option out");
  }
  if (options.lease && *options.lease < Seconds(1)) {
    throw UsageError(
        fmt::format("--lease {}: a lease must last at least 1s", format_duration(*options.lease)));
  }
  if (options.ttl && *options.ttl < Seconds(1)) {
    throw UsageError(fmt::format("--ttl {}: a sandbox must live at least 1s (a ttl of 0 would be "
                                 "expired before it was made)",
                                 format_duration(*options.ttl)));
  }
  if (options.name) {
    if (auto problem = name_problem(*options.name)) {
      throw UsageError(
          fmt::format("--name \"{}\": invalid name: {}", printable(*options.name), *problem));
    }
  }
  for (const auto& [key, value] : options.labels) {
    if (auto problem = label_key_problem(key)) {
      throw UsageError(fmt::format("label \"{}\": invalid key: {}", printable(key), *problem));
    }
    if (key.starts_with("sandboxer.")) {
      throw UsageError(fmt::format("label \"{}\": the prefix \"sandboxer.\" is reserved", key));
    }
    if (auto problem = label_value_problem(value)) {
      throw UsageError(fmt::format("label \"{}\": invalid value: {}", key, *problem));
    }
  }
}

CreateOutcome Engine::run_create(SandboxRecord record, const CreateOptions& options,
                                 const std::optional<std::string>& from_snapshot,
                                 std::vector<std::string> notices) {
  const auto started = Stopwatch::now();
  check_create_options(options);
  for (const auto& [key, value] : options.labels) {
    record.labels[key] = value;
  }
  // Opening first means a usage problem (a missing secret, say) leaves no record behind.
  Opened opened = open_driver(record);
  if (!record.policy.ports.empty() && !opened.factory->capabilities().ports) {
    throw DriverError(DriverError::Kind::unsupported,
                      fmt::format("profile {} exposes ports (`ports:`), which driver {} does not "
                                  "support (docs/ports.md)",
                                  record.profile.name, opened.factory->name()));
  }
  // Recorded with the intent: a create killed before its outcome is still found where it went.
  record.info = opened.location;

  TimePoint now = m_clock.now();
  record.created_at = now;
  record.owner = current_owner();
  record.idempotency_key = options.idempotency_key;
  record.expires_at = deadline_after(now, record.policy.ttl, "ttl");
  record.max_expires_at = deadline_after(now, record.policy.ttl_max, "ttl_max");
  if (options.lease) {
    // From the intent on: a holder killed while the backend creates leaves a record that reap
    // settles once the lease lapses.
    record.history.front().details["lease"] = lease_at_create(record, *options.lease, now, m_actor);
  }
  record.history.front().time = now;
  record.history.front().actor = m_actor;

  std::string ledger_id;
  {
    auto tx = m_ledger.begin();
    if (options.idempotency_key) {
      if (const SandboxRecord* existing = tx->find_live_by_key(*options.idempotency_key)) {
        if (!options.reuse_any) {
          refuse_other_request(*existing, record, *options.idempotency_key);
        }
        spdlog::info("idempotency key matches {}: returning it", existing->id);
        return {*existing, true, {}};
      }
    }
    record.id = new_sandbox_id();
    record.name = options.name.value_or(record.id);
    refuse_taken_name(tx, options.name);
    SandboxRecord& added = tx->insert(record);
    commit(tx, added, 0);
    ledger_id = tx->ledger_id();
  }
  m_events.deliver();
  return make_in_backend(std::move(record), opened, ledger_id, from_snapshot, std::move(notices),
                         started);
}

CreateOutcome Engine::make_in_backend(SandboxRecord record, Opened& opened,
                                      const std::string& ledger_id,
                                      const std::optional<std::string>& from_snapshot,
                                      std::vector<std::string> notices,
                                      std::chrono::steady_clock::time_point started) {
  CreateRequest request = create_request(record, ledger_id);
  request.from_snapshot = from_snapshot;
  Stopwatch driver_time;
  try {
    CreateResult result = driver_time.time([&] { return opened.driver->create(request); });
    bool destroyed_meanwhile = false;
    auto made = [&](SandboxRecord& r) {
      r.backend_id = result.backend_id;
      r.info.update(result.info); // what the driver says, over where it was told to go
      r.ports = result.ports;
      destroyed_meanwhile = r.state != State::creating;
    };
    nlohmann::json port_ready;
    if (record.policy.ready) {
      // Recorded before the wait, still `creating`: a create killed while it waits leaves its
      // backend id for destroy and reap, and a failed wait removes exactly what was made.
      record = record_outcome(record.id, result.backend_id, "created", made);
      if (!destroyed_meanwhile) {
        port_ready = wait_until_ready(record, *opened.driver);
      }
    }
    record = record_outcome(record.id, result.backend_id, "created", [&](SandboxRecord& r) {
      made(r);
      if (!destroyed_meanwhile) {
        nlohmann::json outcome = driver_time.details(started);
        if (!port_ready.is_null()) {
          outcome["port_ready"] = port_ready;
        }
        if (r.restored_from) {
          outcome["snapshot"] = *r.restored_from;
        }
        const TimePoint made_at = m_clock.now();
        if (r.pool && !r.pool->claimed_at) {
          // A pool member: ready, but nobody's yet (docs/pools.md).
          r.pool->pooled_at = made_at;
          outcome["pool"] = r.pool->key;
          r.transition(EventKind::pooled, State::pooled, made_at, m_actor, "pooled", outcome);
          return;
        }
        r.transition(r.restored_from ? EventKind::restored : EventKind::ready, State::running,
                     made_at, m_actor, "created", outcome);
        record_exposure(r, made_at, m_actor);
      }
    });
    // Someone destroyed the record while the backend was creating: do not leak what it made.
    if (destroyed_meanwhile) {
      destroy_one(record, m_actor, "destroyed while being created", State::destroying);
      throw Error(ExitCode::runtime,
                  fmt::format("sandbox {} was destroyed while it was being created", record.id));
    }
  } catch (const OutcomeNotRecorded&) {
    throw;
  } catch (const NotReady& e) {
    // The backend made it, but its service never answered: it goes, as any failed create's does.
    interrupt::Shield cleanup;
    if (get(record.id).state != State::creating) {
      // A destroy took it while the port was awaited: that record's story is told already.
      throw Error(ExitCode::runtime,
                  fmt::format("sandbox {} was destroyed while it was being created", record.id));
    }
    Error failed(e.code(), e.what() + undo_create(record, opened));
    nlohmann::json details = driver_time.details(started);
    details["port_ready"] = e.details();
    record_failure(record.id, failed, EventKind::failed, State::failed, m_actor, "",
                   std::move(details));
    remember_failed(record.id);
    throw failed;
  } catch (const Interrupted& e) {
    // The operator (or a CI cancel) stopped it: undo what the backend made, whatever it got to,
    // and say so in the record. Neither may be cut short by the signal itself.
    interrupt::Shield cleanup;
    std::string what = e.what() + undo_create(record, opened);
    nlohmann::json failure = driver_time.details(started);
    failure["interrupted"] = interrupt::signal_name(e.signal());
    record_failure(record.id, Error(e.code(), what), EventKind::failed, State::failed, m_actor, "",
                   std::move(failure));
    remember_failed(record.id);
    throw Interrupted(e.signal());
  } catch (const Error& e) {
    if (!may_have_made_something(e)) {
      record_failure(record.id, e, EventKind::failed, State::failed, m_actor, "",
                     driver_time.details(started));
      remember_failed(record.id);
      throw;
    }
    // The backend may have made something before it failed (or before its answer was lost or
    // refused): a failed create leaves nothing behind that the ledger does not track.
    Error failed(e.code(), e.what() + undo_create(record, opened));
    record_failure(record.id, failed, EventKind::failed, State::failed, m_actor, "",
                   driver_time.details(started));
    remember_failed(record.id);
    if (const auto* driver_error = dynamic_cast<const DriverError*>(&e)) {
      throw DriverError(driver_error->kind(), failed.what());
    }
    throw failed;
  }
  for (const auto& notice : notices) {
    spdlog::warn("{}: {}", record.id, notice);
  }
  return {record, false, notices};
}

void Engine::remember_failed(const std::string& id) {
  try {
    m_failed_record = get(id);
  } catch (const Error&) {
    m_failed_record.reset(); // the error being thrown is what matters
  }
}

std::string Engine::undo_create(const SandboxRecord& record, Opened& opened) {
  // A backend id is known once the create's answer was recorded (before a readiness wait).
  if (!opened.factory->capabilities().list_by_label && record.backend_id.empty()) {
    return "";
  }
  try {
    size_t removed = remove_resources(record, opened);
    return removed ? fmt::format("; removed the {} backend resource(s) it had made", removed)
                   : std::string();
  } catch (const Error& undo) {
    return fmt::format("; what the backend made could not be removed ({}): 'sandboxer "
                       "destroy {}' or 'sandboxer reap --orphans' finishes it",
                       log::redact(undo.what()), record.id);
  }
}

void Engine::destroy_duplicate(const SandboxRecord& record, const std::string& backend_id) {
  SandboxHandle handle = handle_of(record);
  handle.backend_id = backend_id;
  try {
    open_driver(record).driver->destroy(handle);
  } catch (const DriverError& e) {
    if (e.kind() != DriverError::Kind::not_found) {
      throw;
    }
  }
}

} // namespace sandboxer
