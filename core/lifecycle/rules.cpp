#include "core/lifecycle/rules.hpp"

#include <fmt/format.h>

#include <sandboxer/error.hpp>
#include <sandboxer/ports.hpp>

#include "core/errors.hpp"
#include "core/sha256.hpp"

namespace sandboxer::lifecycle_rules {

// now + a duration of the creation policy ("ttl", "ttl_max"), or nullopt when there is none.
// Durations are bounded (k_max_duration), so only a clock far in the future could make the
// deadline unwritable: refused before anything is recorded.
std::optional<TimePoint> deadline_after(TimePoint now, const std::optional<Seconds>& duration,
                                        const char* key) {
  if (!duration) {
    return std::nullopt;
  }
  const auto deadline = add_checked(now, *duration);
  if (!deadline) {
    throw UsageError(fmt::format("{} {} from now ({}) is not a time sandboxer can record (years "
                                 "0000-9999, durations up to 100 years)",
                                 key, format_duration(*duration), format_time(now)));
  }
  return deadline;
}

SandboxHandle handle_of(const SandboxRecord& record) {
  return {record.id, record.backend_id, record.spec, record.info};
}

// The TTL part of a creation policy: what was granted, the cap, and what was asked when the cap
// cut it short (a cap is reported, never silent).
void set_ttl_policy(CreationPolicy& policy, const TtlDecision& decision,
                    const std::optional<Seconds>& requested) {
  policy.ttl = decision.ttl;
  policy.ttl_max = decision.max;
  policy.ttl_requested = requested;
  policy.capped = decision.notices.empty() ? std::nullopt : std::optional(decision.notices.front());
}

TtlDecision decide_ttl(const TtlPolicy& policy, const std::optional<Seconds>& requested,
                       const std::string& profile_name) {
  TtlDecision decision;
  decision.max = policy.max_ttl;
  if (requested) {
    decision.ttl = *requested;
  } else if (!policy.none) {
    decision.ttl = policy.default_ttl;
  }
  if (decision.ttl && decision.max && *decision.ttl > *decision.max) {
    decision.notices.push_back(fmt::format("ttl {} capped to {} (ttl.max of profile {})",
                                           format_duration(*decision.ttl),
                                           format_duration(*decision.max), profile_name));
    decision.ttl = decision.max;
  }
  return decision;
}

void set_pause_policy(CreationPolicy& policy, const PausePolicy& pause) {
  policy.paused_max = pause.paused_max;
  policy.on_paused_max = pause.on_paused_max;
  policy.idle = pause.idle;
  policy.on_idle = pause.on_idle;
  policy.pause_memory = pause.memory;
  policy.resume_on_exec = pause.resume_on_exec;
  policy.cost = pause.cost;
}

std::string pool_key_of(const SandboxRecord& record) {
  return record.home_host.empty() ? record.profile.name
                                  : record.profile.name + "@" + record.home_host;
}

std::string pool_spec_hash(const SandboxRecord& record) {
  nlohmann::json fixed = {{"driver", record.driver},
                          {"spec", record.spec},
                          {"env", record.env},
                          {"secret_refs", record.secret_refs},
                          {"ports", record.policy.ports},
                          {"ready", record.policy.ready ? nlohmann::json(record.policy.ready->port)
                                                        : nlohmann::json(nullptr)}};
  return sha256_digest(fixed.dump());
}

bool is_ready_member(const SandboxRecord& record, const std::string& spec_hash, TimePoint now) {
  return record.state == State::pooled && record.pool && !record.pool->claimed_at &&
         record.pool->spec_hash == spec_hash && record.expires_at && *record.expires_at > now;
}

Labels ownership_labels(const SandboxRecord& record, const std::string& ledger_id) {
  Labels labels = record.labels;
  labels["sandboxer.id"] = record.id;
  labels["sandboxer.ledger"] = ledger_id;
  labels["sandboxer.profile"] = record.profile.name;
  // A lease's deadline moves; the label and the backend's own deadline are its TTL's cap.
  if (auto deadline = ttl_deadline(record)) {
    labels["sandboxer.expires_at"] = format_time(*deadline);
  }
  return labels;
}

// What every driver is asked to make for `record`. The sandbox's own id is in its environment, so
// a script inside can name the sandbox it ran in whatever the backend.
CreateRequest create_request(const SandboxRecord& record, const std::string& ledger_id) {
  CreateRequest request;
  request.sandbox_id = record.id;
  request.name = record.name;
  request.labels = ownership_labels(record, ledger_id);
  request.env = record.env;
  request.env["SANDBOXER_ID"] = record.id;
  request.expires_at = ttl_deadline(record);
  request.ports = port_specs_from_json(record.policy.ports);
  request.pool_member = record.pool && !record.pool->claimed_at;
  return request;
}

void refuse_other_request(const SandboxRecord& existing, const SandboxRecord& wanted,
                          const std::string& key) {
  std::string differs;
  if (existing.profile.hash != wanted.profile.hash) {
    differs = fmt::format("profile {} ({}), not {} ({})", existing.profile.name,
                          existing.profile.hash.substr(0, 19), wanted.profile.name,
                          wanted.profile.hash.substr(0, 19));
  } else if (existing.policy.ttl_requested != wanted.policy.ttl_requested) {
    auto text = [](const std::optional<Seconds>& d) {
      return d ? format_duration(*d) : std::string("(none)");
    };
    differs = fmt::format("--ttl {}, not {}", text(existing.policy.ttl_requested),
                          text(wanted.policy.ttl_requested));
  } else {
    return;
  }
  throw PolicyError(fmt::format(
      "idempotency key \"{}\" belongs to {} ({}, {}), made with {}: a key returns only the "
      "sandbox its own request made. Use a key of this request, or create --reuse-any to get {} "
      "anyway",
      key, existing.id, existing.name, to_string(existing.state), differs, existing.id));
}

} // namespace sandboxer::lifecycle_rules
