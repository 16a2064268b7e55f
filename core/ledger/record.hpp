#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <sandboxer/clock.hpp>
#include <sandboxer/driver.hpp>
#include <sandboxer/duration.hpp>

#include "core/errors.hpp"
#include "core/owner.hpp"

// What the ledger keeps about one sandbox (docs/ledger-format.md). The fields are listed once, in
// core/ledger/fields.hpp, which the ledger's reader and writer and the public JSON all walk.
namespace sandboxer {

enum class State {
  creating,
  running,
  snapshotting,
  destroying,
  destroyed,
  failed,
  expired,
  orphaned,
  paused,   // Driver::pause succeeded: live, nothing runs (or, emulated, nothing exists but files)
  pausing,  // Driver::pause is being called (transitional)
  resuming, // Driver::resume is being called (transitional)
  pooled,   // a warm pool member, made ahead of demand: claimed (-> running) once, never back
};
const char* to_string(State state);
std::optional<State> state_from_string(std::string_view text);
// creating, snapshotting, destroying and expired: an operation is (or was, if its process died)
// talking to the backend.
bool is_transitional(State state);
// Everything but destroyed and failed: the backend may hold a resource.
bool is_live(State state);

// What a history entry is as a lifecycle event (docs/events.md): decided by whoever writes the
// entry, and stored with it.
enum class EventKind {
  created,
  ready,
  restoring,
  restored,
  restore_failed,
  exec_started,
  exec_finished,
  snapshotting,
  snapshotted,
  snapshot_failed,
  snapshot_removed,
  extended,
  expiring,
  expired,
  destroying,
  destroyed,
  destroy_failed,
  failed,
  orphan_found,
  repaired,
  updated,
  files_copied,        // sandboxer cp: what went in or came out, with digests
  lease_ended,         // a lease released by its holder, or lapsed and collected by reap
  ports_exposed,       // ports reachable from outside the sandbox: which, where, until when
  ports_forwarded,     // `sandboxer forward`: ports brought to this machine, by whom, until when
  ports_forward_ended, // that forward stopped while the sandbox lives on (Ctrl-C, an error)
  pausing,             // `sandboxer pause` (or reap, idle) asked the driver to pause it
  paused,              // it is paused: how, whether memory was kept, until when
  pause_failed,        // the pause failed and the sandbox runs on
  resuming,            // `sandboxer resume` (or exec with resume: {on_exec: true})
  resumed,             // it runs again
  resume_failed,       // the resume failed: it stays paused (or its backend vanished)
  pooled,              // a pool member is ready in its pool (docs/pools.md)
  claimed,             // a create took this pool member: pooled -> running, by whom, when
};
// "exec.started", "snapshot.removed", ...: the suffix of the CloudEvents type.
const char* to_string(EventKind kind);
std::optional<EventKind> event_kind_from_string(std::string_view text);

// One transition, kept as evidence until the record is pruned. `prev` links the entries of a
// record into a hash chain (sandboxer/chain.hpp); it is set when the entry is first committed.
struct HistoryEntry {
  TimePoint time;
  std::optional<State> from; // none for the first entry
  State to = State::creating;
  std::string actor;  // "alice@host pid 123", "ci:GITHUB_RUN_ID=42", "reaper"
  std::string reason; // "create", "ttl expired", the backend's error, ...
  nlohmann::json details = nlohmann::json::object();
  EventKind event = EventKind::updated;
  std::string event_id; // the CloudEvents id, given when the entry is committed
  std::string prev;     // "sha256:..." of the previous entry (of the record id for the first)
};

struct SnapshotRecord {
  std::string id;   // snp-...
  std::string name; // unique within its sandbox
  std::string backend_ref;
  std::optional<std::uint64_t> size_bytes;
  TimePoint created_at;
};

struct ProfileRef {
  std::string name;
  std::string path;
  std::string hash;
};

// `ready: {port, timeout}` of the profile (docs/ports.md, "Readiness"): the exposed tcp port that
// must answer before the sandbox is called running, at its create and at each restore.
struct ReadyPolicy {
  int port = 0;
  std::optional<Seconds> timeout; // written as format_duration's text ("60s")
};

// The rules a sandbox was created with, fixed then so that editing the profile later changes no
// live sandbox; a restore inherits them from its snapshot's sandbox.
struct CreationPolicy {
  // Durations, written in the ledger as format_duration's text ("1h30m").
  std::optional<Seconds> ttl;           // granted; none: no TTL
  std::optional<Seconds> ttl_max;       // the profile's ttl.max
  std::optional<Seconds> ttl_requested; // create --ttl, when given
  std::optional<std::string> capped;    // the notice, when ttl.max cut the request
  std::optional<std::uint64_t> snapshots_keep;
  nlohmann::json events = nlohmann::json::array(); // the profile's event sinks
  // The profile's `ports`, as asked ({port, protocol, host_port, bind}; docs/ports.md): a restore
  // exposes the same.
  nlohmann::json ports = nlohmann::json::array();
  std::optional<ReadyPolicy> ready;
  // Pause and idle (docs/pause.md). Strings empty: the default (destroy).
  std::optional<Seconds> paused_max; // ttl.paused_max: how long it may stay paused
  std::string on_paused_max;         // ttl.on_paused_max: destroy or snapshot (then destroy)
  std::optional<Seconds> idle;       // ttl.idle: no activity for this long ends it
  std::string on_idle;               // ttl.on_idle: destroy, pause or snapshot (then destroy)
  std::optional<bool> pause_memory;  // pause.memory; none: the driver's default
  bool resume_on_exec = false;       // resume.on_exec: exec and cp resume a paused sandbox first
  // cost: {per_hour, paused_per_hour, currency} as the profile declared it; null: none.
  nlohmann::json cost = nullptr;
};

// A sandbox held by a process (`sandboxer run`): its deadline is `renewed_at + duration`, moved by
// the holder while it lives and never past the TTL's own deadline, so that when the holder dies,
// even by SIGKILL, the next `reap` collects it (docs/run.md, "The lease"). Renewals change only
// these fields and `expires_at`: no history entry, no event; the entry that ends the lease
// (`lease.ended`) carries their count.
struct Lease {
  std::string holder; // the actor renewing it: "run alice@host pid 123"
  std::optional<Seconds> duration;
  TimePoint acquired_at;
  TimePoint renewed_at;
  int renewals = 0;
  std::optional<TimePoint> ttl_expires_at; // what the TTL alone gives; none: no TTL
};

// A pause (docs/pause.md): set at `pausing`, kept while paused, cleared at `resumed`.
struct PauseState {
  std::string id;             // pse- + 12 base32 chars; a repaired pause repeats it
  std::string cause = "user"; // user (sandboxer pause) or idle (reap, ttl.idle)
  std::string how;            // the driver's word once paused: freeze, stop, checkpoint, ...
  TimePoint requested_at;
  std::optional<TimePoint> at; // paused since (none while pausing)
  // The running TTL left when it paused. With ttl.paused_max the TTL stands still while paused
  // and resume gives it back; without, it runs on (none).
  std::optional<Seconds> ttl_left;
  bool memory = false;   // its processes go on after resume
  bool emulated = false; // the driver has no native pause (Capabilities::pause_emulated)
  std::optional<std::uint64_t> held_bytes; // what the paused state holds on disk, if known
};

// A warm pool's member (docs/pools.md): from its `creating` on while it waits in its pool, and
// after its claim as the proof of where it came from.
struct PoolMembership {
  std::string key;       // the pool: the profile's name, "@host" for a host-local driver's
  std::string spec_hash; // "sha256:..." of the driver and resolved spec it was made with
  std::optional<TimePoint> pooled_at;  // ready in the pool since
  std::optional<TimePoint> claimed_at; // taken by a create
  std::string claimed_by;              // that create's actor
};

struct SandboxRecord {
  std::string id; // sbx- + 12 base32 chars
  std::string name;
  ProfileRef profile;
  std::string driver;
  nlohmann::json spec = nlohmann::json::object(); // the driver's normalized spec
  std::string backend_id;
  nlohmann::json info = nlohmann::json::object(); // CreateResult::info
  State state = State::creating;
  TimePoint created_at;
  std::optional<TimePoint> expires_at;     // none: ttl none
  std::optional<TimePoint> max_expires_at; // created_at + ttl.max
  std::optional<Lease> lease;              // held by a process (`run`): expires_at is its deadline
  std::optional<PauseState> pause;         // from `pausing` until `resumed` (docs/pause.md)
  std::optional<PoolMembership> pool;      // a pool member, or one claimed from a pool
  std::vector<PortBinding> ports;          // where its exposed ports are reached (docs/ports.md)
  std::map<std::string, std::string> labels;
  std::map<std::string, std::string> env;
  nlohmann::json secret_refs = nlohmann::json::object(); // {name: {env|file: ...}}: never values
  Owner owner;
  CreationPolicy policy;
  std::vector<SnapshotRecord> snapshots;
  std::vector<HistoryEntry> history;
  std::optional<std::string> idempotency_key;
  std::optional<std::string> restored_from; // snapshot id
  std::optional<std::string> error;         // last failure, for failed / retried states
  std::string chain_head;                   // "sha256:..." of the last history entry, set at commit
  // The machine whose backend holds it, for a host-local driver (docker on a unix socket, stub,
  // vm-packer): only that machine may destroy it. Empty: reachable from any machine.
  std::string home_host;

