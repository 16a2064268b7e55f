#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <sandboxer/driver.hpp>
#include <sandboxer/ledger.hpp>
#include <sandboxer/profile.hpp>

namespace sandboxer {

// Receives every committed transition. The events issue plugs its outbox in here; the default
// only logs at debug level.
class EventHook {
public:
  virtual ~EventHook() = default;
  virtual void on_transition(const SandboxRecord& record, const HistoryEntry& entry) = 0;
};

struct CreateOptions {
  std::optional<std::string> name;
  std::optional<Seconds> ttl;
  std::optional<std::string> idempotency_key;
  Labels labels; // added to the profile's
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

struct ReapOptions {
  bool dry_run = false;
  int parallel = 4;
  std::optional<int> max_destroy;
  Seconds grace{0};
};

struct ReapItem {
  std::string id;
  std::string name;
  std::string driver;
  std::optional<TimePoint> expires_at;
  std::string action;  // "destroy"
  std::string outcome; // "planned", "destroyed", "failed: ..."
};

struct ReapReport {
  std::vector<ReapItem> items;
  int failures = 0;
};

// The one path through which every operation runs: lock -> record intent -> unlock -> driver call
// -> lock -> record outcome -> event. No backend call ever happens while the ledger lock is held.
class Engine {
public:
  Engine(const Ledger& ledger, const Clock& clock, EventHook& events, std::string actor);

  // Throws PolicyError when the profile forbids what was asked, DriverError when the backend fails
  // (after recording `failed` with the backend's message).
  CreateOutcome create(const Profile& profile, const CreateOptions& options);
  SandboxRecord destroy(const std::string& id_or_name, const std::string& reason);
  SandboxRecord snapshot(const std::string& id_or_name, const std::optional<std::string>& name);
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
  // The backend's view of a sandbox (no ledger change).
  BackendStatus status(const std::string& id_or_name);
  ReapReport reap(const ReapOptions& options);

  // The live record of `id_or_name`, or NotFoundError.
  SandboxRecord get(const std::string& id_or_name) const;

  // Where drivers report progress of long operations; by default nowhere.
  void set_progress(Progress* progress) { m_progress = progress; }

private:
  struct Opened {
    const DriverFactory* factory = nullptr;
    std::unique_ptr<Driver> driver;
  };
  Opened open_driver(const SandboxRecord& record) const;
  // Applies `change` to the record `id` under the lock, commits, and emits each new history entry.
  SandboxRecord update(const std::string& id, const std::function<void(SandboxRecord&)>& change);
  CreateOutcome run_create(SandboxRecord record, const CreateOptions& options,
                           const std::optional<std::string>& from_snapshot,
                           std::vector<std::string> notices);
  void destroy_one(const SandboxRecord& record, const std::string& actor, const std::string& reason,
                   State intent);
  void emit_since(const SandboxRecord& record, size_t first_new_entry);
  SandboxRecord apply_snapshot_retention(SandboxRecord record, Driver& driver);

  const Ledger& m_ledger;
  const Clock& m_clock;
  EventHook& m_events;
  std::string m_actor;
  Progress* m_progress = nullptr;
};

} // namespace sandboxer
