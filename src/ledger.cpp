#include <array>
#include <cerrno>
#include <charconv>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <functional>
#include <string_view>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>
#include <unordered_map>
#include <utility>

#include <sandboxer/error.hpp>
#include <sandboxer/ledger.hpp>

#include "src/file_descriptor.hpp"
#include "src/json/reader.hpp"
#include "src/json/writer.hpp"

namespace sandboxer {

using json = nlohmann::json;

namespace {

using json_text::JsonReader;
using json_text::JsonWriter;
using json_text::SyntaxError;

constexpr std::array<std::string_view, 8> k_state_names = {
    "creating",  "running", "snapshotting", "destroying",
    "destroyed", "failed",  "expired",      "orphaned",
};

constexpr std::string_view k_file_name = "ledger.json";
constexpr std::string_view k_backup_name = "ledger.json.bak";
// Temporary names carry the pid so that a crashed writer's leftovers are recognisable.
constexpr std::string_view k_temp_prefix = ".ledger.json.tmp.";
constexpr std::string_view k_backup_temp_prefix = "ledger.json.bak.tmp.";

constexpr size_t k_write_chunk = 1 << 20;

// ---------------------------------------------------------------------------------------------
// Ids

// 12 characters of RFC 4648 base32 (lowercase) = 60 random bits: collisions stay negligible for
// any ledger size a machine can hold, and the id is still short enough to type.
std::string new_id(std::string_view prefix) {
  static constexpr char k_alphabet[] = "abcdefghijklmnopqrstuvwxyz234567";
  std::uint64_t bits = 0;
  auto* out = reinterpret_cast<unsigned char*>(&bits);
  size_t filled = 0;
  while (filled < sizeof(bits)) {
    const ssize_t got = ::getrandom(out + filled, sizeof(bits) - filled, 0);
    if (got < 0) {
      if (errno == EINTR) {
        continue;
      }
      throw Error(ExitCode::runtime,
                  fmt::format("cannot read random bytes for an id: {}", std::strerror(errno)));
    }
    filled += static_cast<size_t>(got);
  }
  std::string id(prefix);
  for (int i = 0; i < 12; ++i) {
    id += k_alphabet[bits & 31];
    bits >>= 5;
  }
  return id;
}

std::string new_ledger_id() {
  return new_id("ldg-");
}

} // namespace

std::string new_event_id() {
  // Two draws: 120 bits, unique across every ledger a hub may hear from.
  return new_id("evt-") + new_id("");
}

namespace {

// ---------------------------------------------------------------------------------------------
// JSON text
//
// The ledger is read by every command and rewritten by every change, and nlohmann's DOM parser
// alone takes ~90 ms on a ledger of 10k records (13 MB), more than a `list` may take in total. So
// the ledger has its own reader and writer: one pass over the text straight into the structs,
// with nlohmann values built only for the free-form fields (spec, info, secret_refs, details).
// Both follow RFC 8259 strictly (including UTF-8 validity), so the file stays readable by jq.
// See src/json/.
// ---------------------------------------------------------------------------------------------
// Reading records
//
// The readers throw ShapeError naming the field; the callers add which record and which file.

using Kind = JsonReader::Kind;

struct ShapeError {
  std::string field; // "owner.pid", "history[2].to"; empty for the value itself
  std::string problem;

