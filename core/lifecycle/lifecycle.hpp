#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <sandboxer/driver.hpp>
#include <sandboxer/error.hpp>

#include "core/catalog/catalog.hpp"
#include "core/cp/transfer.hpp"
#include "core/errors.hpp"
#include "core/events/hook.hpp"
#include "core/ledger/ledger.hpp"
#include "core/lifecycle/retry.hpp"
#include "core/lifecycle/rules.hpp"
#include "core/profile/profile.hpp"

namespace sandboxer {

struct CreateOptions {
  std::optional<std::string> name;
  std::optional<Seconds> ttl;
  std::optional<std::string> idempotency_key;
  // A key that matches a live sandbox made with another profile or TTL returns it anyway,
  // instead of refusing (create --reuse-any).
  bool reuse_any = false;
  Labels labels; // added to the profile's
  // Held by this process (`run`): the deadline is a lease of this length that the process renews,
  // capped by the TTL (docs/run.md).
  std::optional<Seconds> lease;
  // create --no-pool: a cold create even when the profile has a warm pool (docs/pools.md).
  bool no_pool = false;
};

// `sandboxer pool fill` and reap's refill (docs/pools.md).
struct PoolFill {
  std::string pool;                // its key
  int size = 0;                    // what the profile asks for
  int ready = 0;                   // members ready before this fill
  int filling = 0;                 // members being made by another process
  int missing = 0;                 // to make: size - ready - filling (a plan's "would make")
  int made = 0;                    // made by this fill
  int recycled = 0;                // stale members (their profile's spec changed) destroyed
  std::vector<std::string> errors; // one per member that failed
};

struct DestroyOptions {
  std::optional<Seconds> grace; // destroy --timeout: the stop's grace before the kill
  // destroy --force: no grace (grace 0), whatever --timeout or the profile says.
  bool force = false;
  // destroy --forget: when the backend fails, the record is closed anyway (destroyed, with the
  // error in its history), leaving what the backend still has to `reap --orphans`. Separate from
  // --force: killing at once and giving up on the backend are two different decisions.
  bool forget = false;
};

struct CreateOutcome {
  SandboxRecord record;
  bool reused = false;              // an idempotency key matched a live sandbox
  std::vector<std::string> notices; // e.g. "ttl 8h capped to the profile's max 4h"
};

struct ExtendOptions {
  std::optional<Seconds> by;
  std::optional<TimePoint> to;
};

struct ExtendOutcome {
  SandboxRecord record;
  std::vector<std::string> notices;
};

// `sandboxer cp` (docs/cp.md).
struct CopyRequest {
  enum class Direction { in, out };
  Direction direction = Direction::in;
  std::vector<std::string> sources; // in: paths on this machine ("-": stdin); out: one sandbox path
  std::string destination;          // in: a sandbox path; out: a path here ("-": stdout)
  // --via: the driver's own copy, tar over its exec, or (any) the first it has, in that order.
  enum class Via { any, native, exec };
  Via via = Via::any;
  cp::CopyOptions options;
};

// `sandboxer forward ID [LOCAL:]PORT` (docs/ports.md).
struct ForwardAsk {
  int port = 0;
  std::string protocol = "tcp";
  std::optional<int> local_port; // none: the port's own number; 0: any free one
};

struct ForwardPlan {
  SandboxRecord record;
  std::vector<PortForward> ports; // local ports chosen and free
  Capabilities::PortReach reach = Capabilities::PortReach::this_machine;
};

// `sandboxer pause` (docs/pause.md), and reap's pause of an idle sandbox.
struct PauseOptions {
  std::string reason = "pause requested";
  std::string cause = "user";                        // user, or idle (reap)
  std::string actor;                                 // empty: the engine's
  nlohmann::json details = nlohmann::json::object(); // for the `pausing` entry (reap: why idle)
  // Called under the lock with the current record: a reason not to pause it after all (reap: it
  // was used since the plan).
  std::function<std::optional<std::string>(const SandboxRecord&)> blocker;
};

struct PauseOutcome {
  SandboxRecord record;
  bool already = false; // it was paused already: nothing was done
};

// Reap's verdict on a sandbox it would end, given under the lock with the current record.
struct EndVerdict {
  std::optional<std::string> blocked; // why not now (changed since planned, not due any more)
  std::string reason;   // the `expired` entry's: "ttl expired at T", "idle since T (...)"
  std::string ended_by; // the `destroyed` entry's: "ttl expired", "lease lapsed", "idle"
  nlohmann::json details = nlohmann::json::object(); // merged into the `expired` entry's
};

struct ExpiredDestroy {
  enum class Outcome { destroyed, skipped, failed };
  Outcome outcome = Outcome::skipped;
  std::string message; // the skip reason or the backend's error
  int attempt = 0;
  std::optional<TimePoint> next_attempt_at;
};

// A backend resource with this ledger's label and no live record.
struct OrphanTarget {
  std::string sandbox_id; // its sandboxer.id label
  std::string backend_id;
  std::string driver;
  nlohmann::json spec;        // of the profile or record whose driver listed it
  nlohmann::json secret_refs; // idem
  nlohmann::json location;    // where it was listed (Engine::location)
  std::string profile;        // its sandboxer.profile label
  Labels labels;
};

// Records whose backends have the same key are listed together (Engine::backend_key).
std::string backend_key(const std::string& driver, const nlohmann::json& spec,
                        const nlohmann::json& location);

// The backend's word when it contradicts a record that says the sandbox runs (its container was
// stopped or removed behind sandboxer's back), else none.
std::optional<std::string> backend_disagrees(State recorded, BackendStatus::State backend);

// The one path through which every operation runs: lock -> record intent -> unlock -> driver call
// -> lock -> record outcome -> event. No backend call ever happens while the ledger lock is held.
class Engine {
public:
  Engine(const Ledger& ledger, const DriverCatalog& drivers, const Clock& clock, EventHook& events,
         std::string actor);
  const DriverCatalog& drivers() const { return m_drivers; }

