#include "core/ledger/local_store.hpp"

#include <cerrno>
#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>
#include <unordered_map>
#include <unordered_set>

#include <sandboxer/error.hpp>

#include "core/errors.hpp"
#include "core/ledger/chain.hpp"
#include "core/ledger/file_io.hpp"
#include "core/ledger/journal_chain.hpp"
#include "sdk/file_descriptor.hpp"
#include "sdk/files.hpp"

namespace sandboxer {
namespace {

namespace fs = std::filesystem;
using ledger_files::errno_text;
using ledger_files::write_failed;
using ledger_format::Header;
using ledger_format::JournalTail;
using ledger_journal::Line;
using ledger_journal::Problem;

constexpr std::string_view k_backup_name = "ledger.json.bak";
// Temporary names carry the pid so that a crashed writer's leftovers are recognisable.
constexpr std::string_view k_temp_prefix = ".ledger.json.tmp.";
constexpr std::string_view k_backup_temp_prefix = "ledger.json.bak.tmp.";
constexpr size_t k_write_chunk = 1 << 20;

// Under the lock no other writer is active, so any temporary file in the directory was left by a
// writer that crashed; removing them keeps the state directory from filling up.
void remove_stale_temporaries(const fs::path& dir) {
  DIR* handle = ::opendir(dir.c_str());
  if (!handle) {
    return;
  }
  while (const dirent* entry = ::readdir(handle)) {
    const std::string_view name = entry->d_name;
    if (name.starts_with(k_temp_prefix) || name.starts_with(k_backup_temp_prefix)) {
      ::unlinkat(::dirfd(handle), entry->d_name, 0);
    }
  }
  ::closedir(handle);
}

// Another user who can write the state directory can swap the ledger, the lock file or the
// outbox's files under root's feet, or plant symlinks there: no write is safe in it. Refused,
// not warned about: cron's output is rarely read.
void refuse_shared_state_dir(const fs::path& dir) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) {
    throw LedgerError(
        fmt::format("cannot inspect state directory {}: {}", dir.string(), errno_text()));
  }
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    throw LedgerError(fmt::format(
        "state directory {} is writable by {} (mode {:04o}): another user could replace the "
        "ledger or plant symlinks in it; run 'chmod go-w {}' or choose a private --state-dir",
        dir.string(), (st.st_mode & S_IWOTH) != 0 ? "others" : "its group", st.st_mode & 07777,
        dir.string()));
  }
}

void warn(const Problem& problem) {
  spdlog::warn("ledger journal {} at byte {}: {}", problem.file.string(), problem.offset,
               problem.what);
}

// Reads a journal line, or reports it as a problem and returns false.
bool parse_line(const ledger_journal::Journal& journal, const Line& line, ReadScope scope,
                SandboxRecord& record, const std::function<void(const Problem&)>& problem) {
  try {
    ledger_format::read_journal_line(line.text, record, scope);
    return true;
  } catch (const ledger_format::ShapeError& e) {
    problem({journal.segment_path(line.segment), line.offset,
             fmt::format("record {}: {}", record.id.empty() ? "without an id" : record.id,
                         e.describe())});
  } catch (const ledger_format::SyntaxError& e) {
    problem(
        {journal.segment_path(line.segment), line.offset + e.offset, "invalid JSON: " + e.message});
  }
  return false;
}

std::string id_in(const Line& line) {
  std::string_view id = ledger_journal::id_of_line(line.text);
  if (!id.empty()) {
    return std::string(id);
  }
  SandboxRecord record;
  try {
    ledger_format::read_journal_line(line.text, record, ReadScope::summary);
  } catch (...) {
  }
  return record.id;
}

// Whether `line` is the record `id_or_name` names (by id, or by name).
bool names_record(const Line& line, const std::string& id_or_name) {
  std::string_view id = ledger_journal::id_of_line(line.text);
  if (id.empty()) {
    SandboxRecord record;
    try {
      ledger_format::read_journal_line(line.text, record, ReadScope::summary);
    } catch (...) {
      return false;
    }
    return record.id == id_or_name || record.name == id_or_name;
  }
  return id == id_or_name || ledger_journal::name_of_line(line.text) == id_or_name;
}

