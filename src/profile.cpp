// Profiles: the only yaml-cpp user in sandboxer. A file becomes a Document (JSON plus the origin of
// every JSON pointer) as soon as it is parsed, so merging, checking and error locations all work
// on JSON and nothing YAML-shaped leaves this file.

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <memory>
#include <yaml-cpp/yaml.h>

#include <sandboxer/error.hpp>
#include <sandboxer/names.hpp>
#include <sandboxer/owner.hpp>
#include <sandboxer/profile.hpp>
#include <sandboxer/sha256.hpp>

#include "src/json/utf8.hpp"

namespace sandboxer {
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

const std::vector<std::string> k_common_keys = {"name",   "description", "extends", "driver",
                                                "ttl",    "labels",      "env",     "secrets",
                                                "events", "snapshots"};

// The drivers of the design, whether or not this build has them: a section named after one of
// them that is not the profile's driver is a mistake, not an unknown key.
const std::vector<std::string> k_driver_names = {"docker", "compose-ssh", "vm-packer",
                                                 "e2b",    "modal",       "stub"};

const std::vector<std::string> k_sink_types = {"jsonl", "http", "stderr", "fd", "exec"};

// A profile without any `ttl` still gets a deadline, so a forgotten sandbox is reaped.
constexpr Seconds k_default_ttl{3600};

// Where one value of a document was written and, for a scalar, its text after expansion (so that
// `PYTHON_VERSION: 3.10` stays "3.10" in `env` instead of going through a double).
struct NodeInfo {
  // What Profile::locations exports: the value itself for a scalar (a driver's "invalid latency"
  // points at the latency), the key for a map or list (where the block starts).
  std::string location;
  // The key of a map entry, or the item of a list: where "unknown key" errors point.
  std::string entry_location;
  std::optional<std::string> text;
};

using InfoMap = std::map<std::string, NodeInfo>;

// One parsed (or merged) profile document.
struct Document {
  json value = json::object();
  InfoMap info;
};

[[noreturn]] void fail(const std::string& where, const std::string& message) {
  throw ProfileError(where + ": " + message);
}

std::string location(const fs::path& file, const YAML::Mark& mark) {
  if (mark.is_null()) {
    return file.string() + ":1:1";
  }
  return fmt::format("{}:{}:{}", file.string(), mark.line + 1, mark.column + 1);
}

// Profiles become JSON (the ledger stores the resolved profile): text that is not UTF-8 (raw
// bytes, or an escape such as "\udc00" that yaml-cpp turns into a lone surrogate) is refused
// where it is, instead of failing later as an internal error. Found by fuzz/fuzz_profile.
void require_utf8(const std::string& text, const std::string& where) {
  const auto* bytes = reinterpret_cast<const unsigned char*>(text.data());
  for (size_t i = 0; i < text.size();) {
    if (bytes[i] < 0x80) {
      ++i;
      continue;
    }
    const size_t length = json_text::utf8_sequence_length(bytes + i, text.size() - i);
    if (length == 0) {
      fail(where, fmt::format("text is not valid UTF-8 (byte 0x{:02x} at offset {} of the value)",
                              bytes[i], i));
    }
    i += length;
  }
}

// A JSON pointer reference token: "~" and "/" are escaped as RFC 6901 says.
std::string escape_token(const std::string& key) {
  std::string token;
  for (char c : key) {
    if (c == '~') {
      token += "~0";
    } else if (c == '/') {
      token += "~1";
    } else {
      token += c;
    }
  }
  return token;
}

bool is_variable_name(std::string_view name) {
  if (name.empty() || (name[0] >= '0' && name[0] <= '9')) {
    return false;
  }
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
  });
}

bool contains(const std::vector<std::string>& list, const std::string& word) {
  return std::find(list.begin(), list.end(), word) != list.end();
}

// ", did you mean "x"?" when a candidate is close, else " (<what>: a, b, c)".
std::string suggestion(const std::string& word, const std::vector<std::string>& candidates,
                       const std::string& what) {
  if (auto guess = closest_match(word, candidates)) {
    return fmt::format(", did you mean \"{}\"?", *guess);
  }
  return fmt::format(" ({}: {})", what, fmt::join(candidates, ", "));
}

// Expands ${VAR} and ${VAR:-default} (the default also applies when VAR is empty, as in the
// shell); `$${` is a literal "${". `where` is the scalar's location, for errors.
std::string expand_variables(const std::string& text, const std::string& where) {
  std::string out;
  for (size_t i = 0; i < text.size();) {
    if (text.compare(i, 3, "$${") == 0) {
      out += "${";
      i += 3;
      continue;
    }
    if (text.compare(i, 2, "${") != 0) {
      out += text[i++];
      continue;
    }
    size_t close = text.find('}', i + 2);
    if (close == std::string::npos) {
      fail(where,
           fmt::format("unterminated \"${{\" in \"{}\" (write $${{ for a literal \"${{\")", text));
    }
    std::string body = text.substr(i + 2, close - i - 2);
    size_t separator = body.find(":-");
    std::string name = body.substr(0, separator);
    if (!is_variable_name(name)) {
      fail(where, fmt::format("invalid variable name \"{}\" in \"{}\"", name, text));
    }
    const char* value = std::getenv(name.c_str());
    if (separator == std::string::npos) {
      if (value == nullptr) {
        fail(where, fmt::format("undefined variable \"{}\" (set it or write ${{{}:-default}})",
                                name, name));
      }
      out += value;
    } else {
      out += (value != nullptr && *value != '\0') ? std::string(value) : body.substr(separator + 2);
    }
    i = close + 1;
  }
  return out;
}

bool is_integer_syntax(std::string_view text) {
  if (!text.empty() && (text[0] == '+' || text[0] == '-')) {
    text.remove_prefix(1);
  }
  return !text.empty() &&
         std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
}

