// The lifecycle engine: every operation as intent, backend call, outcome (docs/architecture.md).
#include <fmt/format.h>
#include <fstream>
#include <spdlog/spdlog.h>
#include <sstream>
#include <sys/stat.h>

#include <sandboxer/error.hpp>
#include <sandboxer/interrupt.hpp>
#include <sandboxer/log.hpp>

#include "src/files.hpp"
#include "src/lifecycle/checked_driver.hpp"
#include "src/lifecycle/lifecycle.hpp"
#include "src/lifecycle/location.hpp"
#include "src/lifecycle/retry.hpp"
#include "src/lifecycle/rules.hpp"
#include "src/names.hpp"
#include "src/owner.hpp"
#include "src/secrets/secrets.hpp"

namespace sandboxer {
namespace fs = std::filesystem;
using namespace lifecycle_rules;
namespace {

// Times an operation for its outcome entry: the whole operation, and the driver's part of it.
class Stopwatch {
public:
  using Clock = std::chrono::steady_clock;
  static Clock::time_point now() { return Clock::now(); }

  template <typename F> auto time(F&& call) {
    auto start = now();
    struct Add {
      Stopwatch& self;
      Clock::time_point start;
      ~Add() {
        auto took = now() - start;
        self.m_driver += took;
        spdlog::debug("timing: driver call {:.1f} ms",
                      std::chrono::duration<double, std::milli>(took).count());
      }
    } add{*this, start};
    return call();
  }

