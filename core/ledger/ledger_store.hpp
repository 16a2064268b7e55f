#pragma once

#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <sandboxer/duration.hpp>

#include "core/errors.hpp"
#include "core/ledger/record.hpp"

// The ledger's storage, behind one small interface: the local files (core/ledger/local_store.cpp,
// docs/ledger-format.md) are the embedded default, and a shared database for a fleet of machines
// implements the same calls. Callers use sandboxer::Ledger (ledger.hpp), which wraps a store.
namespace sandboxer {

// The live part of the ledger: the resident records (is_resident) and the document's own fields.
struct LedgerData {
  static constexpr int k_schema_version = 4;
  std::string ledger_id; // stable random id, written on the ownership label sandboxer.ledger
  // The sequence number of the last event given out: events are numbered in commit order.
  std::uint64_t event_seq = 0;
  std::vector<SandboxRecord> sandboxes;
  // How many closed records the history holds, by state ("destroyed", "failed"): kept by every
  // commit and prune, so that counting them never reads the history.
  std::map<std::string, std::uint64_t> closed_counts;
  // Records closed up to this time may have been pruned (`ledger prune`); the history of records
  // closed after it is whole. None: nothing was ever pruned.
  std::optional<TimePoint> pruned_before;

  // Among these records: by id; else by name, the live record of that name or the newest one
  // that bore it. nullptr when absent.
  SandboxRecord* find(const std::string& id_or_name);
  const SandboxRecord* find(const std::string& id_or_name) const;
};

// `summary` leaves each record's history, spec, info, env and secret_refs empty: all that `list`
// and a reap plan look at, several times faster. Transactions always read whole.
enum class ReadScope { whole, summary };

// Which records a scan visits: the resident ones, the closed history, or both (resident first).
enum class Records { resident, closed, all };

// One problem `verify` found: which sandbox (may be empty), which history entry (or -1), where
// (a file and byte offset, or a table row), and what.
struct VerifyProblem {
  std::string sandbox;
  long index = -1;
  std::string where;
  std::string what;
};
struct VerifyReport {
  std::size_t records = 0; // distinct records: a record closed again is journaled twice
  std::size_t entries = 0; // history entries of each record's newest copy
  std::vector<VerifyProblem> problems;
  struct Copy {
    std::size_t entries = 0;
    std::string head;
  };
  // The copy of each record seen last: a later one must continue its chain.
  std::unordered_map<std::string, Copy> copies;
};

// The head of the store's chain of closed records (`sandboxer ledger head`, docs/evidence.md):
// after `lines` closings, the chain's hash is `hash`. Kept elsewhere, it pins the closed history
// up to that point: `ledger verify --head` checks the chain still passes through it.
struct ChainHead {
  std::uint64_t lines = 0;
  std::string hash;
  std::string text() const { return std::to_string(lines) + ":" + hash; } // "N:sha256:<hex>"
};
// Parses "N:sha256:<64 hex>"; nothing when it is not one.
std::optional<ChainHead> parse_chain_head(std::string_view text);

struct LedgerHead {
  std::string ledger_id;
  ChainHead head;
  std::uint64_t retained_from = 0; // closings before this one were pruned: not checkable
};

// What `prune` removed.
struct PruneReport {
  std::vector<SandboxRecord> records; // summaries of the records dropped
  std::size_t units = 0;              // segments (files) or rows removed
};

// Adds a problem to `report` when the record's hash chain does not hold; `where` names its place.
void check_chain(VerifyReport& report, const SandboxRecord& record, const std::string& where);

// The records among `records` that are unclaimed members of pool `key` (pooled, or still
// creating), oldest first; ties keep their order in `records`. Transaction::pool_members' choice.
std::vector<SandboxRecord*> pool_members_among(std::vector<SandboxRecord>& records,
                                               const std::string& key);

// An event kept by the store itself, committed with the change it describes: a shared ledger's
// outbox (docs/fleet.md), which any machine delivers from. `text` is the outbox's JSON of it
// (its sequence, sinks and CloudEvent, docs/events.md).
struct KeptEvent {
  std::uint64_t sequence = 0;
  std::string event_id;
  std::string sandbox_id;
  std::string type;
  std::string text;
};

// The outbox a shared store keeps; the local files leave it to core/events (under the state dir).
class KeptEvents {
public:
  virtual ~KeptEvents() = default;
  // Every event not yet removed, in sequence order.
  virtual std::vector<KeptEvent> pending() const = 0;
  // Drops events every sink of which has them.
  virtual void remove(const std::vector<std::uint64_t>& sequences) const = 0;
  // The last sequence delivered to sink `key` (0: none).
  virtual std::uint64_t cursor(const std::string& key) const = 0;
  // One deliverer per sink in the whole fleet: takes sink `key` for this process until `lease`
  // from now unless another's lease stands (one that died loses it when its lease ends); taking
  // it again renews the lease.
  virtual bool take_sink(const std::string& key, Seconds lease) const = 0;
  // The holder moves the cursor to `sequence` and renews its lease for the next send, in one
  // step; false (nothing moved) when the turn is no longer this process's.
  virtual bool advance(const std::string& key, std::uint64_t sequence, Seconds lease) const = 0;
  virtual void release_sink(const std::string& key) const = 0;
};

class LedgerStore {
public:
  virtual ~LedgerStore() = default;

  // Where the ledger is, for messages: a path, or a URL without its password.
  virtual std::string location() const = 0;
  // Whether several machines share it (then records say which host each lives on).
  virtual bool shared() const { return false; }
  // The local directory for what stays on this machine: the outbox, drivers' data, locks.
  virtual const std::filesystem::path& state_dir() const = 0;