  // Throws PolicyError when the profile forbids what was asked, DriverError when the backend fails
  // (after recording `failed` with the backend's message).
  // With a warm pool (Profile::pool, not --no-pool) a ready member is claimed first
  // (docs/pools.md): one transaction, then a check outside the lock.
  CreateOutcome create(const Profile& profile, const CreateOptions& options);
  // Makes members until `profile`'s pool holds its size (counted and reserved in one transaction,
  // so that fillers never overfill), first destroying members made with another spec; up to
  // `parallel` members are made at once, after the first.
  PoolFill fill_pool(const Profile& profile, int parallel = 1);
  // What fill_pool would do now, changing nothing (`reap --dry-run`): `missing` and `recycled`
  // are what it would make and destroy.
  PoolFill plan_fill(const Profile& profile) const;
  // The record a create of `profile` starts from: spec, labels, env, secrets and the policy but
  // the TTL. Refuses (PolicyError) a rule the driver could never keep.
  SandboxRecord record_from(const Profile& profile) const;
  SandboxRecord destroy(const std::string& id_or_name, const std::string& reason,
                        const DestroyOptions& options = {});
  SandboxRecord snapshot(const std::string& id_or_name, const std::optional<std::string>& name,
                         bool disk_only = false);
  // `snapshot_ref` is a snapshot id (snp-...) or "<sandbox>:<snapshot name>". A new sandbox is
  // created from it with the original sandbox's spec.
  CreateOutcome restore(const std::string& snapshot_ref, const CreateOptions& options);
  // restore --in-place: swaps the backend resource of the live sandbox `id_or_name` for one made
  // from the snapshot, keeping its id, name, TTL and profile (Capabilities::restore_in_place).
  SandboxRecord restore_in_place(const std::string& snapshot_ref, const std::string& id_or_name);
  void delete_snapshot(const std::string& snapshot_ref);
  ExtendOutcome extend(const std::string& id_or_name, const ExtendOptions& options);
  // Returns the command's exit status.
  int exec(const std::string& id_or_name, const ExecRequest& request, ExecIo& io);

  // The lease of a sandbox held by this process (`run`, docs/run.md). renew_lease moves its
  // deadline to now + its duration (never past the TTL's) and returns it; it writes no history
  // entry and no event. It throws ConflictError when this process no longer holds the lease (it
  // lapsed and reap took the sandbox, or another process took it over): the holder must stop.
  TimePoint renew_lease(const std::string& id);
  // Holds `id` by a lease of `duration` from now on, taking it over from a holder that is gone
  // (a retried job's `run` with the same idempotency key).
  SandboxRecord take_lease(const std::string& id, Seconds duration);
  // Ends the lease: one `lease.ended` entry (its renewals, `how`), and the deadline goes back to
  // the TTL's. A sandbox already gone or no longer held is returned as it is.
  SandboxRecord release_lease(const std::string& id, const std::string& how);
  // Pauses a running sandbox through its driver (Capabilities::pause, else PolicyError, exit 7):
  // `pausing`, the driver's pause, `paused`. A paused one is returned as it is; one that is not
  // running, or is held by a lease, is a ConflictError (exit 10).
  PauseOutcome pause(const std::string& id_or_name, const PauseOptions& options = {});
  // Resumes a paused sandbox: `resuming`, the driver's resume, `resumed` (running). A running one
  // is returned as it is. A backend that vanished while paused: NotFoundError (exit 3), the record
  // stays paused with a `resume.failed` entry.
  SandboxRecord resume(const std::string& id_or_name,
                       const std::string& reason = "resume requested");
  // reap's repair of a pause or resume whose process died (`pausing`/`resuming`): the same driver
  // call again, with the recorded pause id.
  SandboxRecord finish_pause(const SandboxRecord& stuck, const std::string& actor);
  // Copies files in or out of a running sandbox; one `files.copied` history entry says what moved
  // (also when it failed or was interrupted, then rethrown).
  cp::CopyResult copy(const std::string& id_or_name, const CopyRequest& request);
  // Checks a forward before anything listens: the sandbox runs, exposes each port (all its tcp
  // ports when `asks` is empty), and each local port is free (ConflictError naming its holder).
  ForwardPlan plan_forward(const std::string& id_or_name, const std::vector<ForwardAsk>& asks);
  // Runs the forward until a signal (Interrupted) or the sandbox's end: a `ports.forwarded`
  // entry first, a `ports.forward_ended` one when it stops while the sandbox lives. Public URLs
  // (PortReach::public_url) are not proxied: it returns at once, recording nothing.
  void forward(const ForwardPlan& plan, ForwardIo& watcher);
  // The backend's view of a sandbox (no ledger change).
  BackendStatus status(const std::string& id_or_name);
  // The sandbox's own output (Capabilities::logs). Read-only, as status is: no history entry and
  // no event (docs/architecture.md, "Read-only verbs").
  void logs(const std::string& id_or_name, const LogsRequest& request, LogSink& sink);