// The time a closed record was closed: its last entry.
TimePoint closed_at(const SandboxRecord& record) {
  return record.history.empty() ? record.created_at : record.history.back().time;
}

// One record less closed in `state`: reopened, closed again in another state, or pruned.
void uncount(std::map<std::string, std::uint64_t>& counts, State state) {
  auto& count = counts[to_string(state)];
  count -= std::min<std::uint64_t>(count, 1);
}

} // namespace

// ---------------------------------------------------------------------------------------------
// Reading

LocalStore::LocalStore(fs::path state_dir, Seconds lock_timeout)
    : m_dir(std::move(state_dir)),
      m_lock(m_dir / "ledger.lock", lock_timeout,
             fmt::format("ledger {}", (m_dir / "ledger.json").string())),
      m_journal(m_dir / "journal") {}

LocalStore::Live LocalStore::load(ReadScope scope, bool all) const {
  Live live;
  const auto path = file();
  ledger_files::FileText text;
  if (!text.load(path)) {
    return live;
  }
  // No record our writer makes is shorter than this, so the vector never grows (and moves every
  // record) while reading; the excess is address space that is never touched.
  constexpr size_t k_shortest_record = 400;
  live.records.reserve(text.view().size() / k_shortest_record + 16);
  live.header = ledger_format::parse_document(text.view(), path, scope, [&](SandboxRecord& r) {
    if (all || is_resident(r)) {
      live.records.push_back(std::move(r));
    }
  });
  return live;
}

LedgerData LocalStore::read(ReadScope scope) const {
  Live live = load(scope);
  LedgerData data;
  data.ledger_id = std::move(live.header.ledger_id);
  data.event_seq = live.header.event_seq;
  data.closed_counts = live.header.closed_counts;
  data.pruned_before = live.header.pruned_before;
  data.sandboxes = std::move(live.records);
  return data;
}

void LocalStore::scan(Records which, ReadScope scope,
                      const std::function<bool(SandboxRecord&)>& visit) const {
  scan_from(
      which, scope, [](const Header& header) { return header.journal.first; }, visit);
}

std::optional<TimePoint>
LocalStore::scan_window(TimePoint from, TimePoint to,
                        const std::function<bool(SandboxRecord&)>& visit) const {
  // Segments are in closing order, one UTC day each (or less): a segment of a day before the
  // day of `from` holds records closed before `from`, which had no time in the window. The
  // newest such segment is read all the same: a commit files all the records it closes under
  // the day of the first one, so another may have closed a little later.
  const std::string from_day = format_time(from).substr(0, 10);
  auto first = [&](const Header& header) {
    for (auto s = header.journal.segment; s > header.journal.first; --s) {
      const std::string day = m_journal.day_of(s, header.ledger_id);
      if (!day.empty() && day < from_day) {
        return s;
      }
    }
    return header.journal.first;
  };
  auto header = scan_from(Records::all, ReadScope::whole, first, [&](SandboxRecord& record) {
    return !may_overlap(record, from, to) || visit(record);
  });
  return header ? header->pruned_before : std::nullopt;
}

