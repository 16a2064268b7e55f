#pragma once
// The embedded ledger: files under a state directory (docs/ledger-format.md).
//
//   ledger.json       the live document: resident records and the journal's committed position
//   ledger.json.bak   the previous live document
//   ledger.v1.json    the schema-1 file a migration started from, kept
//   ledger.v2.json    likewise, the schema-2 file
//   ledger.lock       the flock every writer holds, with the holder's pid
//   journal/          closed records, append-only segments

#include <filesystem>
#include <memory>

#include <sandboxer/duration.hpp>
#include <sandboxer/lock_file.hpp>

#include "core/ledger/document.hpp"
#include "core/ledger/journal.hpp"
#include "core/ledger/ledger_store.hpp"

namespace sandboxer {

class LocalStore : public LedgerStore {
public:
  LocalStore(std::filesystem::path state_dir, Seconds lock_timeout);

  std::string location() const override { return file().string(); }
  const std::filesystem::path& state_dir() const override { return m_dir; }
  std::filesystem::path file() const { return m_dir / "ledger.json"; }

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

  // For the transaction and the migration (local_store.cpp, migration.cpp).
  struct Live {
    ledger_format::Header header;
    std::vector<SandboxRecord> records; // resident ones only, unless `all`
  };
  // A missing file reads as an empty ledger of the current schema.
  Live load(ReadScope scope, bool all = false) const;
  // Replaces ledger.json atomically (temp file, fsync, backup link, rename, directory fsync).
  void write_document(const ledger_format::Header& header,
                      const std::vector<SandboxRecord>& records) const;
  const ledger_journal::Journal& journal() const { return m_journal; }
  // The newest closed copy of a record, by id or name, from the journal.
  std::optional<SandboxRecord> find_closed(const ledger_format::JournalTail& tail,
                                           const std::string& ledger_id,
                                           const std::string& id_or_name) const;

private:
  // scan(), reading the journal from the segment `first` picks (given the live document's
  // header) on. Returns that header; nothing when there is no ledger.
  std::optional<ledger_format::Header>
  scan_from(Records which, ReadScope scope,
            const std::function<std::uint64_t(const ledger_format::Header&)>& first,
            const std::function<bool(SandboxRecord&)>& visit) const;
  LockFile::Guard lock_for_writing() const;
  std::filesystem::path m_dir;
  LockFile m_lock;
  ledger_journal::Journal m_journal;
};

// Migrations on disk, under the lock (migration.cpp). Each returns what it did.
// Schema 1 -> current: seals every history and moves closed records to the journal.
std::string migrate_from_v1(const LocalStore& store);
// Schema 2 or 3 -> current: the document's version only; the journal's segments are kept byte for
// byte.
std::string migrate_header_only(const LocalStore& store, int from);
// The one for `version`; throws LedgerError for a version it cannot start from.
std::string migrate_to_current(const LocalStore& store, int version);

} // namespace sandboxer
