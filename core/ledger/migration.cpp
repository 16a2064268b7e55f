// Older schemas -> the current one on disk (docs/ledger-format.md, "Migration"), under the
// ledger lock.
//
// Schema 1 -> current:
//
//   1. remove journal.migrating/ and journal/: with ledger.json still at schema 1, neither is
//      committed (both can only be what an interrupted migration left);
//   2. read ledger.json once, sealing every history into its hash chain: resident records are
//      kept, closed ones go to one bucket file per UTC day of closing, under journal.migrating/;
//   3. turn the buckets, in day order, into journal segments; remove the buckets;
//   4. keep the schema-1 file as ledger.v1.json (a hard link);
//   5. rename journal.migrating/ to journal/, then commit the schema-2 ledger.json as any commit.
//
// A crash before the last rename leaves ledger.json at schema 1, readable, and the next write
// starts over; after it, the migration is done.
//
// Schema 2 -> 3 changes no record and no journal segment (schema 3 only adds states, event kinds
// and fields that schema-2 records never have; segments keep the version they were begun at and
// stay readable, and the next closing begins a new segment):
//
//   1. keep the schema-2 file as ledger.v2.json (a hard link, replaced atomically);
//   2. commit the same header and records as schema 3, as any commit.
//
// A crash before the commit's rename leaves ledger.json at schema 2 and the next write starts
// over; after it, the migration is done. Nothing under journal/ is touched.
#include <fcntl.h>
#include <fmt/format.h>
#include <map>
#include <memory>
#include <set>
#include <sys/stat.h>
#include <unistd.h>

#include <sandboxer/error.hpp>

#include "core/errors.hpp"
#include "core/ledger/chain.hpp"
#include "core/ledger/file_io.hpp"
#include "core/ledger/local_store.hpp"
#include "sdk/file_descriptor.hpp"

namespace sandboxer {
namespace {

namespace fs = std::filesystem;
using ledger_files::write_failed;

// Bucket files are opened on demand; a ledger spanning more days than this reopens them.
constexpr size_t k_open_buckets = 128;
constexpr size_t k_lines_per_append = 2000;

void remove_tree(const fs::path& dir) {
  std::error_code ec;
  fs::remove_all(dir, ec);
  if (ec) {
    throw LedgerError(
        fmt::format("cannot migrate the ledger: cannot remove {}: {}", dir.string(), ec.message()));
  }
}

class Buckets {
public:
  explicit Buckets(fs::path dir) : m_dir(std::move(dir)) {}

  void add(const std::string& day, const std::string& line) {
    auto it = m_open.find(day);
    if (it == m_open.end()) {
      if (m_open.size() >= k_open_buckets) {
        m_open.clear();
      }
      const auto path = path_of(day);
      int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);
      if (fd < 0) {
        write_failed("create", path, path);
      }
      it = m_open.emplace(day, std::make_unique<FileDescriptor>(fd)).first;
      m_days.insert(day);
    }
    ledger_files::write_all(it->second->get(), line, path_of(day), path_of(day));
  }

  void close() { m_open.clear(); }
  const std::set<std::string>& days() const { return m_days; }
  fs::path path_of(const std::string& day) const { return m_dir / ("day-" + day + ".tmp"); }

private:
  fs::path m_dir;
  std::map<std::string, std::unique_ptr<FileDescriptor>> m_open;
  std::set<std::string> m_days;
};

// Links ledger.json as ledger.vN.json (replacing what an interrupted migration left there), and
// returns that name.
fs::path keep_old_file(const LocalStore& store, int version) {
  const fs::path file = store.file();
  const fs::path kept = store.state_dir() / fmt::format("ledger.v{}.json", version);
  const fs::path kept_temp = store.state_dir() / fmt::format("ledger.v{}.json.tmp", version);
  ::unlink(kept_temp.c_str());
  if (::link(file.c_str(), kept_temp.c_str()) != 0 ||
      ::rename(kept_temp.c_str(), kept.c_str()) != 0) {
    write_failed("link", kept, file);
  }
  ledger_files::fsync_directory(store.state_dir(), kept);
  return kept;
}

} // namespace