  nlohmann::json details(Clock::time_point operation_started) const {
    using std::chrono::duration_cast;
    using std::chrono::milliseconds;
    return {{"duration_ms", duration_cast<milliseconds>(now() - operation_started).count()},
            {"driver_ms", duration_cast<milliseconds>(m_driver).count()}};
  }

private:
  Clock::duration m_driver{};
};

class NullProgress : public Progress {
public:
  void update(std::string_view) override {}
};
NullProgress g_null_progress;

// The ledger could not record what the backend did: not a backend failure, so no failure entry
// follows (it would misstate the backend, and the same commit would likely fail again).
class OutcomeNotRecorded : public Error {
public:
  using Error::Error;
};

[[noreturn]] void throw_not_found(const Ledger& ledger, const std::string& id_or_name) {
  throw NotFoundError(fmt::format("no sandbox \"{}\" in ledger {} ('sandboxer list -a' shows them)",
                                  id_or_name, ledger.location()));
}

SandboxRecord& find_or_throw(const Ledger& ledger, Ledger::Transaction& tx,
                             const std::string& id_or_name) {
  auto* record = tx.find(id_or_name);
  if (!record) {
    throw_not_found(ledger, id_or_name);
  }
  return *record;
}

void require(const DriverFactory& factory, bool capable, std::string_view verb) {
  if (!capable) {
    throw DriverError(DriverError::Kind::unsupported,
                      fmt::format("{} is not supported by driver {}", verb, factory.name()));
  }
}

// Whether a create that failed with `e` may have left something on the backend: a failure or a
// timeout may come after the backend committed; a refusal (a bad spec, a wrong key, a cap) comes
// before it does anything. An unreachable backend counts as a failure: a driver that makes
// several calls may have made the first before the connection broke.
bool may_have_made_something(const Error& e) {
  const auto* driver_error = dynamic_cast<const DriverError*>(&e);
  return driver_error && (driver_error->kind() == DriverError::Kind::error ||
                          driver_error->kind() == DriverError::Kind::timeout ||
                          driver_error->kind() == DriverError::Kind::unavailable);
}

// What to do about a sandbox exec cannot use, by its state: the next step, not just the refusal.
std::string not_running_hint(const SandboxRecord& record) {
  switch (record.state) {
  case State::failed:
    return fmt::format(" ({}); 'sandboxer status {}' tells why",
                       record.error.value_or("its create failed"), record.id);
  case State::destroyed:
    return "; create another";
  case State::creating:
    return fmt::format("; 'sandboxer wait {} --for running' waits until it is", record.id);
  default:
    return fmt::format("; 'sandboxer status {}' shows it", record.id);
  }
}

} // namespace

Engine::Engine(const Ledger& ledger, const DriverCatalog& drivers, const Clock& clock,
               EventHook& events, std::string actor)
    : m_ledger(ledger), m_drivers(drivers), m_clock(clock), m_events(events),
      m_actor(std::move(actor)), m_progress(&g_null_progress) {}

Engine::Opened Engine::open_driver(const SandboxRecord& record) const {
  if (!record.home_host.empty() && record.home_host != host_name()) {
    throw UsageError(fmt::format("sandbox {} lives on host {}: its driver ({}) reaches it only "
                                 "from there; run this on {} (this is {})",
                                 record.id.empty() ? record.name : record.id, record.home_host,
                                 record.driver, record.home_host, host_name()));
  }
  Opened opened;
  opened.factory = &m_drivers.find(record.driver);
  DriverContext context = context_of(record);
  make_private_dirs(context.data_dir);
  context.secrets = resolve_secrets(record.secret_refs);
  Location location = location_of(*opened.factory, record, context);
  warn_if_moved(record, location);
  context.location = location.used;
  opened.location = std::move(location.used);
  opened.driver =
      checked_driver(opened.factory->open(record.spec, context), record.driver, record.spec);
  return opened;
}

DriverContext Engine::context_of(const SandboxRecord& record) const {
  DriverContext context;
  context.data_dir = m_ledger.state_dir() / "drivers" / record.driver;
  context.clock = &m_clock;
  context.progress = m_progress ? m_progress : &g_null_progress;
  return context;
}

nlohmann::json Engine::location(const SandboxRecord& record) const {
  return location_of(m_drivers.find(record.driver), record, context_of(record)).used;
}

void Engine::commit(Ledger::Transaction& tx, SandboxRecord& record, size_t first_new_entry) {
  // The events go to the outbox first, in the same critical section: a crash after the ledger
  // commit cannot lose them, and one before it leaves nothing the ledger would not back.
  m_events.stage(tx.store(), record, first_new_entry);
  tx.commit();
  m_events.committed();
}

SandboxRecord Engine::update(const std::string& id,
                             const std::function<void(SandboxRecord&)>& change) {
  SandboxRecord result;
  {
    auto tx = m_ledger.begin();
    auto& record = find_or_throw(m_ledger, tx, id);
    size_t before = record.history.size();
    change(record);
    commit(tx, record, before);
    result = record;
  }
  m_events.deliver();
  return result;
}

SandboxRecord Engine::get(const std::string& id_or_name) const {
  auto record = m_ledger.find(id_or_name);
  if (!record) {
    throw_not_found(m_ledger, id_or_name);
  }
  return std::move(*record);
}

CreateOutcome Engine::create(const Profile& profile, const CreateOptions& options) {
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
  auto decision = decide_ttl(profile.ttl, options.ttl, profile.name);
  set_ttl_policy(record.policy, decision, options.ttl);
  if (profile.snapshots_keep) {
    record.policy.snapshots_keep = *profile.snapshots_keep;
  }
  if (!profile.events.empty()) {
    record.policy.events = profile.events;
  }
  record.transition(EventKind::created, State::creating, m_clock.now(), m_actor, "create");
  return run_create(std::move(record), options, std::nullopt, std::move(decision.notices));
}

CreateOutcome Engine::run_create(SandboxRecord record, const CreateOptions& options,
                                 const std::optional<std::string>& from_snapshot,
                                 std::vector<std::string> notices) {
  const auto started = Stopwatch::now();
  if (options.idempotency_key &&
      options.idempotency_key->find_first_not_of(" \t\r\n") == std::string::npos) {
    // An unset CI variable expands to "" (or to the spaces around it): every job on the host
    // would share one sandbox.
    throw UsageError("--idempotency-key is empty or blank (is the variable that should give it "
                     "unset?); "
                     "give a key unique to the job, e.g. \"$CI_JOB_ID\" or "
                     "\"$GITHUB_RUN_ID-$GITHUB_RUN_ATTEMPT-$GITHUB_JOB\", or leave the option out");
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
    record.labels[key] = value;
  }
  // Opening first means a usage problem (a missing secret, say) leaves no record behind.
  Opened opened = open_driver(record);
  // Recorded with the intent: a create killed before its outcome is still found where it went.
  record.info = opened.location;

  TimePoint now = m_clock.now();
  record.created_at = now;
  record.owner = current_owner();
  record.idempotency_key = options.idempotency_key;
  record.expires_at = deadline_after(now, record.policy.ttl, "ttl");
  record.max_expires_at = deadline_after(now, record.policy.ttl_max, "ttl_max");
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
    if (options.name) {
      if (const SandboxRecord* existing = tx->find_live_by_name(*options.name)) {
        throw Error(ExitCode::conflict,
                    fmt::format("the name \"{}\" is taken by {} ({}); pick another or "
                                "destroy that one first",
                                *options.name, existing->id, to_string(existing->state)));
      }
    }
    SandboxRecord& added = tx->insert(record);
    commit(tx, added, 0);
    ledger_id = tx->ledger_id();
  }
  m_events.deliver();