  std::string describe() const {
    return field.empty() ? problem : fmt::format("field \"{}\" {}", field, problem);
  }
  // Adds the enclosing field: "history[2]" + "to" -> "history[2].to".
  void nest(std::string_view outer) {
    field = field.empty() ? std::string(outer) : fmt::format("{}.{}", outer, field);
  }
};

const char* kind_phrase(Kind kind) {
  switch (kind) {
  case Kind::null:
    return "null";
  case Kind::boolean:
    return "a boolean";
  case Kind::number:
    return "a number";
  case Kind::string:
    return "a string";
  case Kind::object:
    return "an object";
  case Kind::array:
    return "an array";
  }
  return "a value";
}

void expect(JsonReader& in, Kind kind, std::string_view field, std::string_view expected) {
  const Kind got = in.peek();
  if (got != kind) {
    throw ShapeError{std::string(field),
                     fmt::format("is {}, expected {}", kind_phrase(got), expected)};
  }
}

// Runs `read` on the value of `field`, naming `field` as the parent of whatever it rejects.
template <typename Read> auto nested(std::string_view field, Read read) {
  try {
    return read();
  } catch (ShapeError& e) {
    e.nest(field);
    throw;
  }
}

void read_string(JsonReader& in, std::string& out, std::string_view field) {
  expect(in, Kind::string, field, "a string");
  in.string_into(out);
}

std::optional<std::string> read_optional_string(JsonReader& in, std::string_view field) {
  if (in.take_null()) {
    return std::nullopt;
  }
  expect(in, Kind::string, field, "a string or null");
  std::string text;
  in.string_into(text);
  return text;
}

TimePoint read_time(JsonReader& in, std::string_view field) {
  expect(in, Kind::string, field, "an RFC 3339 time string");
  std::string scratch;
  const std::string_view text = in.string(scratch);
  const auto t = parse_time(text);
  if (!t) {
    throw ShapeError{std::string(field), fmt::format("is \"{}\", expected an RFC 3339 time such as "
                                                     "\"2026-12-02T11:51:32Z\"",
                                                     text)};
  }
  return *t;
}

std::optional<TimePoint> read_optional_time(JsonReader& in, std::string_view field) {
  if (in.take_null()) {
    return std::nullopt;
  }
  return read_time(in, field);
}

State read_state(JsonReader& in, std::string_view field) {
  expect(in, Kind::string, field, "a state name");
  std::string scratch;
  const std::string_view text = in.string(scratch);
  const auto state = state_from_string(text);
  if (!state) {
    throw ShapeError{std::string(field),
                     fmt::format("is \"{}\", expected one of creating, running, snapshotting, "
                                 "destroying, destroyed, failed, expired, orphaned",
                                 text)};
  }
  return *state;
}

std::int64_t read_integer(JsonReader& in, std::string_view field, std::int64_t min,
                          std::int64_t max, std::string_view expected) {
  expect(in, Kind::number, field, expected);
  const json number = in.number();
  const bool fits = number.is_number_unsigned()
                        ? number.get<std::uint64_t>() <= static_cast<std::uint64_t>(max)
                    : number.is_number_integer()
                        ? number.get<std::int64_t>() >= min && number.get<std::int64_t>() <= max
                        : false;
  if (!fits) {
    throw ShapeError{std::string(field),
                     fmt::format("is {}, expected {}", number.dump(), expected)};
  }
  return number.get<std::int64_t>();
}

std::map<std::string, std::string> read_string_map(JsonReader& in, std::string_view field) {
  expect(in, Kind::object, field, "an object of strings");
  std::map<std::string, std::string> map;
  nested(field, [&] {
    in.object([&](std::string_view key) {
      std::string value;
      read_string(in, value, key);
      // The writer emits keys in order, so the hint makes each insertion constant time.
      map.insert_or_assign(map.end(), std::string(key), std::move(value));
    });
  });
  return map;
}

ProfileRef read_profile(JsonReader& in) {
  expect(in, Kind::object, "", "an object");
  ProfileRef profile;
  in.object([&](std::string_view key) {
    if (key == "name") {
      read_string(in, profile.name, key);
    } else if (key == "path") {
      read_string(in, profile.path, key);
    } else if (key == "hash") {
      read_string(in, profile.hash, key);
    } else {
      in.skip();
    }
  });
  return profile;
}

Owner read_owner(JsonReader& in) {
  expect(in, Kind::object, "", "an object");
  Owner owner;
  in.object([&](std::string_view key) {
    if (key == "user") {
      read_string(in, owner.user, key);
    } else if (key == "host") {
      read_string(in, owner.host, key);
    } else if (key == "pid") {
      owner.pid = static_cast<int>(read_integer(in, key, INT_MIN, INT_MAX, "an integer"));
    } else if (key == "ci") {
      owner.ci = read_string_map(in, key);
    } else {
      in.skip();
    }
  });
  return owner;
}

void require(bool present, const char* field) {
  if (!present) {
    throw ShapeError{field, "is missing"};
  }
}

SnapshotRecord read_snapshot(JsonReader& in) {
  expect(in, Kind::object, "", "an object");
  SnapshotRecord snapshot;
  bool has_id = false;
  bool has_created_at = false;
  in.object([&](std::string_view key) {
    if (key == "id") {
      read_string(in, snapshot.id, key);
      has_id = true;
    } else if (key == "name") {
      read_string(in, snapshot.name, key);
    } else if (key == "backend_ref") {
      read_string(in, snapshot.backend_ref, key);
    } else if (key == "size_bytes") {
      if (!in.take_null()) {
        snapshot.size_bytes = static_cast<std::uint64_t>(
            read_integer(in, key, 0, INT64_MAX, "a non-negative integer or null"));
      }
    } else if (key == "created_at") {
      snapshot.created_at = read_time(in, key);
      has_created_at = true;
    } else {
      in.skip();
    }
  });
  require(has_id, "id");
  require(has_created_at, "created_at");
  return snapshot;
}

HistoryEntry read_history_entry(JsonReader& in) {
  expect(in, Kind::object, "", "an object");
  HistoryEntry entry;
  bool has_time = false;
  bool has_to = false;
  in.object([&](std::string_view key) {
    if (key == "time") {
      entry.time = read_time(in, key);
      has_time = true;
    } else if (key == "from") {
      entry.from = in.take_null() ? std::nullopt : std::optional(read_state(in, key));
    } else if (key == "to") {
      entry.to = read_state(in, key);
      has_to = true;
    } else if (key == "actor") {
      read_string(in, entry.actor, key);
    } else if (key == "reason") {
      read_string(in, entry.reason, key);
    } else if (key == "details") {
      entry.details = in.any();
    } else if (key == "event") {
      read_string(in, entry.event, key);
    } else if (key == "event_id") {
      read_string(in, entry.event_id, key);
    } else {
      in.skip();
    }
  });
  require(has_time, "time");
  require(has_to, "to");
  return entry;
}

// Reads an array with `read_item`, naming the index of an element it rejects.
template <typename T, typename ReadItem>
std::vector<T> read_array(JsonReader& in, std::string_view field, ReadItem read_item) {
  expect(in, Kind::array, field, "an array");
  std::vector<T> items;
  in.array([&](size_t index) {
    try {
      items.push_back(read_item(in));
    } catch (ShapeError& e) {
      e.nest(fmt::format("{}[{}]", field, index));
      throw;
    }
  });
  return items;
}

// The fields every record must have; the others default when absent.
enum Required : unsigned {
  k_has_id = 1,
  k_has_name = 2,
  k_has_driver = 4,
  k_has_state = 8,
  k_has_created_at = 16,
};

// One pass over the record's members, each read straight into its field. Unknown members are
// skipped: see docs/ledger-format.md for why that is safe within one schema version.
void read_record(JsonReader& in, SandboxRecord& r, ReadScope scope) {
  const bool whole = scope == ReadScope::whole;
  expect(in, Kind::object, "", "an object");
  unsigned seen = 0;
  in.object([&](std::string_view k) {
    if (k == "id") {
      read_string(in, r.id, k);
      seen |= k_has_id;
    } else if (k == "name") {
      read_string(in, r.name, k);
      seen |= k_has_name;
    } else if (k == "state") {
      r.state = read_state(in, k);
      seen |= k_has_state;
    } else if (k == "driver") {
      read_string(in, r.driver, k);
      seen |= k_has_driver;
    } else if (k == "profile") {
      r.profile = nested(k, [&] { return read_profile(in); });
    } else if (k == "backend_id") {
      read_string(in, r.backend_id, k);
    } else if (k == "created_at") {
      r.created_at = read_time(in, k);
      seen |= k_has_created_at;
    } else if (k == "expires_at") {
      r.expires_at = read_optional_time(in, k);
    } else if (k == "max_expires_at") {
      r.max_expires_at = read_optional_time(in, k);
    } else if (k == "labels") {
      r.labels = read_string_map(in, k);
    } else if (k == "env" && whole) {
      r.env = read_string_map(in, k);
    } else if (k == "secret_refs" && whole) {
      r.secret_refs = in.any();
    } else if (k == "owner") {
      r.owner = nested(k, [&] { return read_owner(in); });
    } else if (k == "idempotency_key") {
      r.idempotency_key = read_optional_string(in, k);
    } else if (k == "restored_from") {
      r.restored_from = read_optional_string(in, k);
    } else if (k == "error") {
      r.error = read_optional_string(in, k);
    } else if (k == "snapshots") {
      r.snapshots = read_array<SnapshotRecord>(in, k, read_snapshot);
    } else if (k == "history" && whole) {
      r.history = read_array<HistoryEntry>(in, k, read_history_entry);
    } else if (k == "spec" && whole) {
      r.spec = in.any();
    } else if (k == "info" && whole) {
      r.info = in.any();
    } else if (whole) {
      in.skip();
    } else {
      in.skip_roughly();
    }
  });
  require(seen & k_has_id, "id");
  require(seen & k_has_name, "name");
  require(seen & k_has_driver, "driver");
  require(seen & k_has_state, "state");
  require(seen & k_has_created_at, "created_at");
}

// ---------------------------------------------------------------------------------------------
// Writing records

void write_snapshot(JsonWriter& out, const SnapshotRecord& s) {
  out.raw("{\"id\":");
  out.string(s.id);
  out.raw(",\"name\":");
  out.string(s.name);
  out.raw(",\"backend_ref\":");
  out.string(s.backend_ref);
  out.raw(",\"size_bytes\":");
  if (s.size_bytes) {
    out.integer(*s.size_bytes);
  } else {
    out.raw("null");
  }
  out.raw(",\"created_at\":");
  out.time(s.created_at);
  out.raw("}");
}

void write_history_entry(JsonWriter& out, const HistoryEntry& h) {
  out.raw("{\"time\":");
  out.time(h.time);
  out.raw(",\"from\":");
  if (h.from) {
    out.string(to_string(*h.from));
  } else {
    out.raw("null");
  }
  out.raw(",\"to\":");
  out.string(to_string(h.to));
  out.raw(",\"actor\":");
  out.string(h.actor);
  out.raw(",\"reason\":");
  out.string(h.reason);
  out.raw(",\"details\":");
  out.any(h.details);
  if (!h.event.empty()) {
    out.raw(",\"event\":");
    out.string(h.event);
  }
  if (!h.event_id.empty()) {
    out.raw(",\"event_id\":");
    out.string(h.event_id);
  }
  out.raw("}");
}

template <typename T, typename WriteItem>
void write_array(JsonWriter& out, const std::vector<T>& items, WriteItem write_item) {
  out.raw("[");
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) {
      out.raw(",");
    }
    write_item(out, items[i]);
  }
  out.raw("]");
}