std::optional<Header>
LocalStore::scan_from(Records which, ReadScope scope,
                      const std::function<std::uint64_t(const Header&)>& first,
                      const std::function<bool(SandboxRecord&)>& visit) const {
  const auto path = file();
  ledger_files::FileText text;
  if (!text.load(path)) {
    return std::nullopt;
  }
  // The live document first: its resident records, and (schema 1) its closed ones.
  std::unordered_set<std::string> resident;
  bool stopped = false;
  const Header header =
      ledger_format::parse_document(text.view(), path, scope, [&](SandboxRecord& r) {
        const bool is_res = is_resident(r);
        if (is_res && which != Records::resident) {
          resident.insert(r.id);
        }
        const bool wanted = which == Records::all || (which == Records::resident) == is_res;
        if (!stopped && wanted) {
          stopped = !visit(r);
        }
      });
  if (stopped || which == Records::resident || header.schema_version < 2) {
    return header;
  }
  // Each closed record once, its newest readable copy: a record reopened and closed again has
  // two. Such ids are rare, so only their copies are held until the end; the others are visited
  // as they come.
  const std::uint64_t start = first(header);
  std::unordered_map<std::string, unsigned> copies;
  for (auto s = start; s <= header.journal.segment; ++s) {
    m_journal.read_segment(
        s, header.journal, header.ledger_id,
        [&](const Line& line) {
          ++copies[id_in(line)];
          return true;
        },
        [](const Problem&) {});
  }
  std::vector<SandboxRecord> held;
  std::unordered_map<std::string, size_t> held_at;
  for (auto s = start; s <= header.journal.segment && !stopped; ++s) {
    m_journal.read_segment(
        s, header.journal, header.ledger_id,
        [&](const Line& line) {
          const std::string id = id_in(line);
          if (resident.contains(id)) {
            return true;
          }
          SandboxRecord record;
          if (!parse_line(m_journal, line, scope, record, warn)) {
            return true;
          }
          if (copies[id] > 1) {
            auto [at, added] = held_at.emplace(record.id, held.size());
            if (added) {
              held.push_back(std::move(record));
            } else {
              held[at->second] = std::move(record);
            }
            return true;
          }
          stopped = !visit(record);
          return !stopped;
        },
        warn);
  }
  for (auto& record : held) {
    if (stopped || (stopped = !visit(record))) {
      break;
    }
  }
  return header;
}

std::optional<SandboxRecord> LocalStore::find_closed(const JournalTail& tail,
                                                     const std::string& ledger_id,
                                                     const std::string& id_or_name) const {
  // Newest segment first: a name answers with the record that bore it last. Within a segment,
  // the last readable match.
  for (auto s = tail.segment; s >= tail.first && s > 0; --s) {
    std::vector<std::pair<Line, std::string>> matches; // the text outlives the segment's mapping
    m_journal.read_segment(
        s, tail, ledger_id,
        [&](const Line& line) {
          if (names_record(line, id_or_name)) {
            matches.emplace_back(line, std::string(line.text));
          }
          return true;
        },
        warn);
    for (auto it = matches.rbegin(); it != matches.rend(); ++it) {
      it->first.text = it->second;
      SandboxRecord record;
      if (parse_line(m_journal, it->first, ReadScope::whole, record, warn)) {
        return record;
      }
    }
  }
  return std::nullopt;
}

std::optional<SandboxRecord> LocalStore::find(const std::string& id_or_name) const {
  // Streamed, keeping only candidates: a schema-1 file holds its whole history.
  std::optional<SandboxRecord> best;
  bool exact = false;
  Header header;
  {
    const auto path = file();
    ledger_files::FileText text;
    if (!text.load(path)) {
      return std::nullopt;
    }
    // As LedgerData::find: the id, else the live record of that name, else the newest.
    header =
        ledger_format::parse_document(text.view(), path, ReadScope::whole, [&](SandboxRecord& r) {
          if (exact) {
            return;
          }
          if (r.id == id_or_name) {
            best = std::move(r);
            exact = true;
          } else if (r.name == id_or_name &&
                     (!best || (is_live(r.state) && !is_live(best->state)) ||
                      (is_live(r.state) == is_live(best->state) &&
                       r.created_at >= best->created_at))) {
            best = std::move(r);
          }
        });
  }
  if (exact || (best && is_live(best->state))) {
    return best;
  }
  if (header.schema_version >= 2) {
    auto closed = find_closed(header.journal, header.ledger_id, id_or_name);
    if (closed && (!best || closed->created_at >= best->created_at)) {
      return closed;
    }
  }
  return best;
}

// ---------------------------------------------------------------------------------------------
// Writing