std::optional<json> integer_of(const std::string& text) {
  std::string_view digits = text;
  if (!digits.empty() && digits[0] == '+') {
    digits.remove_prefix(1);
  }
  std::int64_t value = 0;
  auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (digits.empty() || error != std::errc() || end != digits.data() + digits.size()) {
    return std::nullopt;
  }
  return json(value);
}

// YAML 1.2 core-schema floats, without .inf and .nan (JSON cannot carry them).
std::optional<json> float_of(const std::string& text) {
  size_t i = (!text.empty() && (text[0] == '+' || text[0] == '-')) ? 1 : 0;
  size_t digits = 0;
  bool dot = false;
  bool exponent = false;
  for (; i < text.size(); ++i) {
    char c = text[i];
    if (c >= '0' && c <= '9') {
      ++digits;
    } else if (c == '.' && !dot && !exponent) {
      dot = true;
    } else if ((c == 'e' || c == 'E') && !exponent && digits > 0) {
      exponent = true;
      if (i + 1 < text.size() && (text[i + 1] == '+' || text[i + 1] == '-')) {
        ++i;
      }
      if (i + 1 >= text.size()) {
        return std::nullopt;
      }
    } else {
      return std::nullopt;
    }
  }
  if (digits == 0) {
    return std::nullopt;
  }
  double value = std::strtod(text.c_str(), nullptr);
  if (!std::isfinite(value)) {
    return std::nullopt;
  }
  return json(value);
}

// The JSON value of a plain (unquoted) scalar. `expanded` is true when a ${VAR} produced part of
// the text: such a value may still be a number or a bool, but never null, so `FOO: ${BAR:-}`
// gives FOO an empty string rather than removing it.
json typed_scalar(const std::string& text, bool expanded) {
  if (text == "true" || text == "True" || text == "TRUE") {
    return true;
  }
  if (text == "false" || text == "False" || text == "FALSE") {
    return false;
  }
  if (!expanded &&
      (text.empty() || text == "~" || text == "null" || text == "Null" || text == "NULL")) {
    return nullptr;
  }
  if (auto number = integer_of(text)) {
    return *number;
  }
  // An integer too large for int64 stays text rather than losing digits in a double.
  if (is_integer_syntax(text)) {
    return text;
  }
  if (auto number = float_of(text)) {
    return *number;
  }
  return text;
}

// Turns a parsed YAML tree into a Document, expanding variables in every scalar value.
class Converter {
public:
  Converter(const fs::path& file, Document& doc) : m_file(file), m_doc(doc) {}

  // Converts `node`, found at `pointer`, whose entry starts at `where`.
  json convert(const YAML::Node& node, const std::string& pointer, const std::string& where) {
    guard(node, where);
    if (!pointer.empty()) {
      m_doc.info[pointer].location = where;
      m_doc.info[pointer].entry_location = where;
    }
    switch (node.Type()) {
    case YAML::NodeType::Scalar:
      return convert_scalar(node, pointer);
    case YAML::NodeType::Sequence: {
      Descent descent(*this, node);
      return convert_sequence(node, pointer);
    }
    case YAML::NodeType::Map: {
      Descent descent(*this, node);
      return convert_map(node, pointer);
    }
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined:
      break;
    }
    return nullptr;
  }

  // Aliases make the parsed tree a graph: `a: &a [*a]` is a cycle (a walk never ends), and nine
  // nested aliases of nine items (a 400-byte "billion laughs") expand to 10^9 nodes. A profile
  // is a few dozen nodes; these bounds leave room for very large ones.
  static constexpr size_t k_max_depth = 64;
  static constexpr size_t k_max_nodes = 50000;

private:
  // The containers being converted, outermost first: a node met again on this path is a cycle.
  class Descent {
  public:
    Descent(Converter& converter, const YAML::Node& node) : m_converter(converter) {
      m_converter.m_path.push_back(node);
    }
    ~Descent() { m_converter.m_path.pop_back(); }
    Descent(const Descent&) = delete;
    Descent& operator=(const Descent&) = delete;

  private:
    Converter& m_converter;
  };

  void guard(const YAML::Node& node, const std::string& where) {
    if (++m_nodes > k_max_nodes) {
      fail(where, fmt::format("the profile expands to more than {} values (aliases repeated "
                              "inside aliases?); write it out plainly",
                              k_max_nodes));
    }
    if (m_path.size() >= k_max_depth) {
      fail(where, fmt::format("nested more than {} levels deep", k_max_depth));
    }
    if (node.IsSequence() || node.IsMap()) {
      for (const auto& open : m_path) {
        if (open.is(node)) {
          fail(where, "an alias refers to a list or map that contains it (a cycle); a profile "
                      "must be a tree");
        }
      }
    }
  }

  json convert_scalar(const YAML::Node& node, const std::string& pointer) {
    const std::string& raw = node.Scalar();
    std::string where = location(m_file, node.Mark());
    require_utf8(raw, where);
    std::string text = expand_variables(raw, where);
    if (!pointer.empty()) {
      m_doc.info[pointer].location = where;
      m_doc.info[pointer].text = text;
    }
    // "?" is yaml-cpp's tag for a plain scalar; quoted ones ("!") and explicit tags stay text.
    if (node.Tag() != "?") {
      return text;
    }
    return typed_scalar(text, text != raw);
  }

  json convert_sequence(const YAML::Node& node, const std::string& pointer) {
    json array = json::array();
    for (const auto& item : node) {
      std::string item_pointer = pointer + "/" + std::to_string(array.size());
      array.push_back(convert(item, item_pointer, location(m_file, item.Mark())));
    }
    return array;
  }

