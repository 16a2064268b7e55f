#include "core/ledger/journal.hpp"

#include <cerrno>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sandboxer/error.hpp>

#include "core/errors.hpp"
#include "core/ledger/file_io.hpp"
#include "core/sha256.hpp"
#include "sdk/file_descriptor.hpp"
#include "sdk/files.hpp"

namespace sandboxer::ledger_journal {
namespace {

using ledger_files::errno_text;
using ledger_files::write_failed;

// Small enough that a lookup or a retention pass touches little more than it needs, large enough
// that a busy machine makes only a few a day.
constexpr std::uint64_t k_segment_limit = 8 << 20;

std::string day_text(TimePoint time) {
  return format_time(time).substr(0, 10);
}

// Segments are read from this schema on: a segment keeps the version it was begun at (a
// migration rewrites no segment), and its lines are of that schema.
constexpr int k_oldest_segment_version = 2;

constexpr std::string_view k_prev_member = R"(,"journal_prev":")";
constexpr size_t k_hash_size = 7 + 64; // "sha256:" and the hex digits

std::string header_line(const std::string& ledger_id, std::uint64_t segment, const std::string& day,
                        const JournalTail& start) {
  return fmt::format(R"({{"sandboxer_journal":{},"ledger_id":"{}","segment":{},"day":"{}",)"
                     R"("prev":"{}","lines":{}}})",
                     LedgerData::k_schema_version, ledger_id, segment, day, start.head,
                     start.lines) +
         "\n";
}

struct SegmentHeader {
  int version = 0;
  std::string ledger_id;
  std::uint64_t segment = 0;
  std::string day;
  SegmentStart start;
};

// Throws ShapeError or SyntaxError.
SegmentHeader parse_header(std::string_view line) {
  using namespace ledger_format;
  SegmentHeader header;
  JsonReader in(line);
  expect(in, Kind::object, "", "an object");
  bool marked = false;
  in.object([&](std::string_view key) {
    if (key == "sandboxer_journal") {
      header.version = static_cast<int>(read_integer(in, key, 1, 1000000, "a schema version"));
      marked = true;
    } else if (key == "ledger_id") {
      read_value(in, header.ledger_id, key);
    } else if (key == "segment") {
      header.segment =
          static_cast<std::uint64_t>(read_integer(in, key, 0, INT64_MAX, "a segment number"));
    } else if (key == "day") {
      read_value(in, header.day, key);
    } else if (key == "prev") {
      read_value(in, header.start.prev, key);
    } else if (key == "lines") {
      header.start.lines =
          static_cast<std::uint64_t>(read_integer(in, key, 0, INT64_MAX, "a line count"));
    } else {
      in.skip();
    }
  });
  in.finish();
  if (!marked) {
    throw ShapeError{"sandboxer_journal", "is missing: not a journal segment"};
  }
  return header;
}

std::string_view quoted_after(std::string_view line, std::string_view prefix) {
  if (!line.starts_with(prefix)) {
    return {};
  }
  line.remove_prefix(prefix.size());
  const size_t end = line.find_first_of("\"\\");
  return end == std::string_view::npos || line[end] != '"' ? std::string_view()
                                                           : line.substr(0, end);
}

} // namespace

std::string_view id_of_line(std::string_view line) {
  return quoted_after(line, R"({"id":")");
}

std::string_view name_of_line(std::string_view line) {
  const std::string_view id = id_of_line(line);
  if (id.empty()) {
    return {};
  }
  // {"id":"<id>","name":"<name>"
  return quoted_after(line.substr(7 + id.size()), R"(","name":")");
}

std::filesystem::path Journal::segment_path(std::uint64_t segment) const {
  return m_dir / fmt::format("segment-{:06}.jsonl", segment);
}

std::string genesis(const std::string& ledger_id) {
  return sha256_digest(fmt::format(R"({{"journal":"{}"}})", ledger_id));
}

std::string line_hash(std::string_view line) {
  return sha256_digest(line);
}

std::string_view prev_of_line(std::string_view line) {
  // Our writer puts it last: ...,"journal_prev":"sha256:<64 hex>"}
  const size_t size = k_prev_member.size() + k_hash_size + 2;
  if (line.size() < size || !line.ends_with("\"}")) {
    return {};
  }
  const std::string_view tail = line.substr(line.size() - size);
  if (!tail.starts_with(k_prev_member)) {
    return {};
  }
  return tail.substr(k_prev_member.size(), k_hash_size);
}