// Identity and state first, so that `head -c` of the file shows what matters; the free-form
// driver fields last.
void write_record(JsonWriter& out, const SandboxRecord& r) {
  out.raw("{\"id\":");
  out.string(r.id);
  out.raw(",\"name\":");
  out.string(r.name);
  out.raw(",\"state\":");
  out.string(to_string(r.state));
  out.raw(",\"driver\":");
  out.string(r.driver);
  out.raw(",\"profile\":{\"name\":");
  out.string(r.profile.name);
  out.raw(",\"path\":");
  out.string(r.profile.path);
  out.raw(",\"hash\":");
  out.string(r.profile.hash);
  out.raw("},\"backend_id\":");
  out.string(r.backend_id);
  out.raw(",\"created_at\":");
  out.time(r.created_at);
  out.raw(",\"expires_at\":");
  out.optional_time(r.expires_at);
  out.raw(",\"max_expires_at\":");
  out.optional_time(r.max_expires_at);
  out.raw(",\"labels\":");
  out.string_map(r.labels);
  out.raw(",\"env\":");
  out.string_map(r.env);
  out.raw(",\"secret_refs\":");
  out.any(r.secret_refs);
  out.raw(",\"owner\":{\"user\":");
  out.string(r.owner.user);
  out.raw(",\"host\":");
  out.string(r.owner.host);
  out.raw(",\"pid\":");
  out.integer(r.owner.pid);
  out.raw(",\"ci\":");
  out.string_map(r.owner.ci);
  out.raw("},\"idempotency_key\":");
  out.optional_string(r.idempotency_key);
  out.raw(",\"restored_from\":");
  out.optional_string(r.restored_from);
  out.raw(",\"error\":");
  out.optional_string(r.error);
  out.raw(",\"snapshots\":");
  write_array(out, r.snapshots, write_snapshot);
  out.raw(",\"history\":");
  write_array(out, r.history, write_history_entry);
  out.raw(",\"spec\":");
  out.any(r.spec);
  out.raw(",\"info\":");
  out.any(r.info);
  out.raw("}");
}