  json convert_map(const YAML::Node& node, const std::string& pointer) {
    json object = json::object();
    for (const auto& entry : node) {
      const YAML::Node& key = entry.first;
      std::string where = location(m_file, key.Mark());
      if (!key.IsScalar()) {
        fail(where, "keys must be plain words, not maps or lists");
      }
      const std::string& name = key.Scalar();
      require_utf8(name, where);
      // yaml-cpp keeps both entries of a repeated key; a silent "last one wins" hides typos.
      if (object.contains(name)) {
        fail(where, fmt::format("duplicate key \"{}\"", name));
      }
      object[name] = convert(entry.second, pointer + "/" + escape_token(name), where);
    }
    return object;
  }

  const fs::path& m_file;
  Document& m_doc;
  std::vector<YAML::Node> m_path;
  size_t m_nodes = 0;
};

std::string read_text(const fs::path& file) {
  errno = 0;
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> stream(std::fopen(file.c_str(), "rb"),
                                                         &std::fclose);
  if (!stream) {
    fail(file.string(), fmt::format("cannot read profile: {}", std::strerror(errno)));
  }
  std::string text;
  char buffer[8192];
  size_t count = 0;
  while ((count = std::fread(buffer, 1, sizeof buffer, stream.get())) > 0) {
    text.append(buffer, count);
  }
  if (std::ferror(stream.get())) {
    fail(file.string(), fmt::format("cannot read profile: {}", std::strerror(errno)));
  }
  return text;
}

Document parse_document(const fs::path& file) {
  std::string text = read_text(file);
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    fail(location(file, e.mark), "invalid YAML: " + e.msg);
  }
  if (!root.IsMap()) {
    fail(location(file, root.Mark()), "the top level must be a map of keys (driver:, ttl:, ...)");
  }
  Document doc;
  doc.value = Converter(file, doc).convert(root, "", location(file, root.Mark()));
  return doc;
}

// Removes `pointer` and everything below it from `info`.
void erase_subtree(InfoMap& info, const std::string& pointer) {
  info.erase(pointer);
  std::string prefix = pointer + "/";
  for (auto it = info.lower_bound(prefix); it != info.end() && it->first.starts_with(prefix);) {
    it = info.erase(it);
  }
}

void copy_subtree(const InfoMap& from, InfoMap& to, const std::string& pointer) {
  if (auto it = from.find(pointer); it != from.end()) {
    to[pointer] = it->second;
  }
  std::string prefix = pointer + "/";
  for (auto it = from.lower_bound(prefix); it != from.end() && it->first.starts_with(prefix);
       ++it) {
    to[it->first] = it->second;
  }
}

// A secret reference is replaced as a whole: merging {env: A} with {file: F} would make a
// reference with both, which is never what the child meant.
bool replaced_whole(const std::string& pointer) {
  constexpr std::string_view k_secrets = "/secrets/";
  return pointer.starts_with(k_secrets) && pointer.find('/', k_secrets.size()) == std::string::npos;
}

// Lays `child` (at `pointer`) over `base`: maps merge key by key, the child winning; lists and
// scalars replace. Origins follow the values.
void overlay(json& base, InfoMap& base_info, const json& child, const InfoMap& child_info,
             const std::string& pointer) {
  if (base.is_object() && child.is_object() && !replaced_whole(pointer)) {
    if (auto it = child_info.find(pointer); it != child_info.end()) {
      base_info[pointer] = it->second;
    }
    for (const auto& [key, value] : child.items()) {
      std::string child_pointer = pointer + "/" + escape_token(key);
      if (base.contains(key)) {
        overlay(base[key], base_info, value, child_info, child_pointer);
      } else {
        base[key] = value;
        copy_subtree(child_info, base_info, child_pointer);
      }
    }
    return;
  }
  base = child;
  erase_subtree(base_info, pointer);
  copy_subtree(child_info, base_info, pointer);
}

bool looks_like_path(const std::string& text) {
  return text.find('/') != std::string::npos || text.ends_with(".yaml") || text.ends_with(".yml");
}

bool is_file(const fs::path& path) {
  std::error_code ignored;
  return fs::is_regular_file(path, ignored);
}

bool same_file(const fs::path& a, const fs::path& b) {
  std::error_code ignored;
  return fs::equivalent(a, b, ignored);
}

// <dir>/<name>.yaml or .yml in the first directory of `dirs` that has one, skipping `self`.
std::optional<fs::path> find_in(const std::string& name, const std::vector<fs::path>& dirs,
                                const std::optional<fs::path>& self) {
  for (const auto& dir : dirs) {
    for (const char* extension : {".yaml", ".yml"}) {
      fs::path candidate = dir / (name + extension);
      if (is_file(candidate) && !(self && same_file(candidate, *self))) {
        return candidate;
      }
    }
  }
  return std::nullopt;
}

std::string not_found_message(const std::string& name, const std::vector<fs::path>& dirs) {
  std::vector<std::string> shown;
  for (const auto& dir : dirs) {
    shown.push_back(dir.empty() ? "." : dir.string());
  }
  std::string message =
      fmt::format("profile \"{}\" not found; looked in: {}", name, fmt::join(shown, ", "));
  std::vector<std::string> names;
  for (const auto& entry : list_profiles(dirs)) {
    names.push_back(entry.first);
  }
  if (auto guess = closest_match(name, names)) {
    message += fmt::format("; did you mean \"{}\"?", *guess);
  }
  return message;
}

// The file an `extends: value` in `file` names. A name never resolves to `file` itself, so that
// ~/.config/sandboxer/profiles/ci.yaml can extend the ci.yaml of /etc/sandboxer/profiles.
fs::path resolve_extends(const std::string& value, const fs::path& file,
                         const std::vector<fs::path>& search, const std::string& where) {
  fs::path dir = file.parent_path();
  if (looks_like_path(value)) {
    fs::path target =
        fs::path(value).is_absolute() ? fs::path(value) : (dir / value).lexically_normal();
    if (!is_file(target)) {
      fail(where, fmt::format("extends: profile file {} not found", target.string()));
    }
    return target;
  }
  std::vector<fs::path> dirs = {dir};
  dirs.insert(dirs.end(), search.begin(), search.end());
  if (auto found = find_in(value, dirs, file)) {
    return *found;
  }
  fail(where, "extends: " + not_found_message(value, dirs));
}