namespace {

// The segment's header if it is one of ours (`ledger_id` given: of that ledger).
std::optional<SegmentHeader> header_of(const Journal& journal, std::uint64_t segment,
                                       const std::string& ledger_id) {
  FileDescriptor fd(open_own_file(journal.segment_path(segment), O_RDONLY, "journal segment"));
  char buffer[1024];
  const ssize_t got = fd.get() < 0 ? -1 : ::pread(fd.get(), buffer, sizeof(buffer), 0);
  if (got <= 0) {
    return std::nullopt;
  }
  const std::string_view text(buffer, static_cast<size_t>(got));
  const size_t end = text.find('\n');
  try {
    if (end == std::string_view::npos) {
      return std::nullopt;
    }
    SegmentHeader header = parse_header(text.substr(0, end));
    const bool ours = header.version >= k_oldest_segment_version &&
                      header.version <= LedgerData::k_schema_version &&
                      (ledger_id.empty() || header.ledger_id == ledger_id);
    return ours ? std::optional(std::move(header)) : std::nullopt;
  } catch (...) {
    return std::nullopt;
  }
}

} // namespace

std::string Journal::day_of(std::uint64_t segment, const std::string& ledger_id) const {
  auto header = header_of(*this, segment, ledger_id);
  return header ? header->day : std::string();
}

std::optional<SegmentStart> Journal::start_of(std::uint64_t segment,
                                              const std::string& ledger_id) const {
  auto header = header_of(*this, segment, ledger_id);
  return header ? std::optional(header->start) : std::nullopt;
}

JournalTail Journal::append(const JournalTail& tail, const std::vector<std::string>& lines,
                            const std::string& ledger_id, TimePoint closed) const {
  std::error_code ec;
  if (std::filesystem::create_directory(m_dir, ec)) {
    ::chmod(m_dir.c_str(), 0700);
  } else if (ec) {
    throw LedgerError(
        fmt::format("cannot create journal directory {}: {}", m_dir.string(), ec.message()));
  }
  // Another user who could write here could swap a segment for a link to a file of ours.
  check_own_directory(m_dir, "journal directory");
  JournalTail chained = tail;
  if (chained.head.empty()) {
    chained.head = genesis(ledger_id); // the first chained line (the lines before stay as they are)
  }
  const JournalTail start = chained;
  std::string text;
  for (const auto& line : lines) {
    // {...}\n becomes {...,"journal_prev":"<hash of the line before>"}\n
    const size_t from = text.size();
    text.append(line, 0, line.size() - 2);
    text += k_prev_member;
    text += chained.head;
    text += "\"}";
    chained.head = line_hash(std::string_view(text).substr(from));
    ++chained.lines;
    text += '\n';
  }
  const std::string today = day_text(closed);
  const bool has_segment = tail.offset > 0;
  // A full segment, another day's, one of an older schema (its header tells its lines' schema),
  // or one that is not readable as ours (damaged, foreign, missing): the records go to a new
  // one, where they can be read.
  const auto current_header =
      has_segment ? header_of(*this, tail.segment, ledger_id) : std::nullopt;
  const bool rotate = has_segment && (tail.offset >= k_segment_limit || !current_header ||
                                      current_header->day != today ||
                                      current_header->version != LedgerData::k_schema_version);
  const auto current = segment_path(tail.segment);
  if (has_segment && !rotate) {
    FileDescriptor fd(open_own_file(current, O_RDWR, "journal segment"));
    if (fd.get() < 0) {
      write_failed("open", current, current);
    }
    // What an unfinished commit wrote past the committed end goes first.
    if (::ftruncate(fd.get(), static_cast<off_t>(tail.offset)) != 0 ||
        ::lseek(fd.get(), static_cast<off_t>(tail.offset), SEEK_SET) < 0) {
      write_failed("truncate", current, current);
    }
    // A committed end that is not a line's end (the file was damaged): the new lines must not be
    // glued to what is there.
    char last = '\n';
    if (::pread(fd.get(), &last, 1, static_cast<off_t>(tail.offset - 1)) == 1 && last != '\n') {
      text.insert(0, "\n");
    }
    ledger_files::write_all(fd.get(), text, current, current);
    if (::fsync(fd.get()) != 0) {
      write_failed("fsync", current, current);
    }
    return {tail.first, tail.segment, tail.offset + text.size(), chained.head, chained.lines};
  }
  if (rotate) {
    // The finished segment keeps exactly its committed bytes.
    // Through a descriptor checked to be our own file: truncate(path) would follow a link.
    FileDescriptor finished(open_own_file(current, O_WRONLY, "journal segment"));
    if (finished.get() < 0 ? errno != ENOENT
                           : ::ftruncate(finished.get(), static_cast<off_t>(tail.offset)) != 0) {
      write_failed("truncate", current, current);
    }
  }
  const std::uint64_t segment = rotate ? tail.segment + 1 : tail.segment;
  const auto path = segment_path(segment);
  text.insert(0, header_line(ledger_id, segment, today, start));
  // A segment this far is not committed yet: whatever an earlier attempt left in it goes, once
  // it is known to be our own file.
  FileDescriptor fd(open_own_file(path, O_WRONLY, "journal segment"));
  if (fd.get() >= 0 && ::ftruncate(fd.get(), 0) != 0) {
    write_failed("truncate", path, path);
  }
  if (fd.get() < 0) {
    fd.reset(::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600));
  }
  if (fd.get() < 0 || ::fchmod(fd.get(), 0600) != 0) {
    write_failed("create", path, path);
  }
  ledger_files::write_all(fd.get(), text, path, path);
  if (::fsync(fd.get()) != 0) {
    write_failed("fsync", path, path);
  }
  ledger_files::fsync_directory(m_dir, path);
  return {tail.first, segment, text.size(), chained.head, chained.lines};
}

