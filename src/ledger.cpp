#include <sandboxer/error.hpp>
#include <sandboxer/ledger.hpp>

#include <array>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <string_view>
#include <sys/random.h>
#include <sys/stat.h>
#include <type_traits>
#include <unistd.h>
#include <utility>

#include <fmt/format.h>

namespace sandboxer {

using json = nlohmann::json;

namespace {

constexpr std::array<std::string_view, 8> k_state_names = {
    "creating", "running", "snapshotting", "destroying",
    "destroyed", "failed", "expired", "orphaned",
};

constexpr std::string_view k_file_name = "ledger.json";
constexpr std::string_view k_backup_name = "ledger.json.bak";
// Temporary names carry the pid so that a crashed writer's leftovers are recognisable.
constexpr std::string_view k_temp_prefix = ".ledger.json.tmp.";
constexpr std::string_view k_backup_temp_prefix = "ledger.json.bak.tmp.";

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

std::string new_ledger_id() { return new_id("ldg-"); }

// ---------------------------------------------------------------------------------------------
// Reading records
//
// The readers are templates over `J` = json (the ledger's own parsed document, whose strings and
// sub-documents are moved out instead of copied) or const json (the public from_json). They throw
// ShapeError naming the field; the callers add which record and which file.

struct ShapeError {
  std::string field; // "owner.pid", "history[2].to"; empty for the value itself
  std::string problem;