  // Appends a history entry of kind `event` and sets `state`.
  void transition(EventKind event, State to, TimePoint time, std::string actor, std::string reason,
                  nlohmann::json details = nlohmann::json::object());
};

// Live or still holding snapshots (which outlive their sandbox): kept in the live part of the
// ledger, which every command reads. Other records are closed history.
bool is_resident(const SandboxRecord& record);

// When the record last changed: its last history entry (its creation when it has none); for a
// closed record, when it was closed.
TimePoint last_entry_time(const SandboxRecord& record);
// Whether the record may have lived in [from, to): created before `to`, and live or last changed
// at or after `from`. What LedgerStore::scan_window hands out.
bool may_overlap(const SandboxRecord& record, TimePoint from, TimePoint to);

// The deadline the TTL alone gives: under a lease, the lease's cap (what the backend and its labels
// are told, and what extend moves); else expires_at.
std::optional<TimePoint> ttl_deadline(const SandboxRecord& record);
// A lease's deadline: renewed at `now`, never past its TTL's.
TimePoint lease_deadline(const Lease& lease, TimePoint now);
// Why expires_at ends the sandbox, for reap's plan and history: "ttl expired at T", or "lease of
// HOLDER lapsed at T (renewed N times)".
std::string deadline_reason(const SandboxRecord& record);
// Paused by a driver without a native pause (modal): its backend resource was ended on purpose and
// only its snapshot remains, so neither a listing nor an orphan sweep may take it for gone.
bool paused_without_resource(const SandboxRecord& record);
// A lease as a history entry's details, when it ends (`lease.ended`): `how` is "released" or
// "lapsed".
nlohmann::json lease_summary(const Lease& lease, TimePoint now, const std::string& how);

// The snapshot of `record` that `ref` names: "snp-..." or "<sandbox id or name>:<snapshot name>".
const SnapshotRecord* snapshot_of(const SandboxRecord& record, const std::string& ref);

void to_json(nlohmann::json& j, const SandboxRecord& r);
// Throws LedgerError naming the record's id and the offending field ("owner.pid", ...).
void from_json(const nlohmann::json& j, SandboxRecord& r);

// Appends `r` to `out` as compact JSON, exactly as the ledger stores it, without building a
// nlohmann::json first: about 10x faster than to_json() + dump().
void write_json(std::string& out, const SandboxRecord& r);

// "sbx-" + 12 chars of RFC 4648 base32 (lowercase), from a CSPRNG.
std::string new_sandbox_id();
std::string new_snapshot_id();
// "pse-" + 12 base32 chars.
std::string new_pause_id();
// "evt-" + 24 base32 chars.
std::string new_event_id();
// "ldg-" + 12 base32 chars.
std::string new_ledger_id();

} // namespace sandboxer