// ---------------------------------------------------------------------------------------------
// Files

std::string errno_text() {
  return std::strerror(errno);
}

// The bytes of the ledger file. A large one is mapped rather than copied: a fresh process then
// pays neither the copy nor the zeroing of megabytes of new pages, which on some VMs costs more
// than parsing them. Mapping is safe because writers replace the ledger by rename and never change
// a file in place.
class FileText {
public:
  FileText() = default;
  ~FileText() {
    if (m_map) {
      ::munmap(m_map, m_map_size);
    }
  }
  FileText(const FileText&) = delete;
  FileText& operator=(const FileText&) = delete;

  std::string_view view() const {
    return m_map ? std::string_view(static_cast<const char*>(m_map), m_map_size) : m_copy;
  }

  // False when the file does not exist; throws LedgerError when it cannot be read.
  bool load(const std::filesystem::path& path) {
    FileDescriptor fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (fd.get() < 0) {
      if (errno == ENOENT) {
        return false;
      }
      throw LedgerError(fmt::format("cannot read ledger {}: {}; check that it belongs to you and "
                                    "is readable (its mode should be 0600)",
                                    path.string(), errno_text()));
    }
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0) {
      throw failure(path);
    }
    const auto size = static_cast<size_t>(st.st_size);
    if (S_ISREG(st.st_mode) && size >= k_map_threshold) {
      void* map = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd.get(), 0);
      if (map != MAP_FAILED) {
        m_map = map;
        m_map_size = size;
        return true;
      }
    }
    read_all(fd.get(), size, path);
    return true;
  }

