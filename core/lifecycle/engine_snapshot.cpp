// Snapshots: taking one, keeping the profile's number of them, restoring (as a new sandbox or in
// place) and deleting.
#include "core/errors.hpp"
#include "core/lifecycle/engine_internal.hpp"

namespace sandboxer {
using namespace engine_internal;
using namespace lifecycle_rules;

SandboxRecord Engine::snapshot(const std::string& id_or_name,
                               const std::optional<std::string>& name, bool disk_only) {
  SandboxRecord record = get(id_or_name);
  Opened opened = open_driver(record);
  require(*opened.factory, opened.factory->capabilities().snapshot, "snapshot");
  std::string snapshot_name;
  bool paused = false; // a paused sandbox is snapshotted as it is, and stays paused
  {
    auto tx = m_ledger.begin();
    auto& found = find_or_throw(m_ledger, tx, record.id);
    paused = found.state == State::paused;
    if (found.state != State::running && !paused) {
      throw Error(ExitCode::runtime,
                  fmt::format("sandbox {} is {}; only a running or paused sandbox can be "
                              "snapshotted",
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
  const SnapshotRequest request{new_snapshot_id(), snapshot_name, disk_only, paused};
  const State after = paused ? State::paused : State::running;
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
      r.transition(EventKind::snapshotted, after, m_clock.now(), m_actor,
                   "snapshotted " + snapshot_name, details);
    });
  } catch (const Error& e) {
    record_failure(record.id, e, EventKind::snapshot_failed, after, m_actor,
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

} // namespace sandboxer