  std::string describe() const {
    return field.empty() ? problem : fmt::format("field \"{}\" {}", field, problem);
  }
  // Adds the enclosing field: "2" + "to" -> "history[2].to".
  void nest(std::string_view outer) {
    field = field.empty() ? std::string(outer) : fmt::format("{}.{}", outer, field);
  }
};

const char* type_phrase(const json& value) {
  switch (value.type()) {
  case json::value_t::null:
    return "null";
  case json::value_t::object:
    return "an object";
  case json::value_t::array:
    return "an array";
  case json::value_t::string:
    return "a string";
  case json::value_t::boolean:
    return "a boolean";
  case json::value_t::number_integer:
  case json::value_t::number_unsigned:
    return "an integer";
  case json::value_t::number_float:
    return "a number";
  case json::value_t::binary:
  case json::value_t::discarded:
    break;
  }
  return "an unsupported value";
}

[[noreturn]] void wrong_type(const json& value, std::string_view field, std::string_view expected) {
  throw ShapeError{std::string(field), fmt::format("is {}, expected {}", type_phrase(value), expected)};
}

template <typename J> constexpr bool k_movable = !std::is_const_v<J>;

template <typename J>
using ObjectRef = std::conditional_t<k_movable<J>, json::object_t&, const json::object_t&>;
template <typename J>
using ArrayRef = std::conditional_t<k_movable<J>, json::array_t&, const json::array_t&>;

template <typename J> std::string take_string(J& value, std::string_view field) {
  if (!value.is_string()) {
    wrong_type(value, field, "a string");
  }
  if constexpr (k_movable<J>) {
    return std::move(*value.template get_ptr<std::string*>());
  } else {
    return *value.template get_ptr<const std::string*>();
  }
}

template <typename J>
std::optional<std::string> take_optional_string(J& value, std::string_view field) {
  if (value.is_null()) {
    return std::nullopt;
  }
  if (!value.is_string()) {
    wrong_type(value, field, "a string or null");
  }
  return take_string(value, field);
}

// Any JSON value: spec, info, secret_refs and details belong to drivers and callers, and the
// reader must accept whatever the writer can write.
template <typename J> json take_json(J& value) {
  if constexpr (k_movable<J>) {
    return std::move(value);
  } else {
    return value;
  }
}

template <typename J> ObjectRef<J> object_of(J& value, std::string_view field) {
  if (!value.is_object()) {
    wrong_type(value, field, "an object");
  }
  return *value.template get_ptr<std::add_pointer_t<ObjectRef<J>>>();
}

template <typename J> ArrayRef<J> array_of(J& value, std::string_view field) {
  if (!value.is_array()) {
    wrong_type(value, field, "an array");
  }
  return *value.template get_ptr<std::add_pointer_t<ArrayRef<J>>>();
}

TimePoint read_time(const json& value, std::string_view field) {
  const auto* text = value.get_ptr<const std::string*>();
  if (!text) {
    wrong_type(value, field, "an RFC 3339 time string");
  }
  const auto t = parse_time(*text);
  if (!t) {
    throw ShapeError{std::string(field),
                     fmt::format("is \"{}\", expected an RFC 3339 time such as "
                                 "\"2026-12-02T11:51:32Z\"",
                                 *text)};
  }
  return *t;
}

std::optional<TimePoint> read_optional_time(const json& value, std::string_view field) {
  if (value.is_null()) {
    return std::nullopt;
  }
  return read_time(value, field);
}

State read_state(const json& value, std::string_view field) {
  const auto* text = value.get_ptr<const std::string*>();
  if (!text) {
    wrong_type(value, field, "a state name");
  }
  const auto state = state_from_string(*text);
  if (!state) {
    throw ShapeError{std::string(field),
                     fmt::format("is \"{}\", expected one of creating, running, snapshotting, "
                                 "destroying, destroyed, failed, expired, orphaned",
                                 *text)};
  }
  return *state;
}

template <typename J>
std::map<std::string, std::string> take_string_map(J& value, std::string_view field) {
  std::map<std::string, std::string> result;
  for (auto& [key, item] : object_of(value, field)) {
    if (!item.is_string()) {
      wrong_type(item, fmt::format("{}.{}", field, key), "a string");
    }
    // Keys arrive sorted, so each insertion goes at the end in constant time.
    result.emplace_hint(result.end(), key, take_string(item, key));
  }
  return result;
}

int read_int(const json& value, std::string_view field) {
  if (!value.is_number_integer()) {
    wrong_type(value, field, "an integer");
  }
  const bool fits = value.is_number_unsigned()
                        ? value.get<std::uint64_t>() <= INT32_MAX
                        : value.get<std::int64_t>() >= INT32_MIN && value.get<std::int64_t>() <= INT32_MAX;
  if (!fits) {
    throw ShapeError{std::string(field), fmt::format("is {}, out of range", value.dump())};
  }
  return value.get<int>();
}

template <typename J> ProfileRef take_profile(J& value) {
  ProfileRef profile;
  for (auto& [key, item] : object_of(value, "")) {
    if (key == "name") {
      profile.name = take_string(item, key);
    } else if (key == "path") {
      profile.path = take_string(item, key);
    } else if (key == "hash") {
      profile.hash = take_string(item, key);
    }
  }
  return profile;
}

// Runs `take` on the value of `field`, naming `field` as the parent of whatever it rejects.
template <typename Take> auto nested(std::string_view field, Take take) {
  try {
    return take();
  } catch (ShapeError& e) {
    e.nest(field);
    throw;
  }
}

template <typename J> Owner take_owner(J& value) {
  Owner owner;
  for (auto& [key, item] : object_of(value, "")) {
    if (key == "user") {
      owner.user = take_string(item, key);
    } else if (key == "host") {
      owner.host = take_string(item, key);
    } else if (key == "pid") {
      owner.pid = read_int(item, key);
    } else if (key == "ci") {
      owner.ci = take_string_map(item, key);
    }
  }
  return owner;
}

template <typename J> SnapshotRecord take_snapshot(J& value) {
  SnapshotRecord snapshot;
  bool has_id = false;
  bool has_created_at = false;
  for (auto& [key, item] : object_of(value, "")) {
    if (key == "id") {
      snapshot.id = take_string(item, key);
      has_id = true;
    } else if (key == "name") {
      snapshot.name = take_string(item, key);
    } else if (key == "backend_ref") {
      snapshot.backend_ref = take_string(item, key);
    } else if (key == "size_bytes") {
      if (item.is_number_unsigned()) {
        snapshot.size_bytes = item.template get<std::uint64_t>();
      } else if (!item.is_null()) {
        wrong_type(item, key, "a non-negative integer or null");
      }
    } else if (key == "created_at") {
      snapshot.created_at = read_time(item, key);
      has_created_at = true;
    }
  }
  if (!has_id) {
    throw ShapeError{"id", "is missing"};
  }
  if (!has_created_at) {
    throw ShapeError{"created_at", "is missing"};
  }
  return snapshot;
}

template <typename J> HistoryEntry take_history_entry(J& value) {
  HistoryEntry entry;
  bool has_time = false;
  bool has_to = false;
  for (auto& [key, item] : object_of(value, "")) {
    if (key == "time") {
      entry.time = read_time(item, key);
      has_time = true;
    } else if (key == "from") {
      entry.from = item.is_null() ? std::nullopt : std::optional(read_state(item, key));
    } else if (key == "to") {
      entry.to = read_state(item, key);
      has_to = true;
    } else if (key == "actor") {
      entry.actor = take_string(item, key);
    } else if (key == "reason") {
      entry.reason = take_string(item, key);
    } else if (key == "details") {
      entry.details = take_json(item);
    }
  }
  if (!has_time) {
    throw ShapeError{"time", "is missing"};
  }
  if (!has_to) {
    throw ShapeError{"to", "is missing"};
  }
  return entry;
}

// Reads every element of the array `value` with `take`, naming the index on failure.
template <typename T, typename J, typename Take>
std::vector<T> take_array(J& value, std::string_view field, Take take) {
  auto& items = array_of(value, field);
  std::vector<T> result;
  result.reserve(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    try {
      result.push_back(take(items[i]));
    } catch (ShapeError& e) {
      e.nest(fmt::format("{}[{}]", field, i));
      throw;
    }
  }
  return result;
}

// The fields every record must have; the others default when absent.
enum Required : unsigned {
  k_has_id = 1,
  k_has_name = 2,
  k_has_driver = 4,
  k_has_state = 8,
  k_has_created_at = 16,
};

// One pass over the record's keys (no lookup per field). Unknown keys are ignored: see
// docs/ledger-format.md for why that is safe within one schema version.
template <typename J> void read_record(J& value, SandboxRecord& r) {
  unsigned seen = 0;
  for (auto& [key, item] : object_of(value, "")) {
    const std::string_view k = key;
    if (k == "id") {
      r.id = take_string(item, k);
      seen |= k_has_id;
    } else if (k == "name") {
      r.name = take_string(item, k);
      seen |= k_has_name;
    } else if (k == "profile") {
      r.profile = nested(k, [&] { return take_profile(item); });
    } else if (k == "driver") {
      r.driver = take_string(item, k);
      seen |= k_has_driver;
    } else if (k == "spec") {
      r.spec = take_json(item);
    } else if (k == "backend_id") {
      r.backend_id = take_string(item, k);
    } else if (k == "info") {
      r.info = take_json(item);
    } else if (k == "state") {
      r.state = read_state(item, k);
      seen |= k_has_state;
    } else if (k == "created_at") {
      r.created_at = read_time(item, k);
      seen |= k_has_created_at;
    } else if (k == "expires_at") {
      r.expires_at = read_optional_time(item, k);
    } else if (k == "max_expires_at") {
      r.max_expires_at = read_optional_time(item, k);
    } else if (k == "labels") {
      r.labels = take_string_map(item, k);
    } else if (k == "env") {
      r.env = take_string_map(item, k);
    } else if (k == "secret_refs") {
      r.secret_refs = take_json(item);
    } else if (k == "owner") {
      r.owner = nested(k, [&] { return take_owner(item); });
    } else if (k == "snapshots") {
      r.snapshots = take_array<SnapshotRecord>(item, k, [](auto& v) { return take_snapshot(v); });
    } else if (k == "history") {
      r.history = take_array<HistoryEntry>(item, k, [](auto& v) { return take_history_entry(v); });
    } else if (k == "idempotency_key") {
      r.idempotency_key = take_optional_string(item, k);
    } else if (k == "restored_from") {
      r.restored_from = take_optional_string(item, k);
    } else if (k == "error") {
      r.error = take_optional_string(item, k);
    }
  }
  static constexpr std::pair<unsigned, const char*> k_required[] = {
      {k_has_id, "id"},       {k_has_name, "name"},         {k_has_driver, "driver"},
      {k_has_state, "state"}, {k_has_created_at, "created_at"},
  };
  for (const auto& [bit, name] : k_required) {
    if (!(seen & bit)) {
      throw ShapeError{name, "is missing"};
    }
  }
}

// How an error message names a record: its id when it has one. `r` is consulted first because
// the id may already have been moved out of `value`.
std::string record_label(const json& value, const SandboxRecord& r) {
  if (!r.id.empty()) {
    return r.id;
  }
  if (value.is_object()) {
    if (auto it = value.find("id"); it != value.end() && it->is_string()) {
      return it->template get<std::string>();
    }
  }
  return "without an id";
}

// ---------------------------------------------------------------------------------------------
// Writing records

json time_json(const std::optional<TimePoint>& t) {
  return t ? json(format_time(*t)) : json(nullptr);
}

json string_json(const std::optional<std::string>& text) { return text ? json(*text) : json(nullptr); }

json state_json(const std::optional<State>& state) {
  return state ? json(to_string(*state)) : json(nullptr);
}

json snapshot_json(const SnapshotRecord& s) {
  json j(json::value_t::object);
  auto& o = *j.get_ptr<json::object_t*>();
  o.emplace("backend_ref", s.backend_ref);
  o.emplace("created_at", format_time(s.created_at));
  o.emplace("id", s.id);
  o.emplace("name", s.name);
  o.emplace("size_bytes", s.size_bytes ? json(*s.size_bytes) : json(nullptr));
  return j;
}

json history_json(const HistoryEntry& h) {
  json j(json::value_t::object);
  auto& o = *j.get_ptr<json::object_t*>();
  o.emplace("actor", h.actor);
  o.emplace("details", h.details);
  o.emplace("from", state_json(h.from));
  o.emplace("reason", h.reason);
  o.emplace("time", format_time(h.time));
  o.emplace("to", to_string(h.to));
  return j;
}

json owner_json(const Owner& owner) {
  json j(json::value_t::object);
  auto& o = *j.get_ptr<json::object_t*>();
  o.emplace("ci", owner.ci);
  o.emplace("host", owner.host);
  o.emplace("pid", owner.pid);
  o.emplace("user", owner.user);
  return j;
}

template <typename T, typename ToJson> json array_json(const std::vector<T>& items, ToJson to) {
  json j(json::value_t::array);
  auto& a = *j.get_ptr<json::array_t*>();
  a.reserve(items.size());
  for (const auto& item : items) {
    a.push_back(to(item));
  }
  return j;
}

// ---------------------------------------------------------------------------------------------
// Files

std::string errno_text() { return std::strerror(errno); }

// Closes the descriptor unless release() handed it on, so that no error path leaks it.
class FileDescriptor {
public:
  explicit FileDescriptor(int fd = -1) : m_fd(fd) {}
  ~FileDescriptor() {
    if (m_fd >= 0) {
      ::close(m_fd);
    }
  }
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  int get() const { return m_fd; }
  int release() { return std::exchange(m_fd, -1); }

private:
  int m_fd;
};

// The whole file, or nullopt when it does not exist.
std::optional<std::string> read_whole_file(const std::filesystem::path& path) {
  FileDescriptor fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) {
    if (errno == ENOENT) {
      return std::nullopt;
    }
    throw LedgerError(fmt::format("cannot read ledger {}: {}; check that it belongs to you and is "
                                  "readable (its mode should be 0600)",
                                  path.string(), errno_text()));
  }
  auto fail = [&] {
    return LedgerError(fmt::format("cannot read ledger {}: {}", path.string(), errno_text()));
  };
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) {
    throw fail();
  }
  std::string text;
  // One read for the whole file in the common case; the loop covers a file that grew (it cannot,
  // since writers rename, but a hand edit might) and short reads.
  text.resize(static_cast<size_t>(st.st_size) + 1);
  size_t used = 0;
  while (true) {
    if (used == text.size()) {
      text.resize(text.size() * 2 + 4096);
    }
    const ssize_t got = ::read(fd.get(), text.data() + used, text.size() - used);
    if (got < 0) {
      if (errno == EINTR) {
        continue;
      }
      throw fail();
    }
    if (got == 0) {
      break;
    }
    used += static_cast<size_t>(got);
  }
  text.resize(used);
  return text;
}

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
                           "move it aside to start an empty ledger (its sandboxes can then be "
                           "found with: sandboxer reap --orphans --dry-run)",
                           backup.string());
  }
  return message;
}

