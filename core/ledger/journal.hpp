#pragma once
// The closed history of the local ledger: append-only segments under <state>/journal/, one UTC
// day each (or 8 MiB), one record per line (docs/ledger-format.md, "The journal"). Only the part
// the live document's `journal` position covers is committed: bytes past it belong to a commit
// that did not finish, are never read, and are cut off by the next writer.

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <sandboxer/clock.hpp>

#include "core/ledger/document.hpp"

namespace sandboxer::ledger_journal {

using ledger_format::JournalTail;

// Where something is wrong in the journal: reported, and the rest still read.
struct Problem {
  std::filesystem::path file;
  std::uint64_t offset = 0;
  std::string what;
};

// One committed line, without its newline.
struct Line {
  std::uint64_t segment = 0;
  std::uint64_t offset = 0;
  std::string_view text;
};

// Where a segment's lines join the journal's chain, from its header: the hash its first line
// links to and how many lines came before it. Empty `prev`: a segment older than the chain.
struct SegmentStart {
  std::string prev;
  std::uint64_t lines = 0;
};

class Journal {
public:
  explicit Journal(std::filesystem::path dir) : m_dir(std::move(dir)) {}

  const std::filesystem::path& dir() const { return m_dir; }
  std::filesystem::path segment_path(std::uint64_t segment) const;

  // Under the ledger lock: writes `lines` (each ending in a newline) after the committed `tail`,
  // first cutting off what an unfinished commit left, in a new segment when the current one is
  // of another UTC day than `closed` (when the records were closed) or full: so retention can
  // drop whole segments. Each line is chained to the one before (`journal_prev`, from the
  // tail's head). The data is fsync'd before this returns; the caller then commits the returned
  // position, head and count in the live document.
  JournalTail append(const JournalTail& tail, const std::vector<std::string>& lines,
                     const std::string& ledger_id, TimePoint closed) const;

  // Reads the committed lines of one segment in file order; `visit` returns false to stop.
  // Problems (a missing or foreign segment, a line cut short) go to `problem`.
  void read_segment(std::uint64_t segment, const JournalTail& tail, const std::string& ledger_id,
                    const std::function<bool(const Line&)>& visit,
                    const std::function<void(const Problem&)>& problem) const;

  // The UTC day a segment holds ("2026-12-02"), from its header; empty if it is unreadable, of
  // another schema, or (`ledger_id` given) of another ledger.
  std::string day_of(std::uint64_t segment, const std::string& ledger_id = "") const;
  // Where the segment joins the chain; nothing when its header is unreadable or foreign.
  std::optional<SegmentStart> start_of(std::uint64_t segment, const std::string& ledger_id) const;

  // Deletes segments [from, to) and what lies beyond `tail` (segments an unfinished rotation
  // made). Called after the live document stopped referring to them.
  void remove(std::uint64_t from, std::uint64_t to) const;

private:
  std::filesystem::path m_dir;
};

// The journal's chain (docs/ledger-format.md, "The journal's chain"). Every record line ends in
// ,"journal_prev":"sha256:<hex>"} : the hash of the line before it, as stored (its bytes without
// the newline), or for the first line genesis(ledger id). The live document keeps the hash of
// the last line, so removing, inserting, reordering or changing any closed record shows.
std::string genesis(const std::string& ledger_id);
std::string line_hash(std::string_view line);
// The line's `journal_prev`, or empty when it has none (written before the chain).
std::string_view prev_of_line(std::string_view line);

// The id of a record line without parsing it all: our writer puts "id" first. Empty when the
// line does not start that way (then the caller parses it).
std::string_view id_of_line(std::string_view line);
// Likewise "name", written second; empty when not found plainly.
std::string_view name_of_line(std::string_view line);

} // namespace sandboxer::ledger_journal