fs::path identity_of(const fs::path& file) {
  std::error_code ignored;
  fs::path canonical = fs::weakly_canonical(file, ignored);
  return canonical.empty() ? fs::absolute(file, ignored) : canonical;
}

struct Loaded {
  Document doc;
  std::vector<fs::path> chain;
};

// Loads `file` and, recursively, what it extends. `stack` holds the files being loaded, for
// cycle detection.
Loaded load_chain(const fs::path& file, const std::vector<fs::path>& search,
                  std::vector<fs::path>& stack) {
  Loaded loaded{parse_document(file), {}};
  auto extends = loaded.doc.value.find("extends");
  if (extends == loaded.doc.value.end() || extends->is_null()) {
    return loaded;
  }
  std::string where = loaded.doc.info["/extends"].location;
  if (!extends->is_string() || extends->get<std::string>().empty()) {
    fail(where, "extends: expected a profile name or path");
  }
  fs::path parent = resolve_extends(extends->get<std::string>(), file, search, where);
  stack.push_back(file);
  fs::path parent_identity = identity_of(parent);
  for (size_t i = 0; i < stack.size(); ++i) {
    if (identity_of(stack[i]) == parent_identity) {
      std::vector<std::string> cycle;
      for (size_t j = i; j < stack.size(); ++j) {
        cycle.push_back(stack[j].string());
      }
      cycle.push_back(parent.string());
      fail(where, fmt::format("extends cycle: {}", fmt::join(cycle, " -> ")));
    }
  }
  Loaded base = load_chain(parent, search, stack);
  stack.pop_back();
  // A profile's own name and parent are not inherited.
  for (const char* key : {"name", "extends"}) {
    base.doc.value.erase(key);
    erase_subtree(base.doc.info, std::string("/") + key);
  }
  overlay(base.doc.value, base.doc.info, loaded.doc.value, loaded.doc.info, "");
  loaded.doc = std::move(base.doc);
  loaded.chain = {parent};
  loaded.chain.insert(loaded.chain.end(), base.chain.begin(), base.chain.end());
  return loaded;
}

std::string expand_home(const std::string& path) {
  const auto home_dir = home_directory();
  if (!home_dir || path.empty() || path[0] != '~') {
    return path;
  }
  const std::string home = home_dir->string();
  if (path.size() == 1) {
    return home;
  }
  if (path[1] == '/') {
    return home + path.substr(1);
  }
  return path; // ~user is not ours to resolve
}

// Checks the common fields of a merged document and fills a Profile from it.
class Checker {
public:
  Checker(const fs::path& file, Document& doc) : m_file(file), m_doc(doc), m_root(doc.value) {}

  Config config() const { return config_of_file(); }

  Profile run(std::vector<fs::path> chain) {
    Profile profile;
    profile.path = m_file;
    profile.chain = std::move(chain);
    check_top_level_keys();
    profile.driver = driver();
    check_sections(profile.driver);
    profile.name = name();
    check_description();
    profile.ttl = ttl();
    profile.snapshots_keep = snapshots_keep();
    profile.labels = string_map("labels", &Checker::check_label_key);
    profile.env = string_map("env", &Checker::check_env_key);
    profile.secrets = secrets();
    profile.events = events();
    profile.driver_spec = driver_spec(profile.driver);
    profile.resolved = resolved(profile);
    profile.hash = "sha256:" + sha256_hex(profile.resolved.dump());
    for (const auto& [pointer, info] : m_doc.info) {
      profile.locations[pointer] = info.location;
    }
    return profile;
  }

private:
  // The location of `pointer` (its value, or with `key` its key), or of its nearest ancestor
  // that has one.
  std::string where(std::string pointer, bool key = false) const {
    while (!pointer.empty()) {
      if (auto it = m_doc.info.find(pointer); it != m_doc.info.end()) {
        return key ? it->second.entry_location : it->second.location;
      }
      pointer.resize(pointer.rfind('/'));
    }
    return m_file.string() + ":1:1";
  }

  // An error about the value at `pointer`.
  [[noreturn]] void fail_at(const std::string& pointer, const std::string& message) const {
    fail(where(pointer), message);
  }

  // An error about the key at `pointer` (unknown, reserved, misplaced).
  [[noreturn]] void fail_at_key(const std::string& pointer, const std::string& message) const {
    fail(where(pointer, true), message);
  }

  // The text of a scalar value as written (after expansion); nullopt for null, maps and lists.
  std::optional<std::string> text_of(const json& value, const std::string& pointer) const {
    if (value.is_string()) {
      return value.get<std::string>();
    }
    if (value.is_null() || value.is_structured()) {
      return std::nullopt;
    }
    if (auto it = m_doc.info.find(pointer); it != m_doc.info.end() && it->second.text) {
      return it->second.text;
    }
    return value.dump();
  }

  const json* find(const std::string& key) const {
    auto it = m_root.find(key);
    return it == m_root.end() || it->is_null() ? nullptr : &*it;
  }

  void check_keys(const json& map, const std::vector<std::string>& allowed,
                  const std::string& pointer, const std::string& field) const {
    for (const auto& [key, value] : map.items()) {
      if (!contains(allowed, key)) {
        fail_at_key(pointer + "/" + escape_token(key),
                    fmt::format("{}: unknown key \"{}\"{}", field, key,
                                suggestion(key, allowed, "known keys")));
      }
    }
  }