// "[json.exception.parse_error.101] parse error at line 1, column 7: syntax error ..." ->
// "invalid JSON at byte 6 (line 1, column 7): syntax error ...".
std::string parse_error_detail(const json::exception& e, std::optional<size_t> byte) {
  std::string_view text = e.what();
  if (auto end = text.find("] "); text.starts_with("[json.exception.") && end != text.npos) {
    text.remove_prefix(end + 2);
  }
  if (text.starts_with("parse error ")) {
    text.remove_prefix(std::string_view("parse error ").size());
  }
  std::string where;
  if (text.starts_with("at ")) {
    const auto colon = text.find(": ");
    where = std::string(text.substr(3, colon == text.npos ? text.npos : colon - 3));
    text = colon == text.npos ? std::string_view() : text.substr(colon + 2);
  }
  if (byte) {
    return where.empty() ? fmt::format("invalid JSON at byte {}: {}", *byte, text)
                         : fmt::format("invalid JSON at byte {} ({}): {}", *byte, where, text);
  }
  return fmt::format("invalid JSON: {}", text);
}

LedgerData parse_document(const std::string& text, const std::filesystem::path& file) {
  json doc;
  try {
    doc = json::parse(text);
  } catch (const json::parse_error& e) {
    throw LedgerError(corrupt_message(file, parse_error_detail(e, e.byte)));
  } catch (const json::exception& e) {
    throw LedgerError(corrupt_message(file, parse_error_detail(e, std::nullopt)));
  }
  if (!doc.is_object()) {
    throw LedgerError(corrupt_message(file, fmt::format("the document is {}, expected an object",
                                                        type_phrase(doc))));
  }
  auto& top = *doc.get_ptr<json::object_t*>();

  // The version comes first, so that a newer layout is refused as newer, not as corrupt.
  const auto version = top.find("schema_version");
  if (version == top.end()) {
    throw LedgerError(corrupt_message(file, "it has no schema_version"));
  }
  if (!version->second.is_number_integer()) {
    throw LedgerError(corrupt_message(
        file, fmt::format("schema_version is {}, expected an integer", type_phrase(version->second))));
  }
  // Unsigned when non-negative, as nlohmann reads it; a version beyond int64 is newer too.
  const bool newer = version->second.is_number_unsigned() &&
                     version->second.get<std::uint64_t>() > LedgerData::k_schema_version;
  if (newer) {
    throw LedgerError(fmt::format("ledger {} has schema_version {}, newer than this sandboxer "
                                  "understands ({}); upgrade sandboxer",
                                  file.string(), version->second.dump(),
                                  LedgerData::k_schema_version));
  }
  if (version->second.get<std::int64_t>() < 1) {
    throw LedgerError(corrupt_message(
        file, fmt::format("schema_version {} is not a valid version", version->second.dump())));
  }

  LedgerData data;
  if (auto id = top.find("ledger_id"); id != top.end()) {
    if (!id->second.is_string()) {
      throw LedgerError(corrupt_message(
          file, fmt::format("ledger_id is {}, expected a string", type_phrase(id->second))));
    }
    data.ledger_id = std::move(*id->second.get_ptr<std::string*>());
  }
  const auto sandboxes = top.find("sandboxes");
  if (sandboxes == top.end()) {
    throw LedgerError(corrupt_message(file, "it has no sandboxes array"));
  }
  if (!sandboxes->second.is_array()) {
    throw LedgerError(corrupt_message(
        file, fmt::format("sandboxes is {}, expected an array", type_phrase(sandboxes->second))));
  }
  auto& records = *sandboxes->second.get_ptr<json::array_t*>();
  data.sandboxes.resize(records.size());
  for (size_t i = 0; i < records.size(); ++i) {
    try {
      read_record(records[i], data.sandboxes[i]);
    } catch (const ShapeError& e) {
      throw LedgerError(corrupt_message(
          file, fmt::format("sandboxes[{}] ({}): {}", i, record_label(records[i], data.sandboxes[i]),
                            e.describe())));
    }
  }
  return data;
}

