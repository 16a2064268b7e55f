#pragma once
// Every field of a sandbox record, once: the order is the ledger's (identity and state first, so
// that `head -c` of a file shows what matters; the free-form driver fields last). The reader, the
// writer, the public JSON (public_json.cpp) and schemas/ledger.schema.json follow this list;
// docs/ledger-format.md describes each field.

#include <array>

#include "core/ledger/codec.hpp"

namespace sandboxer::ledger_format {

template <> struct Fields<ProfileRef> {
  static constexpr std::array fields = {
      field<&ProfileRef::name>("name"),
      field<&ProfileRef::path>("path"),
      field<&ProfileRef::hash>("hash"),
  };
};

template <> struct Fields<Owner> {
  static constexpr std::array fields = {
      field<&Owner::user>("user"),
      field<&Owner::host>("host"),
      field<&Owner::pid>("pid"),
      field<&Owner::ci>("ci"),
  };
};

template <> struct Fields<ReadyPolicy> {
  static constexpr std::array fields = {
      field<&ReadyPolicy::port>("port", k_required),
      field<&ReadyPolicy::timeout>("timeout"),
  };
};

template <> struct Fields<CreationPolicy> {
  static constexpr std::array fields = {
      field<&CreationPolicy::ttl>("ttl"),
      field<&CreationPolicy::ttl_max>("ttl_max"),
      field<&CreationPolicy::ttl_requested>("ttl_requested"),
      field<&CreationPolicy::capped>("capped"),
      field<&CreationPolicy::snapshots_keep>("snapshots_keep"),
      field<&CreationPolicy::events>("events"),
      field<&CreationPolicy::ports>("ports", k_nonempty),
      field<&CreationPolicy::ready>("ready", k_nonempty),
      field<&CreationPolicy::paused_max>("paused_max", k_nonempty),
      checked_field<&CreationPolicy::on_paused_max, read_on_paused_max>("on_paused_max",
                                                                        k_nonempty),
      field<&CreationPolicy::idle>("idle", k_nonempty),
      checked_field<&CreationPolicy::on_idle, read_on_idle>("on_idle", k_nonempty),
      field<&CreationPolicy::pause_memory>("pause_memory", k_nonempty),
      field<&CreationPolicy::resume_on_exec>("resume_on_exec", k_nonempty),
      checked_field<&CreationPolicy::cost, read_cost>("cost", k_nonempty),
  };
};

template <> struct Fields<Lease> {
  static constexpr std::array fields = {
      field<&Lease::holder>("holder"),
      field<&Lease::duration>("duration"),
      field<&Lease::acquired_at>("acquired_at", k_required),
      field<&Lease::renewed_at>("renewed_at", k_required),
      field<&Lease::renewals>("renewals"),
      field<&Lease::ttl_expires_at>("ttl_expires_at"),
  };
};

// Absent members are left out: a pausing record has no `at` yet, a native pause no `emulated`.
template <> struct Fields<PauseState> {
  static constexpr std::array fields = {
      field<&PauseState::id>("id", k_required),
      checked_field<&PauseState::cause, read_pause_cause>("cause"),
      field<&PauseState::how>("how", k_nonempty),
      field<&PauseState::requested_at>("requested_at", k_required),
      field<&PauseState::at>("at", k_nonempty),
      field<&PauseState::ttl_left>("ttl_left", k_nonempty),
      field<&PauseState::memory>("memory"),
      field<&PauseState::emulated>("emulated", k_nonempty),
      field<&PauseState::held_bytes>("held_bytes", k_nonempty),
  };
};

template <> struct Fields<PoolMembership> {
  static constexpr std::array fields = {
      field<&PoolMembership::key>("key", k_required),
      field<&PoolMembership::spec_hash>("spec_hash"),
      field<&PoolMembership::pooled_at>("pooled_at", k_nonempty),
      field<&PoolMembership::claimed_at>("claimed_at", k_nonempty),
      field<&PoolMembership::claimed_by>("claimed_by", k_nonempty),
  };
};

template <> struct Fields<PortBinding> {
  static constexpr std::array fields = {
      field<&PortBinding::port>("port", k_required),
      field<&PortBinding::protocol>("protocol"),
      field<&PortBinding::host>("host"),
      field<&PortBinding::host_port>("host_port"),
      field<&PortBinding::url>("url"),
  };
};

template <> struct Fields<SnapshotRecord> {
  static constexpr std::array fields = {
      field<&SnapshotRecord::id>("id", k_required),
      field<&SnapshotRecord::name>("name"),
      field<&SnapshotRecord::backend_ref>("backend_ref"),
      field<&SnapshotRecord::size_bytes>("size_bytes"),
      field<&SnapshotRecord::created_at>("created_at", k_required),
  };
};

template <> struct Fields<HistoryEntry> {
  static constexpr std::array fields = {
      field<&HistoryEntry::time>("time", k_required),
      field<&HistoryEntry::from>("from"),
      field<&HistoryEntry::to>("to", k_required),
      field<&HistoryEntry::actor>("actor"),
      field<&HistoryEntry::reason>("reason"),
      field<&HistoryEntry::details>("details"),
      field<&HistoryEntry::event>("event"),
      field<&HistoryEntry::event_id>("event_id"),
      field<&HistoryEntry::prev>("prev"),
  };
};

template <> struct Fields<SandboxRecord> {
  static constexpr std::array fields = {
      field<&SandboxRecord::id>("id", k_required),
      field<&SandboxRecord::name>("name", k_required),
      field<&SandboxRecord::state>("state", k_required),
      field<&SandboxRecord::driver>("driver", k_required),
      field<&SandboxRecord::profile>("profile"),
      field<&SandboxRecord::backend_id>("backend_id"),
      field<&SandboxRecord::created_at>("created_at", k_required),
      field<&SandboxRecord::expires_at>("expires_at"),
      field<&SandboxRecord::max_expires_at>("max_expires_at"),
      field<&SandboxRecord::lease>("lease", k_nonempty),
      field<&SandboxRecord::pause>("pause", k_nonempty),
      field<&SandboxRecord::pool>("pool", k_nonempty),
      field<&SandboxRecord::ports>("ports", k_nonempty | k_listed),
      field<&SandboxRecord::labels>("labels"),
      field<&SandboxRecord::env>("env", k_detail | k_private),
      field<&SandboxRecord::secret_refs>("secret_refs", k_detail | k_private),
      field<&SandboxRecord::owner>("owner"),
      field<&SandboxRecord::policy>("policy", k_detail | k_private),
      field<&SandboxRecord::idempotency_key>("idempotency_key"),
      field<&SandboxRecord::restored_from>("restored_from"),
      field<&SandboxRecord::error>("error"),
      field<&SandboxRecord::snapshots>("snapshots"),
      field<&SandboxRecord::history>("history", k_detail | k_private),
      field<&SandboxRecord::chain_head>("chain_head", k_detail | k_private),
      field<&SandboxRecord::home_host>("home_host", k_private | k_nonempty),
      field<&SandboxRecord::spec>("spec", k_detail | k_private),
      field<&SandboxRecord::info>("info", k_detail | k_private),
  };
};

} // namespace sandboxer::ledger_format