  void check_top_level_keys() const {
    std::vector<std::string> allowed = k_common_keys;
    const json* driver = find("driver");
    if (driver != nullptr && driver->is_string()) {
      allowed.push_back(driver->get<std::string>());
    }
    for (const auto& [key, value] : m_root.items()) {
      if (!contains(allowed, key) && !contains(k_driver_names, key)) {
        fail_at_key("/" + escape_token(key), fmt::format("unknown key \"{}\"{}", key,
                                                         suggestion(key, allowed, "known keys")));
      }
    }
  }

  std::string driver() const {
    const json* driver = find("driver");
    if (driver == nullptr) {
      fail(m_file.string() + ":1:1",
           "no driver: set \"driver:\" in this profile or in a profile it extends");
    }
    if (!driver->is_string() || driver->get<std::string>().empty()) {
      fail_at("/driver",
              fmt::format("driver: expected a driver name ({})", fmt::join(k_driver_names, ", ")));
    }
    return driver->get<std::string>();
  }

  // A null section (`docker: ~`) is how a child that switches driver drops its parent's section.
  void check_sections(const std::string& driver) const {
    for (const auto& [key, value] : m_root.items()) {
      if (key != driver && contains(k_driver_names, key) && !value.is_null()) {
        fail_at_key("/" + escape_token(key),
                    fmt::format("section \"{}\" does not match driver \"{}\"", key, driver));
      }
    }
  }

  std::string name() const {
    const json* name = find("name");
    if (name == nullptr) {
      return m_file.stem().string();
    }
    auto text = text_of(*name, "/name");
    if (!text || text->empty()) {
      fail_at("/name", "name: expected a non-empty name");
    }
    return *text;
  }

  void check_description() const {
    const json* description = find("description");
    if (description != nullptr && !text_of(*description, "/description")) {
      fail_at("/description", "description: expected text");
    }
  }

  Seconds duration_at(const std::string& pointer, const std::string& field) const {
    const json& value = m_root.at(json::json_pointer(pointer));
    std::string text = text_of(value, pointer).value_or(value.dump());
    auto duration = parse_duration(text);
    if (!duration) {
      fail_at(pointer,
              fmt::format("{}: invalid duration \"{}\" {}", field, text, duration_problem(text)));
    }
    return *duration;
  }

  TtlPolicy ttl() const {
    TtlPolicy policy;
    const json* ttl = find("ttl");
    if (ttl == nullptr) {
      policy.default_ttl = k_default_ttl;
    } else if (ttl->is_string() && ttl->get<std::string>() == "none") {
      policy.none = true;
    } else if (ttl->is_object()) {
      policy = ttl_map(*ttl);
    } else if (ttl->is_array()) {
      fail_at("/ttl", "ttl: expected none, a duration such as 30m, or {default: D, max: D}");
    } else {
      policy.default_ttl = ttl_at("/ttl", "ttl");
    }
    return policy;
  }

  // A lifetime: at least 1s, since a sandbox with a ttl of 0 is expired before it is made.
  Seconds ttl_at(const std::string& pointer, const std::string& field) const {
    Seconds ttl = duration_at(pointer, field);
    if (ttl < Seconds(1)) {
      fail_at(pointer, fmt::format("{}: a sandbox must live at least 1s", field));
    }
    return ttl;
  }

  std::optional<int> snapshots_keep() const {
    const json* snapshots = find("snapshots");
    if (snapshots == nullptr) {
      return std::nullopt;
    }
    if (!snapshots->is_object()) {
      fail_at("/snapshots", "snapshots: expected a map such as {keep: 5}");
    }
    check_keys(*snapshots, {"keep"}, "/snapshots", "snapshots");
    if (!snapshots->contains("keep") || (*snapshots)["keep"].is_null()) {
      return std::nullopt;
    }
    const json& keep = (*snapshots)["keep"];
    if (!keep.is_number_integer() || keep.get<long>() < 1 || keep.get<long>() > 10000) {
      fail_at("/snapshots/keep", "snapshots.keep: expected a whole number from 1 to 10000 (how "
                                 "many of a sandbox's newest snapshots to keep)");
    }
    return keep.get<int>();
  }

  TtlPolicy ttl_map(const json& ttl) const {
    check_keys(ttl, {"default", "max"}, "/ttl", "ttl");
    TtlPolicy policy;
    if (ttl.contains("max") && !ttl["max"].is_null()) {
      policy.max_ttl = ttl_at("/ttl/max", "ttl.max");
    }
    if (ttl.contains("default") && !ttl["default"].is_null()) {
      policy.default_ttl = ttl_at("/ttl/default", "ttl.default");
    } else {
      // Only a cap given: the usual default, unless the cap is shorter.
      policy.default_ttl =
          policy.max_ttl ? std::min(k_default_ttl, *policy.max_ttl) : k_default_ttl;
    }
    if (policy.max_ttl && *policy.default_ttl > *policy.max_ttl) {
      fail_at("/ttl/default",
              fmt::format("ttl.default {} is longer than ttl.max {}",
                          format_duration(*policy.default_ttl), format_duration(*policy.max_ttl)));
    }
    return policy;
  }

  void check_label_key(const std::string& key, const std::string& pointer) const {
    if (auto problem = label_key_problem(key)) {
      fail_at_key(pointer,
                  fmt::format("labels: invalid label key \"{}\" ({})", printable(key), *problem));
    }
    if (key.starts_with("sandboxer.")) {
      fail_at_key(pointer, fmt::format("labels.{}: the \"sandboxer.\" prefix is reserved for the "
                                       "labels sandboxer sets itself",
                                       key));
    }
  }

  void check_env_key(const std::string& key, const std::string& pointer) const {
    if (!is_variable_name(key)) {
      fail_at_key(pointer, fmt::format("env: invalid variable name \"{}\" (use letters, digits and "
                                       "\"_\", not starting with a digit)",
                                       key));
    }
    if (key == "SANDBOXER_ID") {
      fail_at_key(pointer, "env.SANDBOXER_ID: reserved: sandboxer sets it to the sandbox's id");
    }
  }

