#pragma once

#include <filesystem>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include <sandboxer/clock.hpp>
#include <sandboxer/duration.hpp>
#include <sandboxer/lock_file.hpp>

namespace sandboxer {

enum class State {
  creating,
  running,
  snapshotting,
  destroying,
  destroyed,
  failed,
  expired,
  orphaned
};
const char* to_string(State state);
std::optional<State> state_from_string(std::string_view text);
// creating, snapshotting, destroying and expired: an operation is (or was, if its process died)
// talking to the backend.
bool is_transitional(State state);
// Everything but destroyed and failed: the backend may hold a resource.
bool is_live(State state);

// One transition, kept forever as evidence (until the record is pruned).
struct HistoryEntry {
  TimePoint time;
  std::optional<State> from; // none for the first entry
  State to = State::creating;
  std::string actor;  // "alice@host pid 123", "ci:GITHUB_RUN_ID=42", "reaper"
  std::string reason; // "create", "ttl expired", the backend's error, ...
  nlohmann::json details = nlohmann::json::object();
  // What the lifecycle event of this transition is ("ready", "exec.started": docs/events.md) and
  // its CloudEvents id, set when the entry is committed. Empty in entries older than events.
  std::string event;
  std::string event_id;
};

struct SnapshotRecord {
  std::string id;   // snp-...
  std::string name; // unique within its sandbox
  std::string backend_ref;
  std::optional<std::uint64_t> size_bytes;
  TimePoint created_at;
};

struct Owner {
  std::string user;
  std::string host;
  int pid = 0;
  std::map<std::string, std::string> ci; // CI_JOB_ID, GITHUB_RUN_ID, ... when present
};

struct ProfileRef {
  std::string name;
  std::string path;
  std::string hash;
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
  std::map<std::string, std::string> labels;
  std::map<std::string, std::string> env;
  nlohmann::json secret_refs = nlohmann::json::object(); // {name: {env|file: ...}}: never values
  Owner owner;
  std::vector<SnapshotRecord> snapshots;
  std::vector<HistoryEntry> history;
  std::optional<std::string> idempotency_key;
  std::optional<std::string> restored_from; // snapshot id
  std::optional<std::string> error;         // last failure, for failed / retried states

  // Appends a history entry and sets `state`.
  void transition(State to, TimePoint time, std::string actor, std::string reason,
                  nlohmann::json details = nlohmann::json::object());
};

void to_json(nlohmann::json& j, const SandboxRecord& r);
// Throws LedgerError naming the record's id and the offending field ("owner.pid", ...).
void from_json(const nlohmann::json& j, SandboxRecord& r);

// Appends `r` to `out` as compact JSON, exactly as the ledger file stores it, without building a
// nlohmann::json first: about 10x faster than to_json() + dump(). Use it to print many records
// (`list -o json` over a large ledger).
void write_json(std::string& out, const SandboxRecord& r);

// The whole ledger document.
struct LedgerData {
  static constexpr int k_schema_version = 1;
  std::string ledger_id; // stable random id, written on the ownership label sandboxer.ledger
  // The sequence number of the last event given out: events are numbered in commit order.
  std::uint64_t event_seq = 0;
  std::vector<SandboxRecord> sandboxes;

  // By id; else by name: the live record of that name, or the newest one that bore it. nullptr
  // when absent.
  SandboxRecord* find(const std::string& id_or_name);
  const SandboxRecord* find(const std::string& id_or_name) const;
};

// What Ledger::read() fills in. `summary` leaves each record's history, spec, info, env and
// secret_refs empty (they are stepped over, checking only that brackets pair up and strings end):
// all that `list` and a reap plan look at, several times faster on a large ledger. Transactions
// always read whole, so a summary is never written back.
enum class ReadScope { whole, summary };

// The ledger file and its lock, under a state directory (0700; the file 0600).
//
// Reads take no lock: writes replace the file by rename, so a reader always sees a whole document.
// Every read-modify-write goes through a Transaction, which holds an exclusive flock on
// `ledger.lock` with a bounded wait. commit() writes a temp file, fsyncs it, keeps the current file
// as ledger.json.bak (a hard link), renames the temp file over ledger.json and fsyncs the
// directory: a crash at any instant leaves the old or the new ledger, never a torn one.
class Ledger {
public:
  Ledger(std::filesystem::path state_dir, Seconds lock_timeout);

  const std::filesystem::path& state_dir() const { return m_state_dir; }
  std::filesystem::path file() const { return m_state_dir / "ledger.json"; }

  // Throws LedgerError if the file is corrupt, unreadable or of a newer schema (never overwriting
  // it, and saying how to recover from ledger.json.bak). A missing file reads as empty.
  LedgerData read(ReadScope scope = ReadScope::whole) const;
  // Reads the records one at a time, in file order, handing each to `visit` (which may move from
  // it) and keeping none: memory stays flat however large the ledger is. Same errors as read().
  void scan(ReadScope scope, const std::function<void(SandboxRecord&)>& visit) const;

  class Transaction {
  public:
    LedgerData& data() { return m_data; }
    // Writes the document atomically. The lock is still held afterwards; it is released when the
    // transaction is destroyed.
    void commit();

  private:
    friend class Ledger;
    Transaction(const Ledger& ledger, LockFile::Guard guard, LedgerData data);
    const Ledger* m_ledger;
    LockFile::Guard m_guard;
    LedgerData m_data;
  };

  // Locks (throws LockTimeoutError naming the holder's pid) and reads.
  Transaction begin() const;

  // The ledger id, creating and committing the ledger file when it does not exist yet.
  std::string ensure_id() const;

private:
  void write(const LedgerData& data) const;
  std::filesystem::path m_state_dir;
  LockFile m_lock;
};

// "sbx-" + 12 chars of RFC 4648 base32 (lowercase), from a CSPRNG.
std::string new_sandbox_id();
std::string new_snapshot_id();
// "evt-" + 24 base32 chars.
std::string new_event_id();

} // namespace sandboxer