  CreateRequest request = create_request(record, ledger_id);
  request.from_snapshot = from_snapshot;
  Stopwatch driver_time;
  try {
    CreateResult result = driver_time.time([&] { return opened.driver->create(request); });
    bool destroyed_meanwhile = false;
    record = record_outcome(record.id, result.backend_id, "created", [&](SandboxRecord& r) {
      r.backend_id = result.backend_id;
      r.info.update(result.info); // what the driver says, over where it was told to go
      destroyed_meanwhile = r.state != State::creating;
      if (!destroyed_meanwhile) {
        nlohmann::json outcome = driver_time.details(started);
        if (r.restored_from) {
          outcome["snapshot"] = *r.restored_from;
        }
        r.transition(r.restored_from ? EventKind::restored : EventKind::ready, State::running,
                     m_clock.now(), m_actor, "created", outcome);
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

void Engine::remember_failed(const std::string& id) {
  try {
    m_failed_record = get(id);
  } catch (const Error&) {
    m_failed_record.reset(); // the error being thrown is what matters
  }
}

std::string Engine::undo_create(const SandboxRecord& record, Opened& opened) {
  if (!opened.factory->capabilities().list_by_label) {
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

SandboxRecord Engine::snapshot(const std::string& id_or_name,
                               const std::optional<std::string>& name, bool disk_only) {
  SandboxRecord record = get(id_or_name);
  Opened opened = open_driver(record);
  require(*opened.factory, opened.factory->capabilities().snapshot, "snapshot");
  std::string snapshot_name;
  {
    auto tx = m_ledger.begin();
    auto& found = find_or_throw(m_ledger, tx, record.id);
    if (found.state != State::running) {
      throw Error(ExitCode::runtime,
                  fmt::format("sandbox {} is {}; only a running sandbox can be snapshotted",
                              found.id, to_string(found.state)));
    }
    snapshot_name = name.value_or(fmt::format("snap-{}", found.snapshots.size() + 1));
    for (const auto& existing : found.snapshots) {
      if (existing.name == snapshot_name) {
        throw UsageError(fmt::format("sandbox {} already has a snapshot named \"{}\" ({})",
                                     found.id, snapshot_name, existing.id));
      }
    }
    size_t before = found.history.size();
    found.transition(EventKind::snapshotting, State::snapshotting, m_clock.now(), m_actor,
                     "snapshot " + snapshot_name);
    commit(tx, found, before);
    record = found;
  }
  m_events.deliver();
  const auto started = Stopwatch::now();
  Stopwatch driver_time;
  const SnapshotRequest request{new_snapshot_id(), snapshot_name, disk_only};
  try {
    SnapshotResult result =
        driver_time.time([&] { return opened.driver->snapshot(handle_of(record), request); });
    record = update(record.id, [&](SandboxRecord& r) {
      SnapshotRecord snap{request.snapshot_id, snapshot_name, result.backend_ref, result.size_bytes,
                          m_clock.now()};
      r.snapshots.push_back(snap);
      nlohmann::json details = driver_time.details(started);
      details["snapshot"] = snap.id;
      if (disk_only) {
        details["disk_only"] = true;
      }
      r.transition(EventKind::snapshotted, State::running, m_clock.now(), m_actor,
                   "snapshotted " + snapshot_name, details);
    });
  } catch (const Error& e) {
    record_failure(record.id, e, EventKind::snapshot_failed, State::running, m_actor,
                   "snapshot failed: ", driver_time.details(started));
    throw;
  }
  return apply_snapshot_retention(record, *opened.driver);
}

// The profile's snapshots.keep: beyond it, the oldest snapshots of `record` go, through the
// driver, each removal in the sandbox's history. A removal that fails is logged and retried by the
// next snapshot; the new snapshot stands either way.
SandboxRecord Engine::apply_snapshot_retention(SandboxRecord record, Driver& driver) {
  if (!record.policy.snapshots_keep) {
    return record;
  }
  const size_t keep = *record.policy.snapshots_keep;
  std::vector<SnapshotRecord> excess;
  if (record.snapshots.size() > keep) {
    excess.assign(record.snapshots.begin(), record.snapshots.end() - keep);
  }
  for (const auto& old : excess) {
    try {
      driver.delete_snapshot(old.backend_ref);
    } catch (const Error& e) {
      spdlog::warn("{}: snapshot {} is beyond snapshots.keep {} but could not be removed: {}",
                   record.id, old.id, keep, log::redact(e.what()));
      continue;
    }
    record = update(record.id, [&](SandboxRecord& r) {
      std::erase_if(r.snapshots, [&](const auto& s) { return s.id == old.id; });
      r.transition(
          EventKind::snapshot_removed, r.state, m_clock.now(), m_actor,
          fmt::format("snapshot {} ({}) removed: snapshots.keep {}", old.id, old.name, keep),
          {{"snapshot", old.id}, {"snapshot_removed", old.id}, {"retention", {{"keep", keep}}}});
    });
  }
  return record;
}

namespace {

// Finds "snp-..." or "<sandbox id or name>:<snapshot name>" among every record.
std::pair<const SandboxRecord*, const SnapshotRecord*> find_snapshot(const LedgerData& data,
                                                                     const std::string& ref) {
  for (const auto& record : data.sandboxes) {
    if (const SnapshotRecord* snap = snapshot_of(record, ref)) {
      return {&record, snap};
    }
  }
  return {nullptr, nullptr};
}

} // namespace

CreateOutcome Engine::restore(const std::string& snapshot_ref, const CreateOptions& options) {
  auto data = m_ledger.read();
  auto [source, snap] = find_snapshot(data, snapshot_ref);
  if (!source) {
    throw NotFoundError(fmt::format("no snapshot \"{}\" in ledger {} ('sandboxer snapshots' "
                                    "lists them)",
                                    snapshot_ref, m_ledger.location()));
  }
  SandboxRecord record;
  record.profile = source->profile;
  record.driver = source->driver;
  record.spec = source->spec;
  record.home_host = source->home_host;
  record.labels = source->labels;
  record.env = source->env;
  record.secret_refs = source->secret_refs;
  record.restored_from = snap->id;
  // The snapshot is where its source lives: the new sandbox goes there too.
  record.info = source->info;
  Opened opened = open_driver(record);
  require(*opened.factory, opened.factory->capabilities().snapshot, "restore");
  // The original create's policy, so a restored sandbox lives by the same rules.
  TtlPolicy policy;
  policy.default_ttl = source->policy.ttl;
  policy.none = !source->policy.ttl;
  policy.max_ttl = source->policy.ttl_max;
  auto decision = decide_ttl(policy, options.ttl, record.profile.name);
  record.policy = source->policy;
  set_ttl_policy(record.policy, decision, options.ttl);
  record.transition(EventKind::created, State::creating, m_clock.now(), m_actor,
                    "restore " + snap->id + " of " + source->id, {{"snapshot", snap->id}});
  return run_create(std::move(record), options, snap->backend_ref, std::move(decision.notices));
}

SandboxRecord Engine::restore_in_place(const std::string& snapshot_ref,
                                       const std::string& id_or_name) {
  SandboxRecord record = get(id_or_name);
  Opened opened = open_driver(record);
  require(*opened.factory, opened.factory->capabilities().restore_in_place, "restore --in-place");
  std::string snapshot_id, backend_ref, ledger_id;
  {
    auto tx = m_ledger.begin();
    ledger_id = tx->ledger_id();
    auto [source, snap] = tx->find_snapshot(snapshot_ref);
    if (!source) {
      throw NotFoundError(fmt::format("no snapshot \"{}\" in ledger {} ('sandboxer snapshots' "
                                      "lists them)",
                                      snapshot_ref, m_ledger.location()));
    }
    if (source->driver != record.driver) {
      throw UsageError(fmt::format("snapshot {} was taken by driver {}; sandbox {} runs on {}",
                                   snap->id, source->driver, record.id, record.driver));
    }
    snapshot_id = snap->id;
    backend_ref = snap->backend_ref;
    auto& found = find_or_throw(m_ledger, tx, record.id);
    if (found.state != State::running) {
      throw Error(ExitCode::runtime,
                  fmt::format("sandbox {} is {}; only a running sandbox can be restored in place",
                              found.id, to_string(found.state)));
    }
    size_t before = found.history.size();
    found.transition(EventKind::restoring, State::creating, m_clock.now(), m_actor,
                     "restore in place " + snapshot_id,
                     {{"snapshot", snapshot_id}, {"replaces", found.backend_id}});
    commit(tx, found, before);
    record = found;
  }
  m_events.deliver();
  const auto started = Stopwatch::now();
  Stopwatch driver_time;
  CreateRequest request = create_request(record, ledger_id);
  request.from_snapshot = backend_ref;
  request.replaces = record.backend_id;
  CreateResult result;
  try {
    result = driver_time.time([&] { return opened.driver->create(request); });
  } catch (const Error& e) {
    // The driver left the old resource as it was: the sandbox runs on, with the error on record.
    record_failure(record.id, e, EventKind::restore_failed, State::running, m_actor,
                   "restore in place failed: ", driver_time.details(started));
    throw;
  }
  bool destroyed_meanwhile = false;
  record = update(record.id, [&](SandboxRecord& r) {
    nlohmann::json details = driver_time.details(started);
    details.update({{"snapshot", snapshot_id},
                    {"previous_backend_id", r.backend_id},
                    {"backend_id", result.backend_id}});
    r.backend_id = result.backend_id;
    r.info = opened.location;
    r.info.update(result.info);
    r.restored_from = snapshot_id;
    r.error.reset();
    destroyed_meanwhile = r.state != State::creating;
    if (!destroyed_meanwhile) {
      r.transition(EventKind::restored, State::running, m_clock.now(), m_actor,
                   "restored in place from " + snapshot_id, details);
    }
  });
  // A destroy that ran meanwhile removed the old resource (or found it gone): the new one too.
  if (destroyed_meanwhile) {
    destroy_one(record, m_actor, "destroyed while being restored", State::destroying);
    throw Error(ExitCode::runtime,
                fmt::format("sandbox {} was destroyed while it was being restored", record.id));
  }
  return record;
}

void Engine::delete_snapshot(const std::string& snapshot_ref) {
  auto data = m_ledger.read();
  auto [source, snap] = find_snapshot(data, snapshot_ref);
  if (!source) {
    throw NotFoundError(
        fmt::format("no snapshot \"{}\" in ledger {}", snapshot_ref, m_ledger.location()));
  }
  std::string sandbox_id = source->id, snapshot_id = snap->id;
  Opened opened = open_driver(*source);
  opened.driver->delete_snapshot(snap->backend_ref);
  update(sandbox_id, [&](SandboxRecord& r) {
    std::erase_if(r.snapshots, [&](const auto& s) { return s.id == snapshot_id; });
    r.transition(EventKind::snapshot_removed, r.state, m_clock.now(), m_actor,
                 fmt::format("snapshot {} removed", snapshot_id),
                 {{"snapshot", snapshot_id}, {"snapshot_removed", snapshot_id}});
  });
}

ExtendOutcome Engine::extend(const std::string& id_or_name, const ExtendOptions& options) {
  SandboxRecord record = get(id_or_name);
  if (!is_live(record.state)) {
    throw Error(ExitCode::runtime, fmt::format("sandbox {} is {}; only a live sandbox can be "
                                               "extended",
                                               record.id, to_string(record.state)));
  }
  if (!record.expires_at) {
    throw PolicyError(fmt::format("sandbox {} has no TTL (its profile says ttl: none); there is "
                                  "nothing to extend",
                                  record.id));
  }
  TimePoint now = m_clock.now();
  std::optional<TimePoint> wanted_or_none =
      options.to ? options.to : add_checked(*record.expires_at, options.by.value_or(Seconds(0)));
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
    if (granted <= *record.expires_at) {
      throw PolicyError(fmt::format("sandbox {} already lives until its maximum {} (ttl.max of "
                                    "profile {}); it cannot be extended",
                                    record.id, format_time(granted), record.profile.name));
    }
    notices.push_back(fmt::format("deadline {} capped to {} (ttl.max of profile {})",
                                  format_time(wanted), format_time(granted), record.profile.name));
  }
  Opened opened = open_driver(record);
  if (opened.factory->capabilities().native_ttl) {
    opened.driver->extend(handle_of(record), granted);
  }
  auto updated = update(record.id, [&](SandboxRecord& r) {
    nlohmann::json details = {{"from", format_time(*r.expires_at)}, {"to", format_time(granted)}};
    if (!notices.empty()) {
      details["capped"] = notices.front();
      details["requested"] = format_time(wanted);
    }
    r.expires_at = granted;
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

ExpiredDestroy Engine::destroy_expired(
    const std::string& id,
    const std::function<std::optional<std::string>(const SandboxRecord&)>& blocker,
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
  {
    // Claim it under the lock: a user (or, without the reaper lock, another reaper) may have
    // changed it since it was planned.
    auto tx = m_ledger.begin();
    auto* r = tx.find(id);
    if (!r) {
      result.message = "no longer in the ledger";
      return result;
    }
    if (auto reason = blocker(*r)) {
      result.message = *reason;
      return result;
    }
    // The engine's actor names this process (user@host pid): the claim's holder.
    if (!tx->claim(r->id, m_actor, retry.claim_lease)) {
      result.message = "claimed by another reaper";
      return result;
    }
    result.attempt = failed_attempts(*r) + 1;
    size_t before = r->history.size();
    std::string reason = "ttl expired at " + format_time(*r->expires_at);
    if (result.attempt > 1) {
      reason += fmt::format(" (attempt {})", result.attempt);
    }
    r->transition(EventKind::expired, State::expired, m_clock.now(), actor, reason,
                  {{"attempt", result.attempt}});
    commit(tx, *r, before);
    claimed = *r;
  }
  m_events.deliver();
  TimePoint next = m_clock.now() + backoff_after(result.attempt, retry.base, retry.max);
  try {
    destroy_one(claimed, actor, "ttl expired", State::expired,
                {{"attempt", result.attempt}, {"next_attempt_at", format_time(next)}});
    result.outcome = ExpiredDestroy::Outcome::destroyed;
  } catch (const Error& e) {
    result.outcome = ExpiredDestroy::Outcome::failed;
    result.message = log::redact(e.what());
    result.next_attempt_at = next;
  }
  return result;
}

SandboxRecord Engine::record_outcome(const std::string& id, const std::string& backend_id,
                                     const char* done,
                                     const std::function<void(SandboxRecord&)>& change) {
  try {
    return update(id, change);
  } catch (const Error& e) {
    throw OutcomeNotRecorded(
        e.code(), fmt::format("sandbox {}: the backend {} it (backend id {}), but the ledger "
                              "could not record that: {}. The record still shows the operation in "
                              "progress; 'sandboxer reap' settles it from the backend, or run "
                              "'sandboxer destroy {}'",
                              id, done, backend_id.empty() ? "-" : backend_id, e.what(), id));
  }
}

void Engine::record_failure(const std::string& id, const Error& error, EventKind kind, State to,
                            const std::string& actor, const std::string& what,
                            nlohmann::json details) {
  std::string message = log::redact(error.what());
  try {
    update(id, [&](SandboxRecord& r) {
      r.error = message;
      r.transition(kind, to, m_clock.now(), actor, what + message, std::move(details));
    });
  } catch (const Error& e) {
    // The caller's error is the one to report; the record keeps its transitional state, which
    // reap repairs.
    spdlog::error("{}: could not record the failure in the ledger: {}", id, log::redact(e.what()));
  }
}

std::optional<SandboxRecord> Engine::settle(const std::string& id, size_t expected_history_size,
                                            const std::function<void(SandboxRecord&)>& change) {
  SandboxRecord result;
  {
    auto tx = m_ledger.begin();
    auto* record = tx.find(id);
    if (!record || record->history.size() != expected_history_size) {
      return std::nullopt;
    }
    size_t before = record->history.size();
    change(*record);
    commit(tx, *record, before);
    result = *record;
  }
  m_events.deliver();
  return result;
}

BackendStatus Engine::backend_status(const SandboxRecord& record) {
  return open_driver(record).driver->status(handle_of(record));
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

std::vector<RemoteResource> Engine::list_remote(const SandboxRecord& where,
                                                const Labels& selector) {
  return open_driver(where).driver->list_remote(selector);
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
