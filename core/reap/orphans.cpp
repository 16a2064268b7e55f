// `reap --orphans`: reconciles the ledger with each backend, both ways. Only resources labelled
// sandboxer.ledger=<this ledger's id> are ever considered; everything else is invisible here.
#include <fmt/format.h>
#include <set>
#include <spdlog/spdlog.h>

#include <sandboxer/error.hpp>
#include <sandboxer/log.hpp>

#include "core/reap/internal.hpp"
#include "core/secrets/secrets.hpp"

namespace sandboxer::reap {
namespace {

// One backend to ask: a driver opened with one spec at one location (two stub roots, or two
// Docker engines, are two backends), as a record that names it.
struct Backend {
  SandboxRecord where; // driver, spec, secret_refs and the location in info
  std::string profile;
  std::set<std::string> live_ids; // the records of run.seen that live there
  // Only closed records used it: a backend that cannot be asked any more (its key was unset since)
  // is then a warning, not a live sandbox that could not be handled.
  bool closed_only = true;
};

// The backend `record` lives on, as a record naming nothing else.
SandboxRecord backend_of(const Run& run, const SandboxRecord& record) {
  SandboxRecord where;
  where.driver = record.driver;
  where.spec = record.spec;
  where.secret_refs = record.secret_refs;
  where.info = run.engine.location(record);
  return where;
}

// The backends this ledger used (its resident records and the closed ones history still keeps:
// a record closed by `destroy --forget` is exactly where an orphan is left) and those the
// operator named with --profile. Nothing else is asked: an example profile lying in the
// profiles directory must not cost an SSH connection or a warning at every cron run.
std::map<std::string, Backend> backends_of(Run& run) {
  const DriverCatalog& drivers = run.engine.drivers();
  std::map<std::string, Backend> backends;
  std::set<std::string> unlistable;
  auto add = [&](const SandboxRecord& record, bool closed) {
    if (unlistable.count(record.driver)) {
      return;
    }
    try {
      if (!drivers.find(record.driver).capabilities().list_by_label) {
        unlistable.insert(record.driver);
        return;
      }
      SandboxRecord where = backend_of(run, record);
      std::string key = backend_key(where.driver, where.spec, where.info);
      auto [it, added] = backends.try_emplace(key, Backend{std::move(where), record.profile.name});
      it->second.closed_only = it->second.closed_only && closed;
      if (!closed && !record.id.empty()) {
        it->second.live_ids.insert(record.id);
      }
    } catch (const std::exception& e) {
      unlistable.insert(record.driver);
      spdlog::warn("reap --orphans: {}", e.what());
    }
  };
  for (const auto& record : run.seen.sandboxes) {
    add(record, false);
  }
  run.ledger.scan(Records::closed, ReadScope::whole, [&](SandboxRecord& record) {
    add(record, true);
    return true;
  });
  for (const auto& profile : run.options.profiles) {
    SandboxRecord probe;
    probe.driver = profile.driver;
    probe.spec = drivers.check_profile(profile);
    probe.secret_refs = secret_refs_of(profile);
    probe.profile.name = profile.name;
    add(probe, false);
  }
  return backends;
}

const SandboxRecord* find_by_id(const LedgerData& data, const std::string& id) {
  for (const auto& record : data.sandboxes) {
    if (record.id == id) {
      return &record;
    }
  }
  return nullptr;
}

// Only records that have (or had) a settled resource: transitional ones belong to repair.
bool can_vanish(const SandboxRecord& record) {
  const bool paused_with_resource =
      record.state == State::paused && !paused_without_resource(record);
  return (record.state == State::running || record.state == State::expired ||
          record.state == State::orphaned || record.state == State::pooled ||
          paused_with_resource) &&
         !record.backend_id.empty();
}

ReapItem item_for(const Backend& backend, const RemoteResource& resource, const std::string& id,
                  const SandboxRecord* record) {
  ReapItem item;
  item.id = id.empty() ? resource.backend_id : id;
  item.name = record ? record->name : item.id;
  item.driver = backend.where.driver;
  item.state = record ? to_string(record->state) : "none";
  item.action = "orphan";
  item.backend_id = resource.backend_id;
  item.history_size = record ? record->history.size() : 0;
  item.reason = record ? fmt::format("the backend still has {} ({}) but the record is {}",
                                     resource.backend_id, resource.state, to_string(record->state))
                       : fmt::format("the backend has {} ({}) and the ledger has no record of it",
                                     resource.backend_id, resource.state);
  return item;
}

// A resource that carries a settled live record's id but is not the one the record holds: a
// create whose answer was lost and that was repeated made it. (While a record is creating or
// restoring, a second resource is expected.)
bool is_duplicate(const SandboxRecord& record, const RemoteResource& resource) {
  return (record.state == State::running || record.state == State::expired) &&
         !record.backend_id.empty() && record.backend_id != resource.backend_id;
}

void remove_duplicate(Run& run, const Backend& backend, const RemoteResource& resource,
                      const SandboxRecord& record) {
  ReapItem item = item_for(backend, resource, record.id, &record);
  item.action = "duplicate";
  item.reason = fmt::format("the backend has {} ({}) carrying the id of {}, whose resource is {}: "
                            "a second one, left by a create that was repeated",
                            resource.backend_id, resource.state, record.id, record.backend_id);
  ++run.report.orphans;
  if (run.options.orphans != OrphanMode::destroy) {
    item.outcome = "reported";
    spdlog::warn("reap {}: duplicate: {} (destroy it with 'sandboxer reap --orphans=destroy')",
                 record.id, item.reason);
  } else if (run.options.dry_run) {
    item.outcome = "planned";
  } else {
    try {
      run.engine.destroy_duplicate(record, resource.backend_id);
      item.outcome = "destroyed";
    } catch (const std::exception& e) {
      item.outcome = "failed";
      item.reason += "; destroying it failed: " + log::redact(e.what());
      ++run.report.failures;
    }
  }
  run.report.items.push_back(std::move(item));
}

// `handled` holds "driver\nbackend id" of orphans already seen: two profiles may differ only in
// what does not matter to the backend (a stub's injected faults), and list the same resources.
void reconcile_backend(Run& run, const Backend& backend, std::vector<Work>& destroys,
                       std::set<std::string>& handled) {
  std::vector<RemoteResource> resources;
  try {
    resources = run.engine.list_remote(backend.where, {{"sandboxer.ledger", run.ledger_id}});
  } catch (const std::exception& e) {
    ReapItem item;
    item.id = "-";
    item.driver = backend.where.driver;
    item.action = "orphans";
    item.reason = fmt::format("cannot list driver {} (profile {}): {}", backend.where.driver,
                              backend.profile, log::redact(e.what()));
    if (backend.closed_only) {
      item.outcome = "skipped";
      spdlog::warn("reap --orphans: {}; only closed records used it, so it is skipped",
                   item.reason);
    } else {
      item.outcome = "failed";
      spdlog::error("reap --orphans: {}", item.reason);
      ++run.report.failures;
    }
    run.report.items.push_back(std::move(item));
    return;
  }
  // Read after listing: a resource listed before its record was destroyed is then seen with its
  // destroyed record, and its status below tells whether it is really still there.
  LedgerData after = run.ledger.read();
  std::set<std::string> seen_ids, seen_backend_ids;
  for (const auto& resource : resources) {
    auto ledger_label = resource.labels.find("sandboxer.ledger");
    if (ledger_label == resource.labels.end() || ledger_label->second != run.ledger_id) {
      continue; // a driver that filtered loosely: never touch another ledger's resource
    }
    std::string id;
    if (auto it = resource.labels.find("sandboxer.id"); it != resource.labels.end()) {
      id = it->second;
    }
    seen_ids.insert(id);
    seen_backend_ids.insert(resource.backend_id);
    const SandboxRecord* record = id.empty() ? nullptr : find_by_id(after, id);
    // Not live: a closed record (in the history) may still name it.
    std::optional<SandboxRecord> closed;
    if (!record && !id.empty() && (closed = run.ledger.find(id)) && closed->id == id) {
      record = &*closed;
    }
    if (record && is_live(record->state) && record->state != State::orphaned) {
      if (is_duplicate(*record, resource) &&
          handled.insert(backend.where.driver + "\n" + resource.backend_id).second) {
        remove_duplicate(run, backend, resource, *record);
      }
      continue;
    }
    if (!handled.insert(backend.where.driver + "\n" + resource.backend_id).second) {
      continue;
    }
    ReapItem item = item_for(backend, resource, id, record);
    SandboxRecord probe = backend.where;
    probe.id = item.id;
    probe.backend_id = resource.backend_id;
    try {
      if (run.engine.backend_status(probe).state == BackendStatus::State::missing) {
        continue; // destroyed between the listing and now
      }
    } catch (const std::exception& e) {
      spdlog::warn("reap --orphans: status of {}: {}", resource.backend_id, e.what());
    }
    ++run.report.orphans;
    if (run.options.orphans == OrphanMode::destroy) {
      item.outcome = "planned";
      OrphanTarget target{id.empty() ? new_sandbox_id() : id,
                          resource.backend_id,
                          backend.where.driver,
                          backend.where.spec,
                          backend.where.secret_refs,
                          backend.where.info,
                          resource.labels.count("sandboxer.profile")
                              ? resource.labels.at("sandboxer.profile")
                              : backend.profile,
                          resource.labels};
      if (run.options.dry_run) {
        run.report.items.push_back(std::move(item));
      } else {
        destroys.push_back({std::move(item), std::move(target)});
      }
    } else {
      item.outcome = "reported";
      spdlog::warn("reap {}: orphan: {} (destroy it with 'sandboxer reap --orphans=destroy')",
                   item.id, item.reason);
      run.report.items.push_back(std::move(item));
    }
  }

  for (auto& record : run.seen.sandboxes) {
    if (!can_vanish(record) || !backend.live_ids.count(record.id)) {
      continue;
    }
    if (seen_ids.count(record.id) || seen_backend_ids.count(record.backend_id)) {
      continue;
    }
    ReapItem item = item_of(record, "vanished");
    item.reason = "vanished";
    try {
      // The listing missed it; its own status must agree before the record is closed.
      BackendStatus status = run.engine.backend_status(record);
      if (status.state != BackendStatus::State::missing) {
        continue;
      }
      if (run.options.dry_run) {
        item.outcome = "planned";
      } else if (settle_seen(run, record, [&](SandboxRecord& r) {
                   r.transition(EventKind::destroyed, State::destroyed, run.clock.now(), run.actor,
                                "vanished",
                                {{"backend_id", r.backend_id}, {"detail", status.detail}});
                 })) {
        item.outcome = "destroyed";
        ++run.report.vanished;
        spdlog::info("reap {}: vanished from the backend ({}); marked destroyed", record.id,
                     status.detail);
      } else {
        continue; // changed meanwhile: the next run looks again
      }
    } catch (const std::exception& e) {
      item.outcome = "failed";
      item.reason = log::redact(e.what());
      ++run.report.failures;
    }
    run.report.items.push_back(std::move(item));
  }
}

} // namespace

void reconcile_orphans(Run& run, std::vector<Work>& destroys) {
  if (run.ledger_id.empty()) {
    return; // no ledger yet: no resource can carry its id
  }
  std::set<std::string> handled;
  for (const auto& [key, backend] : backends_of(run)) {
    reconcile_backend(run, backend, destroys, handled);
  }
}

} // namespace sandboxer::reap