  // `labels` or `env`: a map of text to text. A null value removes what a parent set.
  std::map<std::string, std::string>
  string_map(const std::string& field,
             void (Checker::*check_key)(const std::string&, const std::string&) const) const {
    std::map<std::string, std::string> result;
    const json* map = find(field);
    if (map == nullptr) {
      return result;
    }
    if (!map->is_object()) {
      fail_at("/" + field, fmt::format("{}: expected a map of name: value", field));
    }
    for (const auto& [key, value] : map->items()) {
      std::string pointer = "/" + field + "/" + escape_token(key);
      (this->*check_key)(key, pointer);
      if (value.is_null()) {
        continue;
      }
      auto text = text_of(value, pointer);
      if (!text) {
        fail_at(pointer, fmt::format("{}.{}: expected a text value, not a {}", field, key,
                                     value.is_object() ? "map" : "list"));
      }
      if (field == "labels") {
        if (auto problem = label_value_problem(*text)) {
          fail_at(pointer, fmt::format("labels.{}: invalid value: {}", key, *problem));
        }
      }
      result[key] = *text;
    }
    return result;
  }

  // `field` names it in errors: "secrets.NAME", "events[0].token".
  SecretRef secret_ref(const std::string& field, const json& ref,
                       const std::string& pointer) const {
    if (!ref.is_object()) {
      fail_at(pointer, field + ": secrets are references only: write {env: VAR} or {file: PATH}");
    }
    check_keys(ref, {"env", "file"}, pointer, field);
    if (ref.size() != 1) {
      fail_at(pointer, field + ": write exactly one of {env: VAR} or {file: PATH}");
    }
    SecretRef result;
    result.kind = ref.contains("env") ? SecretRef::Kind::env : SecretRef::Kind::file;
    std::string key = result.kind == SecretRef::Kind::env ? "env" : "file";
    auto text = text_of(ref[key], pointer + "/" + key);
    if (result.kind == SecretRef::Kind::env && !(text && is_variable_name(*text))) {
      fail_at(pointer + "/env", field + ".env: expected an environment variable name");
    }
    if (result.kind == SecretRef::Kind::file && !(text && !text->empty())) {
      fail_at(pointer + "/file", field + ".file: expected a file path");
    }
    result.source = result.kind == SecretRef::Kind::file ? expand_home(*text) : *text;
    return result;
  }

  std::map<std::string, SecretRef> secrets() const {
    std::map<std::string, SecretRef> result;
    const json* secrets = find("secrets");
    if (secrets == nullptr) {
      return result;
    }
    if (!secrets->is_object()) {
      fail_at("/secrets", "secrets: expected a map of name: {env: VAR} or {file: PATH}");
    }
    for (const auto& [name, ref] : secrets->items()) {
      if (!ref.is_null()) {
        result[name] = secret_ref("secrets." + name, ref, "/secrets/" + escape_token(name));
      }
    }
    return result;
  }

  // The sinks of `events`, checked and normalized for the outbox: paths absolute with ~
  // expanded, durations as written, a token as a reference.
  json events() const {
    const json* events = find("events");
    if (events == nullptr) {
      return json::array();
    }
    if (!events->is_array()) {
      fail_at("/events", "events: expected a list of sinks, such as - {type: jsonl, path: FILE}");
    }
    json sinks = json::array();
    for (size_t i = 0; i < events->size(); ++i) {
      sinks.push_back(
          sink((*events)[i], "/events/" + std::to_string(i), fmt::format("events[{}]", i)));
    }
    return sinks;
  }