std::string serialize(const LedgerData& data) {
  json doc(json::value_t::object);
  auto& top = *doc.get_ptr<json::object_t*>();
  top.emplace("ledger_id", data.ledger_id);
  auto& records = *top.emplace("sandboxes", json::value_t::array).first->second.get_ptr<json::array_t*>();
  records.reserve(data.sandboxes.size());
  for (const auto& record : data.sandboxes) {
    records.emplace_back(record);
  }
  top.emplace("schema_version", LedgerData::k_schema_version);
  // Compact: a ledger of 100k records is read by every command. Invalid UTF-8 (a backend's error
  // text, say) is replaced rather than refused, so that recording a failure cannot fail.
  std::string text = doc.dump(-1, ' ', false, json::error_handler_t::replace);
  text += '\n';
  return text;
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

// Under the lock no other writer is active, so any temporary file left in the directory belongs
// to a writer that crashed; removing them keeps the state directory from filling up.
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
  return state == State::creating || state == State::snapshotting ||
         state == State::destroying || state == State::expired;
}

bool is_live(State state) { return state != State::destroyed && state != State::failed; }

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

void to_json(nlohmann::json& j, const SandboxRecord& r) {
  j = json(json::value_t::object);
  auto& o = *j.get_ptr<json::object_t*>();
  // In key order, which is the order std::map keeps them in anyway.
  o.emplace("backend_id", r.backend_id);
  o.emplace("created_at", format_time(r.created_at));
  o.emplace("driver", r.driver);
  o.emplace("env", r.env);
  o.emplace("error", string_json(r.error));
  o.emplace("expires_at", time_json(r.expires_at));
  o.emplace("history", array_json(r.history, history_json));
  o.emplace("id", r.id);
  o.emplace("idempotency_key", string_json(r.idempotency_key));
  o.emplace("info", r.info);
  o.emplace("labels", r.labels);
  o.emplace("max_expires_at", time_json(r.max_expires_at));
  o.emplace("name", r.name);
  o.emplace("owner", owner_json(r.owner));
  o.emplace("profile", json::object_t{{"hash", r.profile.hash},
                                      {"name", r.profile.name},
                                      {"path", r.profile.path}});
  o.emplace("restored_from", string_json(r.restored_from));
  o.emplace("secret_refs", r.secret_refs);
  o.emplace("snapshots", array_json(r.snapshots, snapshot_json));
  o.emplace("spec", r.spec);
  o.emplace("state", to_string(r.state));
}