void LocalStore::write_document(const Header& header,
                                const std::vector<SandboxRecord>& records) const {
  const auto target = file();
  const auto pid = std::to_string(::getpid());
  const auto temp = m_dir / (std::string(k_temp_prefix) + pid);
  const auto backup = m_dir / k_backup_name;
  const auto backup_temp = m_dir / (std::string(k_backup_temp_prefix) + pid);

  remove_stale_temporaries(m_dir);
  try {
    FileDescriptor fd(
        ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600));
    if (fd.get() < 0) {
      write_failed("create", temp, target);
    }
    // Exactly 0600 whatever the umask: the ledger names users, hosts and CI jobs.
    if (::fchmod(fd.get(), 0600) != 0) {
      write_failed("chmod", temp, target);
    }
    std::string buffer;
    ledger_format::serialize(header, records, k_write_chunk, buffer, [&](const std::string& t) {
      ledger_files::write_all(fd.get(), t, temp, target);
    });
    if (::fsync(fd.get()) != 0) {
      write_failed("fsync", temp, target);
    }
    if (::close(fd.release()) != 0) {
      write_failed("close", temp, target);
    }
    // The current file becomes the backup through a hard link and a rename, so that
    // ledger.json.bak is, at every instant, a whole previous ledger.
    if (::link(target.c_str(), backup_temp.c_str()) == 0) {
      if (::rename(backup_temp.c_str(), backup.c_str()) != 0) {
        write_failed("rename", backup_temp, target);
      }
      // rename(2) does nothing when both names are links to the same file, which is the case
      // when a writer was killed between this rename and the next one: drop the extra link.
      ::unlink(backup_temp.c_str());
    } else if (errno != ENOENT) {
      write_failed("link", backup_temp, target);
    }
    if (::rename(temp.c_str(), target.c_str()) != 0) {
      write_failed("rename", temp, target);
    }
  } catch (...) {
    ::unlink(temp.c_str());
    ::unlink(backup_temp.c_str());
    throw;
  }
  ledger_files::fsync_directory(m_dir, target);
}

LockFile::Guard LocalStore::lock_for_writing() const {
  std::error_code ec;
  // Only a directory created here is narrowed to 0700: an existing one was chosen by the user.
  if (fs::create_directories(m_dir, ec)) {
    if (::chmod(m_dir.c_str(), 0700) != 0) {
      throw LedgerError(fmt::format("cannot set the mode of state directory {}: {}", m_dir.string(),
                                    errno_text()));
    }
  } else if (ec) {
    throw LedgerError(fmt::format("cannot create state directory {}: {}; choose another with "
                                  "--state-dir or $SANDBOXER_STATE_DIR",
                                  m_dir.string(), ec.message()));
  }
  refuse_shared_state_dir(m_dir);
  // The journal too: its segments are truncated and appended to by this writer.
  if (fs::symlink_status(m_journal.dir(), ec).type() != fs::file_type::not_found) {
    check_own_directory(m_journal.dir(), "journal directory");
  }
  return m_lock.acquire();
}

namespace {

// What a transaction knew of a record that was already closed, to tell whether it changed.
struct ClosedCopy {
  size_t history = 0;
  size_t snapshots = 0;
  State state = State::destroyed;
};
ClosedCopy copy_of(const SandboxRecord& r) {
  return {r.history.size(), r.snapshots.size(), r.state};
}
bool same(const ClosedCopy& a, const ClosedCopy& b) {
  return a.history == b.history && a.snapshots == b.snapshots && a.state == b.state;
}

class LocalTransaction : public LedgerStore::Transaction {
public:
  LocalTransaction(const LocalStore& store, LockFile::Guard guard, LocalStore::Live live)
      : m_store(store), m_guard(std::move(guard)), m_header(std::move(live.header)) {
    m_data.ledger_id = m_header.ledger_id;
    m_data.event_seq = m_header.event_seq;
    m_data.closed_counts = m_header.closed_counts;
    m_data.sandboxes = std::move(live.records);
    // Records brought in by find() are appended: room for them keeps references to the others
    // valid.
    m_data.sandboxes.reserve(m_data.sandboxes.size() + 64);
  }

  LedgerData& data() override { return m_data; }

