#pragma once

#include <atomic>
#include <filesystem>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include <sandboxer/duration.hpp>

#include "core/errors.hpp"
#include "core/ledger/ledger_store.hpp"
#include "pg/connection.hpp"
#include "pg/pg_outbox.hpp"

// The fleet's ledger: one PostgreSQL database shared by every machine (docs/fleet.md). Same calls,
// same records and hash chains as the local files, and the events outbox (pg_outbox.hpp); what
// stays on the machine (drivers' data, locks) stays under the local state directory.
//
// Every write is one short transaction under a transaction-scoped advisory lock: writers of the
// whole fleet take turns for a few milliseconds, never across a backend call, so each sees the
// ledger as the local store's flock would show it. Reapers claim a due record by a row update
// that skips rows other transactions hold (FOR UPDATE SKIP LOCKED) and carries a lease, so that
// the claim of a reaper that died is taken over once the lease has passed.
namespace sandboxer::ledger::pg {

struct PgStoreOptions {
  std::string url;                     // libpq URI, without a password
  std::optional<std::string> password; // from a secret reference
  std::filesystem::path state_dir;     // this machine's outbox, drivers' data, locks
  Seconds lock_timeout{30};            // how long a writer waits for its turn
  std::string host;                    // this machine's name (SANDBOXER_HOST or hostname)
  // How long the machine's connection keeper outlives its last command (keeper.hpp); zero: each
  // command connects itself.
  std::chrono::seconds keeper_idle{0};
};

class PgStore : public LedgerStore {
public:
  // Starts connecting at once: the handshake overlaps whatever the command does before its first
  // ledger call.
  explicit PgStore(PgStoreOptions options);
  ~PgStore() override;

  std::string location() const override;
  bool shared() const override { return true; }
  const std::filesystem::path& state_dir() const override { return m_options.state_dir; }

  LedgerData read(ReadScope scope) const override;
  void scan(Records which, ReadScope scope,
            const std::function<bool(SandboxRecord&)>& visit) const override;
  std::optional<TimePoint>
  scan_window(TimePoint from, TimePoint to,
              const std::function<bool(SandboxRecord&)>& visit) const override;
  std::optional<SandboxRecord> find(const std::string& id_or_name) const override;
  std::unique_ptr<Transaction> begin() const override;
  PruneReport prune(TimePoint cutoff, bool dry_run) const override;
  VerifyReport verify(const std::optional<ChainHead>& kept) const override;
  LedgerHead head() const override;
  bool exists() const override;
  std::string migrate() const override;
  std::string describe() const override;
  const KeptEvents* kept_events() const override { return &m_outbox; }
  std::optional<std::string> taken_elsewhere(const std::string& id,
                                             const std::string& holder) const override;

  // The connection, with the schema checked (created on first use) once per process.
  Connection& ready() const;
  const PgStoreOptions& options() const { return m_options; }
  // "HOST pid PID": this process in the fleet, for who migrated, who holds a turn, and
  // pg_stat_activity.
  std::string process_name() const;
  // Drops a broken connection; the next ready() reconnects.
  void reset() const;
  // `sandboxer ledger keep`: serves this machine's commands connections to this ledger until
  // none has used them for `idle` (zero: until a signal).
  void keep_connections(std::chrono::seconds idle) const;

private:
  Connection& connection() const; // without the schema check
  ConnectOptions connect_options() const;
  PgStoreOptions m_options;
  PgOutbox m_outbox{*this};
  // The first connection, made on a helper thread from construction on, for the constructing
  // thread: connecting (loading libpq, TCP, TLS, authentication, a backend's start) takes longer
  // than many commands' own work, which it overlaps. Abandoned when the store goes unused.
  struct Warm {
    std::unique_ptr<Connection> connection;
    int schema_version = 0; // read there too: one round trip less on the way
  };
  mutable std::future<Warm> m_warm;
  std::thread::id m_warm_for;
  mutable std::optional<int> m_warm_schema_version;
  std::atomic<bool> m_abandon = false;
  // One connection per thread (reap destroys on several): a libpq connection serves one caller.
  mutable std::mutex m_mutex;
  mutable std::map<std::thread::id, std::unique_ptr<Connection>> m_connections;
  mutable std::atomic<bool> m_schema_checked = false;
};

// The text of a record's row (its JSON without history and snapshots) and back: shared by the
// store and `ledger export`/`import`.
std::string row_json(const SandboxRecord& record);
// Throws LedgerError naming the row.
SandboxRecord record_from_row(const std::string& where, const std::string& row,
                              const std::optional<std::string>& history,
                              const std::optional<std::string>& snapshots, ReadScope scope);

} // namespace sandboxer::ledger::pg
