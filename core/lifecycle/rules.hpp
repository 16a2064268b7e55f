#pragma once
// The rules a lifecycle operation follows, apart from the operations (engine.cpp): how a TTL is
// decided and recorded, what every backend resource is labeled with, what a driver is asked.

#include <optional>
#include <string>
#include <vector>

#include <sandboxer/driver.hpp>
#include <sandboxer/duration.hpp>

#include "core/errors.hpp"
#include "core/ledger/record.hpp"
#include "core/profile/profile.hpp"

namespace sandboxer::lifecycle_rules {

SandboxHandle handle_of(const SandboxRecord& record);

// The TTL a create asked for, checked against the profile's policy.
struct TtlDecision {
  std::optional<Seconds> ttl;
  std::optional<Seconds> max;
  std::vector<std::string> notices;
};
TtlDecision decide_ttl(const TtlPolicy& policy, const std::optional<Seconds>& requested,
                       const std::string& profile_name);
// The TTL part of a creation policy: what was granted, the cap, and what was asked when the cap
// cut it short (a cap is reported, never silent).
void set_ttl_policy(CreationPolicy& policy, const TtlDecision& decision,
                    const std::optional<Seconds>& requested);
// now + a duration of the creation policy ("ttl", "ttl_max"), or nullopt when there is none.
// Throws UsageError when the deadline cannot be recorded.
std::optional<TimePoint> deadline_after(TimePoint now, const std::optional<Seconds>& duration,
                                        const char* key);

// An idempotency key names one request: a live sandbox it made with another profile (resolved
// hash) or another --ttl is not what this create asked for. Throws PolicyError (exit 7) naming
// it; `create --reuse-any` skips the check.
void refuse_other_request(const SandboxRecord& existing, const SandboxRecord& wanted,
                          const std::string& key);

// The profile's pause and idle rules, fixed in the creation policy (docs/pause.md).
void set_pause_policy(CreationPolicy& policy, const PausePolicy& pause);

// A warm pool's key: the profile's name, with "@host" when its driver is host-local (a member
// is reached only from the machine that made it) (docs/pools.md).
std::string pool_key_of(const SandboxRecord& record);
// "sha256:..." of what a backend fixes at creation: driver, spec, env, secret references, ports.
// A member whose hash is not its profile's now is stale.
std::string pool_spec_hash(const SandboxRecord& record);

// A member a claim may take: pooled, made with `spec_hash`, before its max_age.
bool is_ready_member(const SandboxRecord& record, const std::string& spec_hash, TimePoint now);

// A pool's unclaimed members as a fill, `pool status` and `reap --dry-run` count them.
struct PoolCensus {
  int ready = 0;                   // claimable now
  int filling = 0;                 // `creating` with the profile's spec (a fill under way)
  std::vector<std::string> stale;  // pooled with another spec: a fill recycles them
  int expired = 0;                 // pooled, of this spec, past max_age: reap destroys them
  std::optional<TimePoint> oldest; // when the oldest ready one was pooled
};
inline const SandboxRecord& as_record(const SandboxRecord& record) {
  return record;
}
inline const SandboxRecord& as_record(const SandboxRecord* record) {
  return *record;
}
// `records` may hold any records; those not unclaimed members of `key` are ignored.
template <typename Records>
PoolCensus pool_census(const Records& records, const std::string& key, const std::string& spec_hash,
                       TimePoint now) {
  PoolCensus census;
  for (const auto& entry : records) {
    const SandboxRecord& record = as_record(entry);
    if (!record.pool || record.pool->key != key || record.pool->claimed_at) {
      continue;
    }
    const bool same_spec = record.pool->spec_hash == spec_hash;
    if (record.state == State::creating) {
      census.filling += same_spec ? 1 : 0;
    } else if (record.state != State::pooled) {
      continue;
    } else if (!same_spec) {
      census.stale.push_back(record.id);
    } else if (!is_ready_member(record, spec_hash, now)) {
      ++census.expired;
    } else {
      ++census.ready;
      const TimePoint since = record.pool->pooled_at.value_or(record.created_at);
      census.oldest = census.oldest ? std::min(*census.oldest, since) : since;
    }
  }
  return census;
}

Labels ownership_labels(const SandboxRecord& record, const std::string& ledger_id);
// What every driver is asked to make for `record`.
CreateRequest create_request(const SandboxRecord& record, const std::string& ledger_id);

} // namespace sandboxer::lifecycle_rules