  SandboxRecord* find(const std::string& id_or_name) override {
    SandboxRecord* found = m_data.find(id_or_name);
    if (found && (found->id == id_or_name || is_live(found->state))) {
      return found;
    }
    auto closed = m_store.find_closed(m_header.journal, m_header.ledger_id, id_or_name);
    if (!closed || (found && found->created_at > closed->created_at)) {
      return found;
    }
    if (SandboxRecord* same_id = m_data.find(closed->id); same_id && same_id->id == closed->id) {
      return same_id;
    }
    m_known_closed[closed->id] = copy_of(*closed);
    m_data.sandboxes.push_back(std::move(*closed));
    return &m_data.sandboxes.back();
  }

  SandboxRecord* find_live_by_key(const std::string& key) override {
    for (auto& record : m_data.sandboxes) {
      if (record.idempotency_key == key && is_live(record.state)) {
        return &record;
      }
    }
    return nullptr;
  }

  SandboxRecord* find_live_by_name(const std::string& name) override {
    for (auto& record : m_data.sandboxes) {
      if (record.name == name && is_live(record.state)) {
        return &record;
      }
    }
    return nullptr;
  }

  std::pair<SandboxRecord*, const SnapshotRecord*> find_snapshot(const std::string& ref) override {
    // Records holding snapshots stay resident: the live part has them all.
    for (auto& record : m_data.sandboxes) {
      if (const SnapshotRecord* snap = snapshot_of(record, ref)) {
        return {&record, snap};
      }
    }
    return {nullptr, nullptr};
  }

  SandboxRecord& insert(SandboxRecord record) override {
    m_data.sandboxes.push_back(std::move(record));
    return m_data.sandboxes.back();
  }

  const std::string& ledger_id() override {
    if (m_data.ledger_id.empty()) {
      m_data.ledger_id = new_ledger_id();
    }
    return m_data.ledger_id;
  }

  std::uint64_t next_event_seq() override { return ++m_data.event_seq; }

  void adopt(const std::string& ledger_id, std::uint64_t event_seq) override {
    m_data.ledger_id = ledger_id;
    m_data.event_seq = std::max(m_data.event_seq, event_seq);
  }

  bool event_committed(const std::string& event_id) override {
    for (const auto& record : m_data.sandboxes) {
      for (const auto& entry : record.history) {
        if (entry.event_id == event_id) {
          return true;
        }
      }
    }
    return false;
  }

  void commit() override {
    // The id is minted on the first commit, so that merely reading never creates a ledger.
    if (m_data.ledger_id.empty()) {
      m_data.ledger_id = new_ledger_id();
    }
    m_header.ledger_id = m_data.ledger_id;
    m_header.event_seq = m_data.event_seq;
    m_header.schema_version = LedgerData::k_schema_version;
    std::vector<std::string> closing;
    std::optional<TimePoint> closing_time;
    std::vector<SandboxRecord> resident;
    resident.reserve(m_data.sandboxes.size());
    for (auto& record : m_data.sandboxes) {
      chain::seal(record);
      auto known = m_known_closed.find(record.id);
      if (is_resident(record)) {
        if (known != m_known_closed.end()) {
          // Reopened (a failed record being destroyed): counted again when it closes again.
          uncount(m_header.closed_counts, known->second.state);
          m_known_closed.erase(known);
        }
        resident.push_back(record);
        continue;
      }
      if (known != m_known_closed.end() && same(known->second, copy_of(record))) {
        continue; // already in the journal as it is
      }
      closing.push_back(ledger_format::journal_line(record));
      closing_time = closing_time.value_or(closed_at(record));
      if (known != m_known_closed.end()) {
        // Closed again in another state: one record, one count.
        uncount(m_header.closed_counts, known->second.state);
      }
      ++m_header.closed_counts[to_string(record.state)];
    }
    JournalTail tail = m_header.journal;
    if (!closing.empty()) {
      tail = m_store.journal().append(tail, closing, m_header.ledger_id, *closing_time);
    }
    Header header = m_header;
    header.journal = tail;
    m_store.write_document(header, resident);
    m_header.journal = tail;
    m_data.closed_counts = m_header.closed_counts;
    for (const auto& record : m_data.sandboxes) {
      if (!is_resident(record)) {
        m_known_closed[record.id] = copy_of(record);
      }
    }
  }

private:
  const LocalStore& m_store;
  LockFile::Guard m_guard;
  Header m_header;
  LedgerData m_data;
  std::unordered_map<std::string, ClosedCopy> m_known_closed;
};

} // namespace