  // reap's primitives (core/reap/ decides when to call them). Each runs like every other
  // operation: lock -> intent -> unlock -> driver -> lock -> outcome -> event.
  //
  // Claims `id` as expired unless `judge` (called under the lock with the current record) blocks
  // it, then destroys it, with the judge's reasons. A failure leaves it expired, with the error,
  // the attempt number and the next attempt's time in the history entry's details.
  ExpiredDestroy destroy_expired(const std::string& id,
                                 const std::function<EndVerdict(const SandboxRecord&)>& judge,
                                 const RetryPolicy& retry, const std::string& actor);
  // Applies `change` to record `id` only if its history still has `expected_history_size`
  // entries (nothing happened to it since it was read); returns the record, or none.
  std::optional<SandboxRecord> settle(const std::string& id, size_t expected_history_size,
                                      const std::function<void(SandboxRecord&)>& change);
  // The backend's view of `record`, which may not be in the ledger any more.
  BackendStatus backend_status(const SandboxRecord& record);
  // Destroys `backend_id`, a resource that carries `record`'s id but is not the one it recorded
  // (a create repeated after its answer was lost); the record itself is left as it is.
  void destroy_duplicate(const SandboxRecord& record, const std::string& backend_id);
  // Resources whose labels include `selector`, on the backend where `where` lives (its driver,
  // spec, secrets and the location in its info: a record, or a probe made of those).
  std::vector<RemoteResource> list_remote(const SandboxRecord& where, const Labels& selector);
  // Records the orphan (a new `orphaned` record, or its old destroyed/failed one moved to
  // `orphaned`) and destroys it. Returns none without touching anything when a live record
  // appeared meanwhile. Throws the driver's error after recording it.
  std::optional<SandboxRecord> destroy_orphan(const OrphanTarget& target, const std::string& actor);

  // After create() or restore() threw: the record it left (failed, with its error), when it got as
  // far as writing one; scripts get it on stdout with the exit code.
  const std::optional<SandboxRecord>& failed_record() const { return m_failed_record; }

  // The record of `id_or_name` (LedgerData::find), or NotFoundError.
  SandboxRecord get(const std::string& id_or_name) const;

  // Where drivers report progress of long operations; by default nowhere.
  void set_progress(Progress* progress) { m_progress = progress; }