void from_json(const nlohmann::json& j, SandboxRecord& r) {
  r = SandboxRecord();
  try {
    read_record(j, r);
  } catch (const ShapeError& e) {
    throw LedgerError(fmt::format("sandbox record {}: {}", record_label(j, r), e.describe()));
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
  // Names are reused once a sandbox is gone, so only a live record answers to its name.
  for (const auto& record : sandboxes) {
    if (record.name == id_or_name && is_live(record.state)) {
      return &record;
    }
  }
  return nullptr;
}

std::string new_sandbox_id() { return new_id("sbx-"); }
std::string new_snapshot_id() { return new_id("snp-"); }

// ---------------------------------------------------------------------------------------------
// Ledger

Ledger::Ledger(std::filesystem::path state_dir, Seconds lock_timeout)
    : m_state_dir(std::move(state_dir)),
      m_lock(m_state_dir / "ledger.lock", lock_timeout,
             fmt::format("ledger {}", (m_state_dir / k_file_name).string())) {}

LedgerData Ledger::read() const {
  const auto path = file();
  auto text = read_whole_file(path);
  if (!text) {
    return LedgerData();
  }
  return parse_document(*text, path);
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
  auto guard = m_lock.acquire();
  // Reading under the lock also means a corrupt ledger throws here, before anyone can commit
  // over it.
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
  const std::string text = serialize(data);
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
    write_all(fd.get(), text, temp, target);
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