std::unique_ptr<LedgerStore::Transaction> LocalStore::begin() const {
  auto guard = lock_for_writing();
  // Reading under the lock also means that a corrupt ledger throws here, before anyone can
  // commit over it.
  Live live = load(ReadScope::whole);
  if (live.header.schema_version < LedgerData::k_schema_version &&
      std::filesystem::exists(file())) {
    spdlog::info("{}", migrate_to_current(*this, live.header.schema_version));
    live = load(ReadScope::whole);
  }
  return std::make_unique<LocalTransaction>(*this, std::move(guard), std::move(live));
}

std::string LocalStore::migrate() const {
  auto guard = lock_for_writing();
  Live live = load(ReadScope::summary);
  if (!std::filesystem::exists(file())) {
    return fmt::format("no ledger at {} yet: nothing to migrate", file().string());
  }
  if (live.header.schema_version >= LedgerData::k_schema_version) {
    return fmt::format("ledger {} is already at schema_version {}", file().string(),
                       live.header.schema_version);
  }
  return migrate_to_current(*this, live.header.schema_version);
}

// ---------------------------------------------------------------------------------------------
// Retention

PruneReport LocalStore::prune(TimePoint cutoff, bool dry_run) const {
  PruneReport report;
  auto examine = [&](const Live& live, std::uint64_t& keep_from) {
    const JournalTail& tail = live.header.journal;
    keep_from = tail.first;
    // Segments are in closing order: stop at the first that holds a record closed after cutoff.
    for (auto s = tail.first; s <= tail.segment; ++s) {
      std::vector<SandboxRecord> held;
      bool young = false;
      m_journal.read_segment(
          s, tail, live.header.ledger_id,
          [&](const Line& line) {
            SandboxRecord record;
            if (parse_line(m_journal, line, ReadScope::whole, record, warn)) {
              young = young || closed_at(record) > cutoff;
              held.push_back(std::move(record));
            }
            return !young;
          },
          warn);
      if (young || (s == tail.segment && tail.offset == 0)) {
        break;
      }
      for (auto& record : held) {
        report.records.push_back(std::move(record));
      }
      ++report.units;
      keep_from = s + 1;
    }
  };
  if (dry_run) {
    std::uint64_t keep_from = 0;
    Live live = load(ReadScope::summary);
    if (live.header.schema_version >= 2) {
      examine(live, keep_from);
    }
    return report;
  }
  auto guard = lock_for_writing();
  Live live = load(ReadScope::whole);
  if (live.header.schema_version < 2) {
    return report; // the first write migrates; retention then works on segments
  }
  std::uint64_t keep_from = 0;
  examine(live, keep_from);
  if (report.units == 0) {
    return report;
  }
  const std::uint64_t old_first = live.header.journal.first;
  Header header = live.header;
  // The counters count each record once, by its newest copy: a pruned copy counts only when no
  // newer one survives it (in a kept segment, or reopened in the live document, which gave up
  // its count already).
  std::map<std::string, State> newest_pruned;
  for (const auto& record : report.records) {
    newest_pruned.insert_or_assign(record.id, record.state);
  }
  for (const auto& record : live.records) {
    newest_pruned.erase(record.id);
  }
  const JournalTail& tail = live.header.journal;
  for (auto s = keep_from; s <= tail.segment && !newest_pruned.empty(); ++s) {
    m_journal.read_segment(
        s, tail, live.header.ledger_id,
        [&](const Line& line) {
          newest_pruned.erase(std::string(ledger_journal::id_of_line(line.text)));
          return !newest_pruned.empty();
        },
        warn);
  }
  for (const auto& [id, state] : newest_pruned) {
    uncount(header.closed_counts, state);
  }
  // The latest closing pruned: usage over a window before it is told the history is partial.
  for (const auto& record : report.records) {
    const TimePoint closed = closed_at(record);
    header.pruned_before = std::max(header.pruned_before.value_or(closed), closed);
  }
  if (keep_from > header.journal.segment) {
    // Every segment went, the current one too; the chain goes on from where it was.
    header.journal = {keep_from, keep_from, 0, header.journal.head, header.journal.lines};
  } else {
    header.journal.first = keep_from;
  }
  write_document(header, live.records);
  // Only once the live document no longer refers to them.
  m_journal.remove(old_first, keep_from);
  return report;
}