private:
  static constexpr size_t k_map_threshold = 1 << 20;

  static LedgerError failure(const std::filesystem::path& path) {
    return LedgerError(fmt::format("cannot read ledger {}: {}", path.string(), errno_text()));
  }

  // One read() for the whole file in the common case; the loop covers short reads and a file that
  // grew meanwhile (a hand edit).
  void read_all(int fd, size_t expected, const std::filesystem::path& path) {
    m_copy.resize(expected + 1);
    size_t used = 0;
    while (true) {
      if (used == m_copy.size()) {
        m_copy.resize(m_copy.size() * 2);
      }
      const ssize_t got = ::read(fd, m_copy.data() + used, m_copy.size() - used);
      if (got < 0) {
        if (errno == EINTR) {
          continue;
        }
        throw failure(path);
      }
      if (got == 0) {
        break;
      }
      used += static_cast<size_t>(got);
    }
    m_copy.resize(used);
  }

  void* m_map = nullptr;
  size_t m_map_size = 0;
  std::string m_copy;
};

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

// The value of schema_version. A newer one is refused as newer, not as corrupt, so that the
// message says to upgrade rather than to restore a backup.
void check_schema_version(JsonReader& in, const std::filesystem::path& file) {
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

// Where the records of a document go as they are read.
using RecordSink = std::function<void(SandboxRecord&)>;

void read_sandboxes(JsonReader& in, const std::filesystem::path& file, ReadScope scope,
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
    sink(record);
  });
}

