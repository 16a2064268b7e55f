// Warm pools (docs/pools.md): members are sandboxes made ahead of demand in state `pooled`; a
// create claims one in a single transaction, so a member is handed to one create, once, on the
// local files and on a shared PostgreSQL ledger alike. No daemon: `pool fill` and reap refill.
#include <future>
#include <mutex>
#include <thread>

#include "core/lifecycle/engine_internal.hpp"

namespace sandboxer {
using namespace engine_internal;
using namespace lifecycle_rules;

namespace {

// How long a claimed member's no-op exec may take before the member counts as dead: a warm
// member answers in milliseconds, and the claim exists to spare the caller a wait.
constexpr auto k_probe_bound = std::chrono::seconds(5);

class DiscardIo : public ExecIo {
public:
  void out(std::string_view) override {}
  void err(std::string_view) override {}
};

// Who made a member: the actor of its `pooled` entry.
std::string maker_of(const SandboxRecord& record) {
  for (auto it = record.history.rbegin(); it != record.history.rend(); ++it) {
    if (it->event == EventKind::pooled) {
      return it->actor;
    }
  }
  return "";
}

} // namespace

namespace {

void refuse_unpoolable(const Profile& profile) {
  if (!profile.pool) {
    throw UsageError(fmt::format("profile {} has no pool (add pool: {{size: 2, max_age: 1h}}; "
                                 "docs/pools.md)",
                                 profile.name));
  }
  for (const auto& port : profile.ports) {
    if (port.host_port) {
      // Two members could never both hold it, and the claimed one would hold it for good.
      throw PolicyError(fmt::format("profile {}: a pool cannot keep members of a profile with a "
                                    "fixed host_port ({}); leave host_port out",
                                    profile.name, *port.host_port));
    }
  }
}

PoolFill fill_of(const Profile& profile, const std::string& key, const PoolCensus& census) {
  PoolFill fill;
  fill.pool = key;
  fill.size = profile.pool->size;
  fill.ready = census.ready;
  fill.filling = census.filling;
  fill.missing = std::max(0, fill.size - census.ready - census.filling);
  return fill;
}

} // namespace

PoolFill Engine::plan_fill(const Profile& profile) const {
  refuse_unpoolable(profile);
  const SandboxRecord wanted = record_from(profile);
  const std::string key = pool_key_of(wanted);
  const LedgerData data = m_ledger.read(ReadScope::summary);
  const PoolCensus census = pool_census(data.sandboxes, key, pool_spec_hash(wanted), m_clock.now());
  PoolFill fill = fill_of(profile, key, census);
  fill.recycled = static_cast<int>(census.stale.size());
  return fill;
}

PoolFill Engine::fill_pool(const Profile& profile, int parallel) {
  refuse_unpoolable(profile);
  SandboxRecord wanted = record_from(profile);
  const std::string key = pool_key_of(wanted);
  const std::string spec_hash = pool_spec_hash(wanted);

  // Members made with another spec are recycled first: they would never be claimed.
  std::vector<std::string> stale;
  {
    auto tx = m_ledger.begin();
    stale = pool_census(tx->pool_members(key), key, spec_hash, m_clock.now()).stale;
  }
  int recycled = 0;
  std::vector<std::string> errors;
  for (const auto& id : stale) {
    try {
      destroy(id, "pool member's profile changed (its spec hash is not the profile's now)");
      ++recycled;
    } catch (const Error& e) {
      errors.push_back(fmt::format("{}: recycling failed: {}", id, log::redact(e.what())));
    }
  }

  // Opened before anything is reserved: a driver that cannot open leaves no member behind.
  std::vector<Opened> drivers;
  for (int n = 0; n < std::clamp(parallel, 1, profile.pool->size); ++n) {
    drivers.push_back(open_driver(wanted));
  }
  wanted.info = drivers.front().location;
  std::vector<SandboxRecord> reserved;
  std::string ledger_id;
  PoolFill fill;
  {
    // Counting and reserving in one transaction: two fillers (two reapers of a fleet) never make
    // more than the pool's size between them.
    auto tx = m_ledger.begin();
    const TimePoint now = m_clock.now();
    fill = fill_of(profile, key, pool_census(tx->pool_members(key), key, spec_hash, now));
    for (int n = 0; n < fill.missing; ++n) {
      SandboxRecord member = wanted;
      member.id = new_sandbox_id();
      member.name = member.id;
      member.created_at = now;
      member.owner = current_owner();
      // A member lives max_age; its TTL is decided when it is claimed.
      member.expires_at = now + profile.pool->max_age;
      member.pool = PoolMembership{key, spec_hash, std::nullopt, std::nullopt, ""};
      member.transition(EventKind::created, State::creating, now, m_actor,
                        "pool " + key + ": made ahead of demand",
                        {{"pool", {{"key", key}, {"size", fill.size}}}});
      SandboxRecord& added = tx->insert(std::move(member));
      commit(tx, added, 0);
      reserved.push_back(added);
    }
    ledger_id = tx->ledger_id();
  }
  fill.recycled = recycled;
  fill.errors = std::move(errors);
  m_events.deliver();
  make_members(reserved, drivers, ledger_id, fill);
  return fill;
}

// The first member alone, then the rest on `drivers.size()` threads: a driver that starts members
// from a checkpoint of an identical booted one (vm-packer) makes that checkpoint from the first.
void Engine::make_members(std::vector<SandboxRecord>& reserved, std::vector<Opened>& drivers,
                          const std::string& ledger_id, PoolFill& fill) {
  std::mutex mutex;
  size_t next = 0;
  size_t end = std::min<size_t>(1, reserved.size());
  std::exception_ptr interrupted;
  auto worker = [&](Opened& opened) {
    for (;;) {
      SandboxRecord member;
      {
        std::lock_guard lock(mutex);
        if (next >= end || interrupted) {
          return;
        }
        member = std::move(reserved[next++]);
      }
      const std::string id = member.id;
      try {
        make_in_backend(std::move(member), opened, ledger_id, std::nullopt, {}, Stopwatch::now());
        std::lock_guard lock(mutex);
        ++fill.made;
      } catch (const Interrupted&) {
        // The member's record says so; the rest stay reserved for reap to settle.
        std::lock_guard lock(mutex);
        interrupted = std::current_exception();
      } catch (const Error& e) {
        std::lock_guard lock(mutex);
        fill.errors.push_back(fmt::format("{}: {}", id, log::redact(e.what())));
      }
    }
  };
  worker(drivers.front());
  end = reserved.size();
  std::vector<std::thread> threads;
  for (size_t t = 0; t < drivers.size() && next + t < end && !interrupted; ++t) {
    threads.emplace_back(worker, std::ref(drivers[t]));
  }
  for (auto& thread : threads) {
    thread.join();
  }
  if (interrupted) {
    std::rethrow_exception(interrupted);
  }
}

std::optional<CreateOutcome> Engine::claim_from_pool(const Profile& profile,
                                                     const SandboxRecord& wanted,
                                                     const CreateOptions& options,
                                                     const TtlDecision& decision) {
  const std::string key = pool_key_of(wanted);
  const std::string spec_hash = pool_spec_hash(wanted);
  // A dead member is destroyed and the next one taken; the pool's size bounds the tries.
  for (int attempt = 0; attempt <= profile.pool->size; ++attempt) {
    SandboxRecord claimed;
    {
      auto tx = m_ledger.begin();
      if (options.idempotency_key) {
        if (tx->find_live_by_key(*options.idempotency_key)) {
          return std::nullopt; // the cold path returns it, or refuses the other request
        }
      }
      refuse_taken_name(tx, options.name);
      const TimePoint now = m_clock.now();
      SandboxRecord* member = nullptr;
      for (auto* candidate : tx->pool_members(key)) {
        if (is_ready_member(*candidate, spec_hash, now)) {
          member = candidate;
          break; // the oldest: the nearest to its max_age
        }
      }
      if (!member) {
        return std::nullopt;
      }
      const size_t before = member->history.size();
      const std::optional<TimePoint> pooled_at = member->pool->pooled_at;
      const std::string made_by = maker_of(*member);
      // From here on it is this create's sandbox, as a cold create's would be: its TTL, name,
      // labels and owner are the claim's. Backend labels set at creation stay as they were; the
      // ledger's are the truth, and orphan sweeps key on sandboxer.id, which never changes.
      member->policy = wanted.policy;
      member->expires_at = deadline_after(now, member->policy.ttl, "ttl");
      member->max_expires_at = deadline_after(now, member->policy.ttl_max, "ttl_max");
      member->name = options.name.value_or(member->id);
      member->labels = wanted.labels;
      for (const auto& [label, value] : options.labels) {
        member->labels[label] = value;
      }
      member->owner = current_owner();
      member->idempotency_key = options.idempotency_key;
      member->profile = wanted.profile;
      member->pool->claimed_at = now;
      member->pool->claimed_by = m_actor;
      nlohmann::json details = {
          {"pool",
           {{"key", key},
            {"pooled_at", pooled_at ? nlohmann::json(format_time(*pooled_at)) : nullptr},
            {"made_by", made_by}}}};
      if (options.lease) {
        details["lease"] = lease_at_create(*member, *options.lease, now, m_actor);
      }
      member->transition(EventKind::claimed, State::running, now, m_actor,
                         fmt::format("claimed from pool {} (pooled at {}, never used)", key,
                                     pooled_at ? format_time(*pooled_at) : "-"),
                         details);
      record_exposure(*member, now, m_actor);
      commit(tx, *member, before);
      claimed = *member;
    }
    m_events.deliver();
    if (auto dead = probe_member(claimed, profile.pool->probe == PoolPolicy::Probe::exec)) {
      spdlog::warn("{}: pool member dead at claim ({}): destroying it and taking the next",
                   claimed.id, *dead);
      try {
        destroy_one(claimed, m_actor, "pool member dead at claim: " + *dead, State::destroying);
      } catch (const Error& e) {
        spdlog::warn("{}: {}", claimed.id, log::redact(e.what())); // reap --orphans finishes it
      }
      continue;
    }
    spdlog::info("{}: claimed from pool {}", claimed.id, key);
    return CreateOutcome{claimed, false, decision.notices};
  }
  return std::nullopt;
}

std::optional<std::string> Engine::probe_member(const SandboxRecord& record, bool exec_probe) {
  try {
    auto opened = std::make_shared<Opened>(open_driver(record));
    BackendStatus status = opened->driver->status(handle_of(record));
    if (status.state != BackendStatus::State::running) {
      return fmt::format("the backend says {}", status.detail);
    }
    if (!exec_probe || !opened->factory->capabilities().exec) {
      return std::nullopt;
    }
    // On a thread of its own, which owns the driver: one that never answers is left behind
    // (and ended with the process) rather than holding the create.
    auto handle = handle_of(record);
    std::packaged_task<int()> probe([opened, handle] {
      DiscardIo io;
      ExecRequest request;
      request.argv = {"true"};
      return opened->driver->exec(handle, request, io);
    });
    auto answer = probe.get_future();
    std::thread(std::move(probe)).detach();
    if (answer.wait_for(k_probe_bound) != std::future_status::ready) {
      return fmt::format("a no-op exec did not answer within {}s", k_probe_bound.count());
    }
    const int code = answer.get();
    if (code != 0) {
      return fmt::format("a no-op exec (true) exited {}", code);
    }
    return std::nullopt;
  } catch (const std::exception& e) {
    return log::redact(e.what());
  }
}

} // namespace sandboxer