// ---------------------------------------------------------------------------------------------
// Verification and description

VerifyReport LocalStore::verify(const std::optional<ChainHead>& kept) const {
  VerifyReport report;
  Live live;
  try {
    live = load(ReadScope::whole, true);
  } catch (const Error& e) {
    report.problems.push_back({"", -1, file().string(), e.what()});
    return report;
  }
  if (live.header.schema_version < 2) {
    report.problems.push_back(
        {"", -1, file().string(),
         "schema_version 1: its records have no hash chains yet; 'sandboxer ledger migrate' (or "
         "any change) migrates it and seals every history"});
    return report;
  }
  const JournalTail& tail = live.header.journal;
  auto problem = [&](const Problem& p) {
    report.problems.push_back(
        {"", -1, fmt::format("{} at byte {}", p.file.string(), p.offset), p.what});
  };
  ledger_journal::ChainWalk chain(report, live.header.ledger_id, kept);
  for (auto s = tail.first; s <= tail.segment; ++s) {
    if (s == tail.segment && tail.offset == 0) {
      break; // not made yet
    }
    chain.segment(s, m_journal.start_of(s, live.header.ledger_id),
                  m_journal.segment_path(s).string());
    m_journal.read_segment(
        s, tail, live.header.ledger_id,
        [&](const Line& line) {
          const std::string where =
              fmt::format("{} at byte {}", m_journal.segment_path(s).string(), line.offset);
          const size_t problems = report.problems.size();
          SandboxRecord record;
          if (parse_line(m_journal, line, ReadScope::whole, record, problem)) {
            check_chain(report, record, where);
          }
          chain.line(line.text, where, report.problems.size() > problems);
          return true;
        },
        problem);
  }
  chain.finish(tail, file().string());
  // Last: a record reopened from the journal is newer there.
  for (const auto& record : live.records) {
    check_chain(report, record, file().string());
  }
  return report;
}

bool LocalStore::exists() const {
  std::error_code ec;
  return std::filesystem::exists(file(), ec);
}

LedgerHead LocalStore::head() const {
  Live live = load(ReadScope::summary);
  if (live.header.ledger_id.empty()) {
    throw Error(ExitCode::not_found,
                fmt::format("no ledger at {} yet: its first change starts it", file().string()));
  }
  const JournalTail& tail = live.header.journal;
  LedgerHead head{live.header.ledger_id, {tail.lines, tail.head}, 0};
  if (tail.head.empty()) {
    head.head.hash = ledger_journal::genesis(live.header.ledger_id);
  }
  // Where the oldest retained segment joins the chain; one from before the chain holds its
  // beginning; no segment at all: nothing before the head was kept.
  const bool made = !(tail.first == tail.segment && tail.offset == 0);
  auto start = made ? m_journal.start_of(tail.first, live.header.ledger_id) : std::nullopt;
  head.retained_from = !start ? tail.lines : start->prev.empty() ? 0 : start->lines;
  return head;
}

std::string LocalStore::describe() const {
  Live live = load(ReadScope::summary);
  const JournalTail& tail = live.header.journal;
  std::uintmax_t bytes = 0;
  std::size_t segments = 0;
  for (auto s = tail.first; s <= tail.segment; ++s) {
    std::error_code ec;
    auto size = std::filesystem::file_size(m_journal.segment_path(s), ec);
    if (!ec) {
      bytes += size;
      ++segments;
    }
  }
  return fmt::format("local files {} (schema {}): {} resident record(s); journal {} segment(s), "
                     "{} bytes",
                     file().string(), live.header.schema_version, live.records.size(), segments,
                     bytes);
}

} // namespace sandboxer