// The document's fields outside "sandboxes".
struct Header {
  std::string ledger_id;
  std::uint64_t event_seq = 0;
};

// Reads the document, handing each record to `sink` in file order; returns the other fields.
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
        check_schema_version(in, file);
        has_version = true;
      } else if (key == "ledger_id") {
        read_string(in, header.ledger_id, key);
      } else if (key == "event_seq") {
        header.event_seq = static_cast<std::uint64_t>(
            read_integer(in, "event_seq", 0, INT64_MAX, "a non-negative integer"));
      } else if (key == "sandboxes") {
        // Readers disagree on which of two copies counts (jq: the last); refuse to guess.
        if (has_sandboxes) {
          throw ShapeError{"sandboxes", "appears twice"};
        }
        has_sandboxes = true;
        if (has_version) {
          read_sandboxes(in, file, scope, sink);
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
    require(has_version, "schema_version");
    require(has_sandboxes, "sandboxes");
    if (deferred) {
      JsonReader records(text.substr(deferred->first, deferred->second), deferred->first);
      read_sandboxes(records, file, scope, sink);
    }
  } catch (const SyntaxError& e) {
    throw LedgerError(corrupt_message(
        file, fmt::format("invalid JSON at byte offset {}: {}", e.offset, e.message)));
  } catch (const ShapeError& e) {
    throw LedgerError(corrupt_message(file, e.describe()));
  }
  return header;
}

LedgerData parse_document(std::string_view text, const std::filesystem::path& file,
                          ReadScope scope) {
  LedgerData data;
  // No record our writer makes is shorter than this, so the vector never grows (and moves every
  // record) while reading; the excess is address space that is never touched.
  constexpr size_t k_shortest_record = 400;
  data.sandboxes.reserve(text.size() / k_shortest_record + 1);
  Header header = parse_document(text, file, scope, [&](SandboxRecord& record) {
    data.sandboxes.push_back(std::move(record));
  });
  data.ledger_id = std::move(header.ledger_id);
  data.event_seq = header.event_seq;
  return data;
}

// Writes the document through `flush`, in chunks of about `chunk` bytes: the memory a commit
// touches stays the same whatever the size of the ledger.
template <typename Flush>
void serialize(const LedgerData& data, size_t chunk, std::string& buffer, Flush flush) {
  buffer.clear();
  buffer.reserve(chunk + chunk / 4);
  JsonWriter out(buffer);
  out.raw("{\"schema_version\":");
  out.integer(LedgerData::k_schema_version);
  out.raw(",\"ledger_id\":");
  out.string(data.ledger_id);
  if (data.event_seq > 0) {
    out.raw(",\"event_seq\":");
    out.integer(data.event_seq);
  }
  out.raw(",\"sandboxes\":[");
  for (size_t i = 0; i < data.sandboxes.size(); ++i) {
    if (i > 0) {
      out.raw(",");
    }
    write_record(out, data.sandboxes[i]);
    if (buffer.size() >= chunk) {
      flush(buffer);
      buffer.clear();
    }
  }
  out.raw("]}\n");
  flush(buffer);
}

[[noreturn]] void write_failed(const char* step, const std::filesystem::path& path,
                               const std::filesystem::path& file) {
  throw LedgerError(fmt::format("cannot write ledger: {} {}: {}; {} was not changed", step,
                                path.string(), errno_text(), file.string()));
}