  json sink(const json& sink, const std::string& pointer, const std::string& field) const {
    if (!sink.is_object()) {
      fail_at(pointer, field + ": expected a map with a \"type\"");
    }
    if (!sink.contains("type")) {
      fail_at(pointer, fmt::format("{}: missing \"type\" (one of {})", field,
                                   fmt::join(k_sink_types, ", ")));
    }
    std::string type = text_of(sink["type"], pointer + "/type").value_or(sink["type"].dump());
    if (type == "stdout") {
      // `ID=$(sandboxer create -o json | jq -r .id)` must get the record alone.
      fail_at(pointer + "/type", field + ".type: stdout carries only the command's data; write "
                                         "events to stderr ({type: stderr}) or to a descriptor "
                                         "you open ({type: fd, fd: 3} with 3>FILE)");
    }
    if (!contains(k_sink_types, type)) {
      fail_at(pointer + "/type", fmt::format("{}.type: unknown sink type \"{}\"{}", field, type,
                                             suggestion(type, k_sink_types, "one of")));
    }
    static const std::map<std::string, std::vector<std::string>> k_keys = {
        {"jsonl", {"type", "path"}},
        {"http", {"type", "url", "headers", "token", "timeout", "retries"}},
        {"stderr", {"type"}},
        {"fd", {"type", "fd"}},
        {"exec", {"type", "command", "timeout"}}};
    check_keys(sink, k_keys.at(type), pointer, field);
    json out = {{"type", type}};
    auto required_text = [&](const char* key, const char* what) {
      auto text = sink.contains(key) ? text_of(sink[key], pointer + "/" + key) : std::nullopt;
      if (!text || text->empty()) {
        fail_at(sink.contains(key) ? pointer + "/" + key : pointer,
                fmt::format("{}: a {} sink needs \"{}\" ({})", field, type, key, what));
      }
      return *text;
    };
    if (type == "jsonl") {
      std::string path = expand_home(required_text("path", "the file to append events to"));
      if (!fs::path(path).is_absolute()) {
        fail_at(pointer + "/path", field + ".path: expected an absolute path (or ~/...), since "
                                           "commands run from any directory");
      }
      out["path"] = path;
    }
    if (type == "http") {
      std::string url = required_text("url", "where events are POSTed");
      if (!url.starts_with("http://") && !url.starts_with("https://")) {
        fail_at(pointer + "/url", field + ".url: expected an http:// or https:// URL");
      }
      out["url"] = url;
      if (sink.contains("headers")) {
        const json& headers = sink["headers"];
        if (!headers.is_object()) {
          fail_at(pointer + "/headers", field + ".headers: expected a map of header: value");
        }
        for (const auto& [name, value] : headers.items()) {
          auto text = text_of(value, pointer + "/headers/" + escape_token(name));
          std::string lower = name;
          std::transform(lower.begin(), lower.end(), lower.begin(), ::tolower);
          if (lower == "authorization") {
            fail_at_key(pointer + "/headers/" + escape_token(name),
                        field + ".headers: no Authorization header inline; use token: {env: VAR} "
                                "or {file: PATH}, which is sent as a bearer token");
          }
          if (!text) {
            fail_at(pointer + "/headers/" + escape_token(name),
                    fmt::format("{}.headers.{}: expected text", field, name));
          }
          out["headers"][name] = *text;
        }
      }
      if (sink.contains("token")) {
        SecretRef ref = secret_ref(field + ".token", sink["token"], pointer + "/token");
        out["token"] = {{ref.kind == SecretRef::Kind::env ? "env" : "file", ref.source}};
      }
      if (sink.contains("retries")) {
        const json& retries = sink["retries"];
        if (!retries.is_number_integer() || retries.get<long>() < 0 || retries.get<long>() > 100) {
          fail_at(pointer + "/retries", field + ".retries: expected a whole number from 0 to 100");
        }
        out["retries"] = retries;
      }
    }
    if (type == "fd") {
      const json* fd = sink.contains("fd") ? &sink["fd"] : nullptr;
      if (fd == nullptr || !fd->is_number_integer() || fd->get<long>() < 2 ||
          fd->get<long>() > 1023) {
        fail_at(fd ? pointer + "/fd" : pointer,
                field + ": an fd sink needs \"fd\": a descriptor number from 2 to 1023 (0 and 1 "
                        "are the command's stdin and stdout)");
      }
      out["fd"] = *fd;
    }
    if (type == "exec") {
      const json* command = sink.contains("command") ? &sink["command"] : nullptr;
      if (command == nullptr || !command->is_array() || command->empty()) {
        fail_at(command ? pointer + "/command" : pointer,
                field + ": an exec sink needs \"command\": a list such as [/usr/local/bin/hook, "
                        "--flag] (argv, no shell)");
      }
      for (size_t i = 0; i < command->size(); ++i) {
        auto text = text_of((*command)[i], fmt::format("{}/command/{}", pointer, i));
        if (!text || text->empty()) {
          fail_at(fmt::format("{}/command/{}", pointer, i),
                  fmt::format("{}.command[{}]: expected text", field, i));
        }
        out["command"].push_back(*text);
      }
    }
    if (sink.contains("timeout")) {
      std::string text = text_of(sink["timeout"], pointer + "/timeout").value_or("");
      auto parsed = parse_duration_ms(text);
      if (!parsed || parsed->count() <= 0) {
        fail_at(pointer + "/timeout", fmt::format("{}.timeout: invalid duration \"{}\" (use "
                                                  "500ms, 5s, 1m)",
                                                  field, text));
      }
      out["timeout"] = text;
    }
    return out;
  }

  // The global config file (config.yaml): `events`, `delivery.wait`, `expiring.window`.
  Config config_of_file() const {
    for (const auto& [key, value] : m_root.items()) {
      if (!contains({"events", "delivery", "expiring"}, key)) {
        fail_at_key("/" + escape_token(key),
                    fmt::format("unknown key \"{}\"{}", key,
                                suggestion(key, {"events", "delivery", "expiring"}, "known keys")));
      }
    }
    Config config;
    config.path = m_file;
    config.events = events();
    auto duration_in = [&](const char* section, const char* key) -> std::optional<json> {
      const json* map = find(section);
      if (map == nullptr) {
        return std::nullopt;
      }
      if (!map->is_object()) {
        fail_at(std::string("/") + section,
                fmt::format("{}: expected a map with \"{}\"", section, key));
      }
      check_keys(*map, {key}, std::string("/") + section, section);
      return map->contains(key) ? std::optional((*map)[key]) : std::nullopt;
    };
    if (auto wait = duration_in("delivery", "wait")) {
      std::string text = text_of(*wait, "/delivery/wait").value_or("");
      auto parsed = parse_duration_ms(text);
      if (!parsed) {
        fail_at("/delivery/wait", fmt::format("delivery.wait: invalid duration \"{}\" (use 500ms, "
                                              "2s)",
                                              text));
      }
      config.delivery_wait = *parsed;
    }
    if (duration_in("expiring", "window")) {
      config.expiring_window = duration_at("/expiring/window", "expiring.window");
    }
    return config;
  }

  json driver_spec(const std::string& driver) const {
    const json* section = find(driver);
    if (section == nullptr) {
      return json::object();
    }
    if (!section->is_object()) {
      fail_at("/" + escape_token(driver), fmt::format("section \"{}\" must be a map", driver));
    }
    return *section;
  }

  // The merged document in canonical form: what the hash covers and the ledger may keep.
  json resolved(const Profile& profile) const {
    json doc = json::object();
    for (const auto& [key, value] : m_root.items()) {
      if (!value.is_null() && key != "extends") {
        doc[key] = value;
      }
    }
    doc["name"] = profile.name;
    doc.erase("labels");
    doc.erase("env");
    doc.erase("secrets");
    if (!profile.labels.empty()) {
      doc["labels"] = profile.labels;
    }
    if (!profile.env.empty()) {
      doc["env"] = profile.env;
    }
    for (const auto& [name, ref] : profile.secrets) {
      doc["secrets"][name] = {{ref.kind == SecretRef::Kind::env ? "env" : "file", ref.source}};
    }
    return doc;
  }