  // The live part. Throws LedgerError on corruption (naming where), never writing over it.
  virtual LedgerData read(ReadScope scope) const = 0;
  // Each record once, its newest copy, handed to `visit`, which may move from it and returns
  // false to stop. Memory stays flat however long the history is.
  virtual void scan(Records which, ReadScope scope,
                    const std::function<bool(SandboxRecord&)>& visit) const = 0;
  // As scan(all, whole), but only the records that may have lived in [from, to) (may_overlap),
  // reading what the window needs: records closed long before `from` are not read, so the cost
  // grows with the window, not with the whole history (`sandboxer usage`, docs/usage.md).
  // Returns LedgerData::pruned_before, as the scan found it.
  virtual std::optional<TimePoint>
  scan_window(TimePoint from, TimePoint to,
              const std::function<bool(SandboxRecord&)>& visit) const = 0;
  // By id, else by name (the live record of that name, else the newest that bore it), among all
  // records, live and closed.
  virtual std::optional<SandboxRecord> find(const std::string& id_or_name) const = 0;

  // A read-modify-write under the store's exclusive lock: the local flock, or the database's
  // transaction-scoped writer lock. Lookups read only what they need; data() reads the whole live
  // part (tests and rare paths).
  class Transaction {
  public:
    virtual ~Transaction() = default;
    virtual LedgerData& data() = 0;
    // A record by id or name as LedgerData::find, also among closed records: a closed one is
    // brought in (to be reopened, or changed and closed again). nullptr when absent.
    virtual SandboxRecord* find(const std::string& id_or_name) = 0;
    // The live record created with idempotency key `key`, or bearing `name`; nullptr when none.
    virtual SandboxRecord* find_live_by_key(const std::string& key) = 0;
    virtual SandboxRecord* find_live_by_name(const std::string& name) = 0;
    // "snp-..." or "<sandbox id or name>:<snapshot name>": the record holding it and the
    // snapshot, or nullptrs.
    virtual std::pair<SandboxRecord*, const SnapshotRecord*>
    find_snapshot(const std::string& ref) = 0;
    // Adds a new record; the reference stays valid until the transaction ends.
    virtual SandboxRecord& insert(SandboxRecord record) = 0;
    // The unclaimed members of pool `key` (pooled, or still creating), oldest first
    // (docs/pools.md). The pointers stay valid until the next lookup or insert. By default from
    // the whole live part; a store with an index reads only the pool's records, and selects among
    // what the transaction holds with pool_members_among, so that the answer is the same.
    virtual std::vector<SandboxRecord*> pool_members(const std::string& key);
    // The ledger's id (minted by the first commit of a new ledger) and the next event number.
    virtual const std::string& ledger_id() = 0;
    virtual std::uint64_t next_event_seq() = 0;
    // `ledger import` into an empty ledger: takes the source's id (on the backends' ownership
    // labels) and event numbering, so that nothing it made looks orphaned or renumbered.
    virtual void adopt(const std::string& ledger_id, std::uint64_t event_seq) = 0;
    // Whether a history entry with this event id was committed, in any record.
    virtual bool event_committed(const std::string& event_id) = 0;
    // Claims a due record for `holder` until `lease` from now, unless a live claim of another
    // holder stands. A store whose writers are all on one machine (the local files, under the
    // reap lock) always grants it.
    virtual bool claim(const std::string& id, const std::string& holder, Seconds lease) {
      (void)id, (void)holder, (void)lease;
      return true;
    }
    // Keeps `event` in the store's own outbox, committed with this transaction; false when the
    // store has none (kept_events() is null), and the caller keeps it.
    virtual bool keep_event(KeptEvent event) {
      (void)event;
      return false;
    }
    // Seals the new history entries into their chains and writes atomically: records no longer
    // resident move to the closed history. The lock is held until the transaction is destroyed.
    virtual void commit() = 0;
  };
  virtual std::unique_ptr<Transaction> begin() const = 0;

  // Drops closed records whose last entry is older than `cutoff`, in whole units (segments,
  // rows); with `dry_run`, only reports what would go.
  virtual PruneReport prune(TimePoint cutoff, bool dry_run) const = 0;
  // Checks every record's hash chain, the chain of closed records, and the store's own structure;
  // `kept` (an earlier head kept elsewhere) must be on that chain.
  virtual VerifyReport verify(const std::optional<ChainHead>& kept = std::nullopt) const = 0;
  // Whether there is a ledger here at all (a first change makes one); reads nothing else.
  virtual bool exists() const = 0;
  // The head of the chain of closed records now. Throws when there is no ledger yet.
  virtual LedgerHead head() const = 0;
  // Brings the store to the current schema now (otherwise the first write does). Returns a
  // sentence saying what was done.
  virtual std::string migrate() const = 0;
  // The store's own events outbox, or null: the events module keeps files in state_dir().
  virtual const KeptEvents* kept_events() const { return nullptr; }
  // Without a transaction (nor the writers' turn): why another process has record `id` now (a
  // live claim of a holder other than `holder`, or it was closed), or nothing. A hint that spares
  // a reaper a transaction for a sandbox another one has; the claim in a transaction decides.
  virtual std::optional<std::string> taken_elsewhere(const std::string& id,
                                                     const std::string& holder) const {
    (void)id;
    (void)holder;
    return std::nullopt;
  }
  // One line for `status`: the kind of store, its location and size.
  virtual std::string describe() const = 0;
};

} // namespace sandboxer
