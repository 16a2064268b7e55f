// The live document and journal lines as text (document.hpp).
#include "core/ledger/document.hpp"

#include <climits>
#include <fmt/format.h>
#include <optional>
#include <unordered_map>

#include <sandboxer/error.hpp>

#include "core/errors.hpp"
#include "core/ledger/fields.hpp"

namespace sandboxer::ledger_format {
namespace {

constexpr std::string_view k_backup_name = "ledger.json.bak";

// The value of schema_version. A newer one is refused as newer, not as corrupt, so that the
// message says to upgrade rather than to restore a backup.
int check_schema_version(JsonReader& in, const std::filesystem::path& file) {
  const std::int64_t version =
      read_integer(in, "schema_version", INT64_MIN, INT64_MAX, "an integer");
  if (version > LedgerData::k_schema_version) {
    throw LedgerError(fmt::format("ledger {} has schema_version {}, newer than this sandboxer "
                                  "understands ({}); upgrade sandboxer",
                                  file.string(), version, LedgerData::k_schema_version));
  }
  if (version < 1) {
    throw ShapeError{"schema_version", fmt::format("is {}, not a valid version", version)};
  }
  return static_cast<int>(version);
}

// The id of the record at `in`, for an error message about a field that came before it (another
// writer may order keys differently); empty when there is none.
std::string find_id(JsonReader in) {
  std::string id;
  try {
    if (in.peek() == Kind::object) {
      in.object([&](std::string_view key) {
        if (key == "id" && id.empty() && in.peek() == Kind::string) {
          in.string_into(id);
        } else {
          in.skip();
        }
      });
    }
  } catch (const SyntaxError&) {
    // Whatever was found before the error is still the best name.
  }
  return id;
}

void read_sandboxes(JsonReader& in, const std::filesystem::path& file, ReadScope scope, int version,
                    const RecordSink& sink) {
  expect(in, Kind::array, "sandboxes", "an array");
  // Two records with one id (a hand merge, a bad restore) would make every lookup by id pick one
  // of them silently, and a destroy settle the wrong one: refused like any other corruption.
  std::unordered_map<std::string, size_t> index_of_id;
  in.array([&](size_t index) {
    const size_t start = in.offset();
    SandboxRecord record;
    try {
      read_record(in, record, scope);
    } catch (const ShapeError& e) {
      const std::string id = record.id.empty() ? find_id(in.rewound_to(start)) : record.id;
      const std::string where = id.empty() ? fmt::format("sandboxes[{}]", index)
                                           : fmt::format("sandboxes[{}] (id {})", index, id);
      throw LedgerError(corrupt_message(file, fmt::format("{}: {}", where, e.describe())));
    } catch (SyntaxError& e) {
      e.message += fmt::format(", in sandboxes[{}]", index);
      throw;
    }
    auto [first, inserted] = index_of_id.emplace(record.id, index);
    if (!inserted) {
      throw LedgerError(
          corrupt_message(file, fmt::format("sandboxes[{}] and sandboxes[{}] have the same id {}",
                                            first->second, index, record.id)));
    }
    if (version == 1) {
      upgrade_record_from_v1(record);
    }
    sink(record);
  });
}

void read_journal_tail(JsonReader& in, JournalTail& tail) {
  expect(in, Kind::object, "journal", "an object");
  nested("journal", [&] {
    in.object([&](std::string_view key) {
      auto number = [&] {
        return static_cast<std::uint64_t>(
            read_integer(in, key, 0, INT64_MAX, "a non-negative integer"));
      };
      if (key == "first") {
        tail.first = number();
      } else if (key == "segment") {
        tail.segment = number();
      } else if (key == "offset") {
        tail.offset = number();
      } else if (key == "head") {
        read_value(in, tail.head, "journal.head");
      } else if (key == "lines") {
        tail.lines = number();
      } else {
        in.skip();
      }
    });
  });
  if (tail.first < 1 || tail.first > tail.segment) {
    throw ShapeError{"journal.first", fmt::format("is {}, outside 1..{} (journal.segment)",
                                                  tail.first, tail.segment)};
  }
}

} // namespace

std::string corrupt_message(const std::filesystem::path& file, const std::string& detail) {
  const auto backup = file.parent_path() / k_backup_name;
  std::string message =
      fmt::format("ledger {} is corrupt ({}); it was left untouched. ", file.string(), detail);
  std::error_code ec;
  if (std::filesystem::exists(backup, ec)) {
    message += fmt::format("The previous good copy is {}: inspect both, then restore it with: cp "
                           "{} {}",
                           backup.string(), backup.string(), file.string());
  } else {
    message += fmt::format("There is no previous copy ({} does not exist): repair it by hand, or "
                           "move it aside to start an empty ledger (sandboxes it listed can then "
                           "be found with: sandboxer reap --orphans --dry-run)",
                           backup.string());
  }
  return message;
}

void read_record(JsonReader& in, SandboxRecord& r, ReadScope scope) {
  read_fields(in, r, "", scope == ReadScope::summary);
}

void write_record(JsonWriter& out, const SandboxRecord& r) {
  write_fields(out, r);
}

Header parse_document(std::string_view text, const std::filesystem::path& file, ReadScope scope,
                      const RecordSink& sink) {
  Header header;
  try {
    JsonReader in(text);
    expect(in, Kind::object, "", "an object at the top level");
    bool has_version = false;
    bool has_sandboxes = false;
    std::optional<std::pair<size_t, size_t>> deferred; // offset and size of "sandboxes"
    in.object([&](std::string_view key) {
      if (key == "schema_version") {
        header.schema_version = check_schema_version(in, file);
        has_version = true;
      } else if (key == "ledger_id") {
        read_value(in, header.ledger_id, key);
      } else if (key == "event_seq") {
        header.event_seq = static_cast<std::uint64_t>(
            read_integer(in, "event_seq", 0, INT64_MAX, "a non-negative integer"));
      } else if (key == "journal") {
        read_journal_tail(in, header.journal);
      } else if (key == "closed") {
        expect(in, Kind::object, key, "an object of counts");
        nested(key, [&] {
          in.object([&](std::string_view state) {
            header.closed_counts[std::string(state)] = static_cast<std::uint64_t>(
                read_integer(in, state, 0, INT64_MAX, "a non-negative integer"));
          });
        });
      } else if (key == "pruned_before") {
        read_value(in, header.pruned_before, key);
      } else if (key == "sandboxes") {
        // Readers disagree on which of two copies counts (jq: the last); refuse to guess.
        if (has_sandboxes) {
          throw ShapeError{"sandboxes", "appears twice"};
        }
        has_sandboxes = true;
        if (has_version) {
          read_sandboxes(in, file, scope, header.schema_version, sink);
        } else {
          // Our writer puts schema_version first; another one (jq, an editor) may not. The
          // records are then read once the version is known to be one we understand.
          const size_t start = in.offset();
          in.skip();
          deferred.emplace(start, in.offset() - start);
        }
      } else {
        in.skip();
      }
    });
    in.finish();
    if (!has_version) {
      throw ShapeError{"schema_version", "is missing"};
    }
    if (!has_sandboxes) {
      throw ShapeError{"sandboxes", "is missing"};
    }
    if (deferred) {
      JsonReader records(text.substr(deferred->first, deferred->second), deferred->first);
      read_sandboxes(records, file, scope, header.schema_version, sink);
    }
  } catch (const SyntaxError& e) {
    throw LedgerError(corrupt_message(
        file, fmt::format("invalid JSON at byte offset {}: {}", e.offset, e.message)));
  } catch (const ShapeError& e) {
    throw LedgerError(corrupt_message(file, e.describe()));
  }
  return header;
}

void serialize(const Header& header, const std::vector<SandboxRecord>& records, size_t chunk,
               std::string& buffer, const std::function<void(const std::string&)>& flush) {
  buffer.clear();
  buffer.reserve(chunk + chunk / 4);
  JsonWriter out(buffer);
  out.raw("{\"schema_version\":");
  out.integer(LedgerData::k_schema_version);
  out.raw(",\"ledger_id\":");
  out.string(header.ledger_id);
  out.raw(",\"event_seq\":");
  out.integer(header.event_seq);
  out.raw(",\"journal\":{\"first\":");
  out.integer(header.journal.first);
  out.raw(",\"segment\":");
  out.integer(header.journal.segment);
  out.raw(",\"offset\":");
  out.integer(header.journal.offset);
  if (!header.journal.head.empty()) {
    out.raw(",\"head\":");
    out.string(header.journal.head);
    out.raw(",\"lines\":");
    out.integer(header.journal.lines);
  }
  out.raw("},\"closed\":{");
  bool first = true;
  for (const auto& [state, count] : header.closed_counts) {
    out.raw(first ? "" : ",");
    first = false;
    out.string(state);
    out.raw(":");
    out.integer(count);
  }
  out.raw("}");
  if (header.pruned_before) {
    out.raw(",\"pruned_before\":");
    out.time(*header.pruned_before);
  }
  out.raw(",\"sandboxes\":[");
  for (size_t i = 0; i < records.size(); ++i) {
    if (i > 0) {
      out.raw(",");
    }
    write_record(out, records[i]);
    if (buffer.size() >= chunk) {
      flush(buffer);
      buffer.clear();
    }
  }
  out.raw("]}\n");
  flush(buffer);
}

std::string journal_line(const SandboxRecord& record) {
  std::string line;
  JsonWriter out(line);
  write_record(out, record);
  line += '\n';
  return line;
}

void read_journal_line(std::string_view line, SandboxRecord& record, ReadScope scope) {
  JsonReader in(line);
  read_record(in, record, scope);
  in.finish();
}

} // namespace sandboxer::ledger_format