  const fs::path& m_file;
  Document& m_doc;
  const json& m_root;
};

// Optimal string alignment distance (a swap of two neighbours costs 1), ignoring ASCII case.
size_t edit_distance(const std::string& a, const std::string& b) {
  auto lower = [](char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; };
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) {
    d[i][0] = i;
  }
  for (size_t j = 0; j <= b.size(); ++j) {
    d[0][j] = j;
  }
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t cost = lower(a[i - 1]) == lower(b[j - 1]) ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && lower(a[i - 1]) == lower(b[j - 2]) &&
          lower(a[i - 2]) == lower(b[j - 1])) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[a.size()][b.size()];
}

} // namespace

std::string Profile::location_of(const std::string& json_pointer) const {
  std::string pointer = json_pointer;
  while (true) {
    if (auto it = locations.find(pointer); it != locations.end()) {
      return it->second;
    }
    size_t slash = pointer.rfind('/');
    if (slash == std::string::npos) {
      break;
    }
    pointer.resize(slash);
  }
  return path.string();
}

std::vector<fs::path> profile_search_path(const std::optional<std::string>& cli_dir) {
  std::vector<fs::path> dirs;
  if (cli_dir && !cli_dir->empty()) {
    dirs.emplace_back(*cli_dir);
  }
  // $SANDBOXER_PROFILES may list several directories, separated by ':' like $PATH.
  if (const char* list = std::getenv("SANDBOXER_PROFILES"); list != nullptr) {
    std::string_view rest = list;
    while (!rest.empty()) {
      size_t colon = rest.find(':');
      std::string_view dir = rest.substr(0, colon);
      if (!dir.empty()) {
        dirs.emplace_back(dir);
      }
      rest = colon == std::string_view::npos ? std::string_view() : rest.substr(colon + 1);
    }
  }
  dirs.emplace_back("./profiles");
  const char* xdg = std::getenv("XDG_CONFIG_HOME");
  if (xdg != nullptr && *xdg != '\0') {
    dirs.push_back(fs::path(xdg) / "sandboxer" / "profiles");
  } else if (auto home = home_directory()) {
    dirs.push_back(*home / ".config" / "sandboxer" / "profiles");
  }
  dirs.emplace_back("/etc/sandboxer/profiles");
  // The profiles shipped with sandboxer, installed beside the binary (cmake --install: PREFIX/bin
  // and PREFIX/share/sandboxer/profiles), wherever the prefix is.
  std::error_code ec;
  if (auto exe = fs::read_symlink("/proc/self/exe", ec); !ec) {
    dirs.push_back(exe.parent_path().parent_path() / "share" / "sandboxer" / "profiles");
  }
  return dirs;
}

fs::path find_profile(const std::string& name_or_path, const std::vector<fs::path>& search) {
  if (looks_like_path(name_or_path)) {
    if (is_file(name_or_path)) {
      return name_or_path;
    }
    throw NotFoundError(fmt::format("profile file {} not found (a value with \"/\" or a .yaml/.yml "
                                    "ending is read as a path; give a bare name to search the "
                                    "profile directories)",
                                    name_or_path));
  }
  if (auto found = find_in(name_or_path, search, std::nullopt)) {
    return *found;
  }
  throw NotFoundError(not_found_message(name_or_path, search));
}

Config load_config(const fs::path& file) {
  // An empty file (or one of comments only) configures nothing, as no file does.
  try {
    if (YAML::Load(read_text(file)).IsNull()) {
      Config config;
      config.path = file;
      return config;
    }
  } catch (const YAML::Exception&) {
    // parse_document() says where.
  }
  Document doc = parse_document(file);
  return Checker(file, doc).config();
}

fs::path config_path() {
  if (const char* explicit_path = std::getenv("SANDBOXER_CONFIG");
      explicit_path && *explicit_path) {
    return explicit_path;
  }
  if (const char* xdg = std::getenv("XDG_CONFIG_HOME"); xdg && *xdg) {
    return fs::path(xdg) / "sandboxer" / "config.yaml";
  }
  auto home = home_directory();
  return home ? *home / ".config" / "sandboxer" / "config.yaml"
              : fs::path("/etc/sandboxer/config.yaml");
}

Profile load_profile(const fs::path& file, const std::vector<fs::path>& search) {
  std::vector<fs::path> stack;
  Loaded loaded = load_chain(file, search, stack);
  return Checker(file, loaded.doc).run(std::move(loaded.chain));
}

std::vector<std::pair<std::string, fs::path>> list_profiles(const std::vector<fs::path>& search) {
  std::map<std::string, fs::path> found;
  for (const auto& dir : search) {
    std::error_code error;
    std::vector<fs::path> files;
    for (fs::directory_iterator it(dir, error), end; !error && it != end; it.increment(error)) {
      std::string extension = it->path().extension().string();
      if ((extension == ".yaml" || extension == ".yml") && is_file(it->path())) {
        files.push_back(it->path());
      }
    }
    // Sorted, so that x.yaml wins over x.yml in one directory, as in find_profile.
    std::sort(files.begin(), files.end());
    for (const auto& path : files) {
      found.emplace(path.stem().string(), path);
    }
  }
  return {found.begin(), found.end()};
}

std::optional<std::string> closest_match(const std::string& word,
                                         const std::vector<std::string>& candidates) {
  size_t limit = std::max<size_t>(2, word.size() / 3);
  std::optional<std::string> best;
  size_t best_distance = limit + 1;
  for (const auto& candidate : candidates) {
    size_t distance = edit_distance(word, candidate);
    // A "match" that rewrites the whole word is no match ("ab" is not a typo of "e2b").
    if (distance < best_distance && distance < word.size() && distance < candidate.size()) {
      best = candidate;
      best_distance = distance;
    }
  }
  return best;
}

} // namespace sandboxer