void write_all(int fd, const std::string& text, const std::filesystem::path& path,
               const std::filesystem::path& file) {
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0) {
      if (errno == EINTR) {
        continue;
      }
      write_failed("write", path, file);
    }
    done += static_cast<size_t>(n);
  }
}

// Under the lock no other writer is active, so any temporary file in the directory was left by a
// writer that crashed; removing them keeps the state directory from filling up.
void remove_stale_temporaries(const std::filesystem::path& dir) {
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

void fsync_directory(const std::filesystem::path& dir, const std::filesystem::path& file) {
  FileDescriptor fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.get() < 0 || ::fsync(fd.get()) != 0) {
    // The rename has happened: the new ledger is in place but maybe not yet durable.
    throw LedgerError(fmt::format("cannot sync directory {}: {}; {} was written but may not "
                                  "survive a power failure",
                                  dir.string(), errno_text(), file.string()));
  }
}

} // namespace

// ---------------------------------------------------------------------------------------------
// States

const char* to_string(State state) {
  const auto index = static_cast<size_t>(state);
  return index < k_state_names.size() ? k_state_names[index].data() : "unknown";
}

std::optional<State> state_from_string(std::string_view text) {
  for (size_t i = 0; i < k_state_names.size(); ++i) {
    if (k_state_names[i] == text) {
      return static_cast<State>(i);
    }
  }
  return std::nullopt;
}

bool is_transitional(State state) {
  return state == State::creating || state == State::snapshotting || state == State::destroying ||
         state == State::expired;
}

bool is_live(State state) {
  return state != State::destroyed && state != State::failed;
}

// ---------------------------------------------------------------------------------------------
// Records

void SandboxRecord::transition(State to, TimePoint time, std::string actor, std::string reason,
                               nlohmann::json details) {
  HistoryEntry entry;
  entry.time = time;
  entry.from = history.empty() ? std::nullopt : std::optional(state);
  entry.to = to;
  entry.actor = std::move(actor);
  entry.reason = std::move(reason);
  entry.details = std::move(details);
  history.push_back(std::move(entry));
  state = to;
}

void write_json(std::string& out, const SandboxRecord& r) {
  JsonWriter writer(out);
  write_record(writer, r);
}

// Both conversions go through the ledger's own writer and reader, so that the field list exists
// once per direction and a value converts exactly as the file stores it.
void to_json(nlohmann::json& j, const SandboxRecord& r) {
  std::string text;
  write_json(text, r);
  j = json::parse(text);
}

void from_json(const nlohmann::json& j, SandboxRecord& r) {
  r = SandboxRecord();
  const std::string text = j.dump(-1, ' ', false, json::error_handler_t::replace);
  try {
    JsonReader in(text);
    read_record(in, r, ReadScope::whole);
    in.finish();
  } catch (const ShapeError& e) {
    std::string label = r.id;
    if (label.empty() && j.is_object()) {
      if (auto it = j.find("id"); it != j.end() && it->is_string()) {
        label = it->get<std::string>();
      }
    }
    throw LedgerError(fmt::format("sandbox record {}: {}", label.empty() ? "without an id" : label,
                                  e.describe()));
  } catch (const SyntaxError& e) {
    throw LedgerError(
        fmt::format("sandbox record: invalid JSON at byte offset {}: {}", e.offset, e.message));
  }
}

SandboxRecord* LedgerData::find(const std::string& id_or_name) {
  return const_cast<SandboxRecord*>(std::as_const(*this).find(id_or_name));
}