  // The driver bound to `record`'s spec and secrets, for a call outside the ledger's rules (the
  // conformance kit asks it about ids the ledger has closed).
  struct Opened {
    const DriverFactory* factory = nullptr;
    std::unique_ptr<Driver> driver;
    nlohmann::json location; // where it was opened (DriverContext::location)
  };
  Opened open_driver(const SandboxRecord& record) const;
  // Where `record`'s sandbox lives (core/lifecycle/location.hpp): what groups records by backend.
  nlohmann::json location(const SandboxRecord& record) const;
  // One backend: the driver, spec and location; records with the same key are listed together.
  std::string backend_key(const SandboxRecord& record) const {
    return sandboxer::backend_key(record.driver, record.spec, location(record));
  }
  // The backend's state of each live record with a resource, by id: one listing per backend
  // (core/lifecycle/backend_states.cpp). A record its backend did not list is `missing`; the
  // records of a backend that cannot be asked are left out, with one warning.
  std::map<std::string, BackendStatus> backend_states(const std::vector<SandboxRecord>& records,
                                                      const std::string& ledger_id);

private:
  // The context a driver of `record` gets, but for secrets and location; its data dir is only
  // named, not made (location() asks for it per record, and needs no directory).
  DriverContext context_of(const SandboxRecord& record) const;
  // Applies `change` to the record `id` under the lock, commits, and emits each new history entry.
  SandboxRecord update(const std::string& id, const std::function<void(SandboxRecord&)>& change);
  // update() of the outcome of a backend call that succeeded (`done`: "created", "destroyed").
  // When that commit fails, the backend has done its part while the ledger still shows the
  // intent: the error then names the sandbox and its backend resource, and says how to settle it.
  SandboxRecord record_outcome(const std::string& id, const std::string& backend_id,
                               const char* done, const std::function<void(SandboxRecord&)>& change);
  // A backend call failed: records the redacted error on `id` and moves it to `to`, with the
  // reason `what` + the error. The caller rethrows its error; a failure to record it is logged,
  // never thrown over it.
  void record_failure(const std::string& id, const Error& error, EventKind kind, State to,
                      const std::string& actor, const std::string& what, nlohmann::json details);
  // create's claim of a ready member of `profile`'s pool (engine_pool.cpp), or none when the pool
  // has none; `wanted` is the record a cold create would make, TTL decided.
  std::optional<CreateOutcome> claim_from_pool(const Profile& profile, const SandboxRecord& wanted,
                                               const CreateOptions& options,
                                               const lifecycle_rules::TtlDecision& decision);
  // Makes fill_pool's reserved members through `drivers` (one per thread), counting into `fill`.
  void make_members(std::vector<SandboxRecord>& reserved, std::vector<Opened>& drivers,
                    const std::string& ledger_id, PoolFill& fill);
  // Why a freshly claimed member cannot be handed over (its backend does not run it, or a no-op
  // exec did not answer within a few seconds; with `exec_probe` false only the status counts), or
  // none.
  std::optional<std::string> probe_member(const SandboxRecord& record, bool exec_probe);
  CreateOutcome run_create(SandboxRecord record, const CreateOptions& options,
                           const std::optional<std::string>& from_snapshot,
                           std::vector<std::string> notices);
  // The backend's part of a create whose intent (`creating`) is committed: the driver's create,
  // readiness, the outcome (`ready`, or `pooled` for a pool member), and undoing a failure.
  CreateOutcome make_in_backend(SandboxRecord record, Opened& opened, const std::string& ledger_id,
                                const std::optional<std::string>& from_snapshot,
                                std::vector<std::string> notices,
                                std::chrono::steady_clock::time_point started);
  // `failure_details` go into the history entry of a failed destroy. Returns the closed record as
  // committed.
  SandboxRecord destroy_one(const SandboxRecord& record, const std::string& actor,
                            const std::string& reason, State intent,
                            const nlohmann::json& failure_details = nlohmann::json::object(),
                            const DestroyOptions& options = {});
  // Stages the events of `record`'s history from `first_new_entry` on, commits, and marks them
  // committed: the one place a transition is written.
  void commit(Ledger::Transaction& tx, SandboxRecord& record, size_t first_new_entry);
  // Destroys every backend resource of `record`: the one it recorded, and those that carry its
  // sandboxer.id label (Capabilities::list_by_label); without `recorded_too`, only those others.
  // Returns how many were there.
  size_t remove_resources(const SandboxRecord& record, Opened& opened, bool recorded_too = true);
  // remove_resources() after a failed create, when the driver can find what it made by label;
  // returns what to add to the error ("; removed the 1 backend resource(s) it had made").
  std::string undo_create(const SandboxRecord& record, Opened& opened);
  void remember_failed(const std::string& id);
  // Waits until the exposed port of the record's `ready` policy answers (docs/ports.md,
  // "Readiness"); returns the details for the `ready` entry, or throws (exit 11 when it did not
  // answer in time).
  nlohmann::json wait_until_ready(const SandboxRecord& record, Driver& driver);
  SandboxRecord apply_snapshot_retention(SandboxRecord record, Driver& driver);
  // The driver's parts of pause and resume, after the intent is committed (engine_pause.cpp).
  SandboxRecord run_pause(const SandboxRecord& record, Opened& opened, const std::string& actor);
  SandboxRecord run_resume(const SandboxRecord& record, Opened& opened,
                           const std::string& ledger_id, const std::string& actor);
  void settle_failed_resume(const SandboxRecord& record, Opened& opened, const Error& error,
                            const std::string& pause_id, const std::string& actor);

  const Ledger& m_ledger;
  const DriverCatalog& m_drivers;
  const Clock& m_clock;
  EventHook& m_events;
  std::string m_actor;
  Progress* m_progress = nullptr;
  std::optional<SandboxRecord> m_failed_record;
};

} // namespace sandboxer