std::string migrate_from_v1(const LocalStore& store) {
  const fs::path dir = store.state_dir();
  const fs::path file = store.file();
  const fs::path staging = dir / "journal.migrating";
  const fs::path journal_dir = store.journal().dir();
  remove_tree(staging);
  remove_tree(journal_dir);
  fs::create_directory(staging);
  ::chmod(staging.c_str(), 0700);

  // 2. One pass over the old file.
  ledger_format::Header header;
  Buckets buckets(staging);
  std::vector<SandboxRecord> resident;
  std::map<std::string, std::uint64_t> closed_counts;
  size_t closed = 0;
  {
    ledger_files::FileText text;
    text.load(file);
    header = ledger_format::parse_document(
        text.view(), file, ReadScope::whole, [&](SandboxRecord& record) {
          chain::seal(record);
          if (is_resident(record)) {
            resident.push_back(std::move(record));
            return;
          }
          const TimePoint at =
              record.history.empty() ? record.created_at : record.history.back().time;
          buckets.add(format_time(at).substr(0, 10), ledger_format::journal_line(record));
          ++closed_counts[to_string(record.state)];
          ++closed;
        });
  }
  buckets.close();
  if (header.ledger_id.empty()) {
    header.ledger_id = new_ledger_id();
  }

  // 3. Segments, day by day.
  ledger_journal::Journal staged(staging);
  ledger_format::JournalTail tail;
  for (const auto& day : buckets.days()) {
    ledger_files::FileText text;
    text.load(buckets.path_of(day), "migration bucket");
    std::string_view rest = text.view();
    const TimePoint noon = *parse_time(day + "T12:00:00Z");
    while (!rest.empty()) {
      std::vector<std::string> lines;
      while (!rest.empty() && lines.size() < k_lines_per_append) {
        const size_t end = rest.find('\n');
        lines.emplace_back(rest.substr(0, end + 1));
        rest.remove_prefix(end + 1);
      }
      tail = staged.append(tail, lines, header.ledger_id, noon);
    }
    ::unlink(buckets.path_of(day).c_str());
  }
  ledger_files::fsync_directory(staging, staging);

  // 4. The old file stays, by its own name.
  const fs::path kept = keep_old_file(store, 1);

  // 5. The switch.
  if (::rename(staging.c_str(), journal_dir.c_str()) != 0) {
    write_failed("rename", staging, file);
  }
  header.schema_version = LedgerData::k_schema_version;
  header.journal = tail;
  header.closed_counts = closed_counts;
  store.write_document(header, resident);
  return fmt::format("ledger {} migrated from schema_version 1 to {}: {} resident record(s), {} "
                     "closed record(s) moved to {} ({} segment(s)); every history sealed into its "
                     "hash chain; the old file is kept as {}",
                     file.string(), LedgerData::k_schema_version, resident.size(), closed,
                     journal_dir.string(), tail.offset == 0 ? 0 : tail.segment, kept.string());
}

// From 2 or 3: each added states, kinds and fields a newer reader knows and an older one takes
// for corruption, and changed no record, so only the header's version moves.
std::string migrate_header_only(const LocalStore& store, int from) {
  LocalStore::Live live = store.load(ReadScope::whole, true);
  if (live.header.schema_version != from) {
    throw LedgerError(fmt::format("cannot migrate ledger {} from schema_version {}: it is at {}",
                                  store.file().string(), from, live.header.schema_version));
  }
  const fs::path kept = keep_old_file(store, from);
  std::uint64_t segments = 0;
  const auto& tail = live.header.journal;
  if (!(tail.first == tail.segment && tail.offset == 0)) {
    segments = tail.segment - tail.first + 1 - (tail.offset == 0 ? 1 : 0);
  }
  live.header.schema_version = LedgerData::k_schema_version;
  store.write_document(live.header, live.records);
  return fmt::format("ledger {} migrated from schema_version {} to {}: {} resident record(s) and "
                     "the journal ({} segment(s) in {}) kept as they were; the old file is kept "
                     "as {}",
                     store.file().string(), from, LedgerData::k_schema_version, live.records.size(),
                     segments, store.journal().dir().string(), kept.string());
}

std::string migrate_to_current(const LocalStore& store, int version) {
  switch (version) {
  case 1:
    return migrate_from_v1(store);
  case 2:
  case 3:
    return migrate_header_only(store, version);
  default:
    throw LedgerError(fmt::format("ledger {} has schema_version {}: no migration from it to {}",
                                  store.file().string(), version, LedgerData::k_schema_version));
  }
}

} // namespace sandboxer
