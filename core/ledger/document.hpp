#pragma once
// The ledger's files as text: the live document (ledger.json) and the journal's lines, schema 1
// to 3 (docs/ledger-format.md). No file access here: see local_store.cpp.

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/errors.hpp"
#include "core/ledger/codec.hpp"
#include "core/ledger/ledger_store.hpp"

namespace sandboxer::ledger_format {

// How far the journal is committed: segments [first, segment] exist, and `segment` is valid up to
// byte `offset`. Anything past that was written by a commit that did not finish. `head` is the
// hash of the last committed record line and `lines` the number of lines the journal's chain has
// had since it began (pruned ones included); an empty `head` means no line is chained yet
// (docs/ledger-format.md, "The journal's chain").
struct JournalTail {
  std::uint64_t first = 1;
  std::uint64_t segment = 1;
  std::uint64_t offset = 0;
  std::string head;
  std::uint64_t lines = 0;
};

// The live document's fields outside "sandboxes".
struct Header {
  int schema_version = LedgerData::k_schema_version;
  std::string ledger_id;
  std::uint64_t event_seq = 0;
  JournalTail journal;
  std::map<std::string, std::uint64_t> closed_counts; // LedgerData::closed_counts
  std::optional<TimePoint> pruned_before;             // LedgerData::pruned_before
};

using RecordSink = std::function<void(SandboxRecord&)>;

// Reads a live document of schema 1 to 3, handing each record to `sink` in file order (schema-1
// records upgraded in memory: upgrade_record_from_v1). Throws LedgerError naming `file` and where.
Header parse_document(std::string_view text, const std::filesystem::path& file, ReadScope scope,
                      const RecordSink& sink);

// Writes a document of the current schema through `flush`, in chunks of about `chunk` bytes: the
// memory a commit touches stays the same whatever the size of the ledger.
void serialize(const Header& header, const std::vector<SandboxRecord>& records, size_t chunk,
               std::string& buffer, const std::function<void(const std::string&)>& flush);

void read_record(JsonReader& in, SandboxRecord& r, ReadScope scope);
void write_record(JsonWriter& out, const SandboxRecord& r);

// A journal line: one record, as compact JSON, with the newline.
std::string journal_line(const SandboxRecord& record);
// Parses one journal line (without its newline). Throws ShapeError or SyntaxError.
void read_journal_line(std::string_view line, SandboxRecord& record, ReadScope scope);

// Schema 1 kept the creation policy in the first entry's details and no event kind in entries
// older than events: fills `policy` and each entry's `event` as schema 2 has them.
void upgrade_record_from_v1(SandboxRecord& record);

// "ledger F is corrupt (DETAIL); it was left untouched. ..." with how to recover.
std::string corrupt_message(const std::filesystem::path& file, const std::string& detail);

} // namespace sandboxer::ledger_format