void Journal::read_segment(std::uint64_t segment, const JournalTail& tail,
                           const std::string& ledger_id,
                           const std::function<bool(const Line&)>& visit,
                           const std::function<void(const Problem&)>& problem) const {
  const bool is_tail = segment == tail.segment;
  if (is_tail && tail.offset == 0) {
    return; // not made yet
  }
  const auto path = segment_path(segment);
  ledger_files::FileText file;
  if (!file.load(path, "journal segment")) {
    problem({path, 0, "is missing: the records it held cannot be read"});
    return;
  }
  std::string_view text = file.view();
  if (is_tail) {
    if (text.size() < tail.offset) {
      problem({path, text.size(),
               fmt::format("ends at byte {}, before its committed end {}: records were lost",
                           text.size(), tail.offset)});
    }
    text = text.substr(0, std::min<size_t>(text.size(), tail.offset));
  }
  const size_t header_end = text.find('\n');
  try {
    if (header_end == std::string_view::npos) {
      throw ledger_format::ShapeError{"", "has no complete header line"};
    }
    const SegmentHeader header = parse_header(text.substr(0, header_end));
    if (header.version > LedgerData::k_schema_version ||
        header.version < k_oldest_segment_version) {
      problem({path, 0,
               header.version > LedgerData::k_schema_version
                   ? fmt::format("has schema version {}, newer than this sandboxer understands "
                                 "({}); its records are not read: upgrade sandboxer",
                                 header.version, LedgerData::k_schema_version)
                   : fmt::format("has schema version {}, older than any journal ({}): not read",
                                 header.version, k_oldest_segment_version)});
      return;
    }
    if (!ledger_id.empty() && header.ledger_id != ledger_id) {
      problem({path, 0,
               fmt::format("belongs to ledger {}, not {}: not read", header.ledger_id, ledger_id)});
      return;
    }
  } catch (const ledger_format::ShapeError& e) {
    problem({path, 0, "header " + e.describe()});
    return;
  } catch (const ledger_format::SyntaxError& e) {
    problem({path, e.offset, "header is not valid JSON: " + e.message});
    return;
  }
  size_t at = header_end + 1;
  while (at < text.size()) {
    const size_t end = text.find('\n', at);
    if (end == std::string_view::npos) {
      problem({path, at,
               fmt::format("ends in a line cut short ({} bytes without a newline): that record "
                           "is not read",
                           text.size() - at)});
      return;
    }
    if (!visit(Line{segment, at, text.substr(at, end - at)})) {
      return;
    }
    at = end + 1;
  }
}

void Journal::remove(std::uint64_t from, std::uint64_t to) const {
  for (std::uint64_t segment = from; segment < to; ++segment) {
    ::unlink(segment_path(segment).c_str());
  }
}

} // namespace sandboxer::ledger_journal
