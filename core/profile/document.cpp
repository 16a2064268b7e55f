// YAML text -> Document: the only yaml-cpp user in sandboxer (internal.hpp).
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

#include "core/errors.hpp"
#include "core/names.hpp"
#include "core/owner.hpp"
#include "core/profile/internal.hpp"
#include "core/profile/profile.hpp"
#include "core/sha256.hpp"
#include "sdk/json/utf8.hpp"

namespace sandboxer::profile_internal {

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

bool is_empty_document(const fs::path& file) {
  try {
    return YAML::Load(read_text(file)).IsNull();
  } catch (const YAML::Exception&) {
    return false; // parse_document() says where
  }
}

} // namespace sandboxer::profile_internal