const SandboxRecord* LedgerData::find(const std::string& id_or_name) const {
  for (const auto& record : sandboxes) {
    if (record.id == id_or_name) {
      return &record;
    }
  }
  // Names are reused once a sandbox is gone: a name answers with its live record, else with the
  // newest record that bore it, so `history NAME` and a second `destroy NAME` still reach it.
  const SandboxRecord* newest = nullptr;
  for (const auto& record : sandboxes) {
    if (record.name != id_or_name) {
      continue;
    }
    if (is_live(record.state)) {
      return &record;
    }
    if (!newest || record.created_at >= newest->created_at) {
      newest = &record;
    }
  }
  return newest;
}

std::string new_sandbox_id() {
  return new_id("sbx-");
}
std::string new_snapshot_id() {
  return new_id("snp-");
}

// ---------------------------------------------------------------------------------------------
// Ledger

Ledger::Ledger(std::filesystem::path state_dir, Seconds lock_timeout)
    : m_state_dir(std::move(state_dir)),
      m_lock(m_state_dir / "ledger.lock", lock_timeout,
             fmt::format("ledger {}", (m_state_dir / k_file_name).string())) {}

LedgerData Ledger::read(ReadScope scope) const {
  const auto path = file();
  FileText text;
  if (!text.load(path)) {
    return LedgerData();
  }
  return parse_document(text.view(), path, scope);
}

void Ledger::scan(ReadScope scope, const std::function<void(SandboxRecord&)>& visit) const {
  const auto path = file();
  FileText text;
  if (text.load(path)) {
    parse_document(text.view(), path, scope, visit);
  }
}

Ledger::Transaction::Transaction(const Ledger& ledger, LockFile::Guard guard, LedgerData data)
    : m_ledger(&ledger), m_guard(std::move(guard)), m_data(std::move(data)) {}

void Ledger::Transaction::commit() {
  // The id is minted on the first commit, so that merely reading never creates a ledger.
  if (m_data.ledger_id.empty()) {
    m_data.ledger_id = new_ledger_id();
  }
  m_ledger->write(m_data);
}

namespace {

// Another user who can write the state directory can swap the ledger, the lock file or the
// outbox's files under root's feet, or plant symlinks there: no write is safe in it. Refused,
// not warned about: cron's output is rarely read.
void refuse_shared_state_dir(const std::filesystem::path& dir) {
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

} // namespace

Ledger::Transaction Ledger::begin() const {
  std::error_code ec;
  // Only a directory created here is narrowed to 0700: an existing one was chosen by the user.
  if (std::filesystem::create_directories(m_state_dir, ec)) {
    if (::chmod(m_state_dir.c_str(), 0700) != 0) {
      throw LedgerError(fmt::format("cannot set the mode of state directory {}: {}",
                                    m_state_dir.string(), errno_text()));
    }
  } else if (ec) {
    throw LedgerError(fmt::format("cannot create state directory {}: {}; choose another with "
                                  "--state-dir or $SANDBOXER_STATE_DIR",
                                  m_state_dir.string(), ec.message()));
  }
  refuse_shared_state_dir(m_state_dir);
  auto guard = m_lock.acquire();
  // Reading under the lock also means that a corrupt ledger throws here, before anyone can
  // commit over it.
  auto data = read();
  return Transaction(*this, std::move(guard), std::move(data));
}

std::string Ledger::ensure_id() const {
  if (auto data = read(); !data.ledger_id.empty()) {
    return data.ledger_id;
  }
  auto transaction = begin();
  if (transaction.data().ledger_id.empty()) {
    transaction.commit();
  }
  return transaction.data().ledger_id;
}

void Ledger::write(const LedgerData& data) const {
  const auto target = file();
  const auto pid = std::to_string(::getpid());
  const auto temp = m_state_dir / (std::string(k_temp_prefix) + pid);
  const auto backup = m_state_dir / k_backup_name;
  const auto backup_temp = m_state_dir / (std::string(k_backup_temp_prefix) + pid);

  remove_stale_temporaries(m_state_dir);
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
    serialize(data, k_write_chunk, buffer,
              [&](const std::string& text) { write_all(fd.get(), text, temp, target); });
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
  fsync_directory(m_state_dir, target);
}

} // namespace sandboxer
