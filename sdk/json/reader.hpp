#pragma once

// A strict RFC 8259 reader (including UTF-8 validity) that walks the text without building a
// document: the caller reads each value straight into its own structs.

#include <charconv>
#include <cstdint>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "sdk/json/utf8.hpp"

namespace sandboxer::json_text {

using json = nlohmann::json;

// Deeper than any spec a driver writes; the bound keeps a hostile file from exhausting the stack.
constexpr int k_max_depth = 256;

// Invalid JSON text, at a byte offset of the whole document.
struct SyntaxError {
  size_t offset;
  std::string message;
};

class JsonReader {
public:
  enum class Kind { null, boolean, number, string, object, array };

  // `base` is the offset of `text` in the whole document, so that errors name absolute offsets.
  explicit JsonReader(std::string_view text, size_t base = 0)
      : m_begin(text.data()), m_p(text.data()), m_end(text.data() + text.size()), m_base(base) {}

  size_t offset() const { return m_base + static_cast<size_t>(m_p - m_begin); }
  size_t remaining() const { return static_cast<size_t>(m_end - m_p); }

  // A reader of the same text, positioned at an earlier `offset()` of this one.
  JsonReader rewound_to(size_t offset) const {
    JsonReader reader(*this);
    reader.m_p = m_begin + (offset - m_base);
    return reader;
  }

  // The kind of the next value, without consuming it.
  Kind peek() {
    skip_space();
    if (m_p == m_end) {
      fail("expected a value");
    }
    switch (*m_p) {
    case '{':
      return Kind::object;
    case '[':
      return Kind::array;
    case '"':
      return Kind::string;
    case 't':
      check_literal("true");
      return Kind::boolean;
    case 'f':
      check_literal("false");
      return Kind::boolean;
    case 'n':
      check_literal("null");
      return Kind::null;
    default:
      if (*m_p == '-' || is_digit(*m_p)) {
        return Kind::number;
      }
      fail(fmt::format("unexpected {}", describe_byte(*m_p)));
    }
  }

  // Consumes a null if that is what comes next.
  bool take_null() {
    if (peek() != Kind::null) {
      return false;
    }
    literal("null");
    return true;
  }

  // A string (the next value must be one). The view points into the text when the string has
  // no escapes, else into `scratch`; it is valid until either changes.
  std::string_view string(std::string& scratch) {
    ++m_p; // the opening quote, which peek() saw
    const char* start = m_p;
    while (true) {
      m_p = skip_plain(m_p, m_end);
      if (m_p == m_end) {
        fail("unterminated string");
      }
      const auto c = static_cast<unsigned char>(*m_p);
      if (c == '"') {
        std::string_view text(start, static_cast<size_t>(m_p - start));
        ++m_p;
        return text;
      }
      if (c == '\\') {
        scratch.assign(start, static_cast<size_t>(m_p - start));
        return decode_rest(scratch);
      }
      skip_non_plain(c);
    }
  }

  void string_into(std::string& out) {
    const std::string_view text = string(out);
    if (text.data() != out.data()) {
      out.assign(text);
    }
  }

  json number() {
    const char* start = m_p;
    bool integral = true;
    take('-');
    if (take('0')) {
      // no leading zeros
    } else if (!take_digits()) {
      fail("invalid number");
    }
    if (take('.')) {
      integral = false;
      if (!take_digits()) {
        fail("invalid number: expected a digit after '.'");
      }
    }
    if (take('e') || take('E')) {
      integral = false;
      if (!take('+')) {
        take('-');
      }
      if (!take_digits()) {
        fail("invalid number: expected a digit in the exponent");
      }
    }
    if (integral) {
      if (*start != '-') {
        std::uint64_t value = 0;
        if (std::from_chars(start, m_p, value).ec == std::errc()) {
          return json(value);
        }
      } else {
        std::int64_t value = 0;
        if (std::from_chars(start, m_p, value).ec == std::errc()) {
          return json(value);
        }
      }
      // Beyond 64 bits: a double, as nlohmann does.
    }
    double value = 0;
    if (std::from_chars(start, m_p, value).ec != std::errc()) {
      m_p = start;
      fail("number out of range");
    }
    return json(value);
  }

  bool boolean() {
    if (*m_p == 't') {
      literal("true");
      return true;
    }
    literal("false");
    return false;
  }

  // Calls `member(key)` for each member of an object (the next value must be one); `member`
  // must consume the value.
  template <typename Member> void object(Member&& member) {
    ++m_p;
    std::string scratch;
    skip_space();
    if (take('}')) {
      return;
    }
    while (true) {
      skip_space();
      if (m_p == m_end || *m_p != '"') {
        fail("expected a string as object key");
      }
      const std::string_view key = string(scratch);
      skip_space();
      if (!take(':')) {
        fail("expected ':' after an object key");
      }
      member(key);
      skip_space();
      if (take(',')) {
        continue;
      }
      if (take('}')) {
        return;
      }
      fail("expected ',' or '}' after an object member");
    }
  }

  // Calls `item(index)` for each element of an array (the next value must be one); `item` must
  // consume the element.
  template <typename Item> void array(Item&& item) {
    ++m_p;
    skip_space();
    if (take(']')) {
      return;
    }
    for (size_t index = 0;; ++index) {
      item(index);
      skip_space();
      if (take(',')) {
        continue;
      }
      if (take(']')) {
        return;
      }
      fail("expected ',' or ']' after an array element");
    }
  }

  // Any value, as nlohmann::json. Duplicate keys: the last one wins, as in nlohmann.
  json any(int depth = 0) {
    switch (peek()) {
    case Kind::null:
      literal("null");
      return json(nullptr);
    case Kind::boolean:
      return json(boolean());
    case Kind::number:
      return number();
    case Kind::string: {
      std::string text;
      string_into(text);
      return json(std::move(text));
    }
    case Kind::array: {
      check_depth(depth);
      json value(json::value_t::array);
      auto& items = *value.get_ptr<json::array_t*>();
      array([&](size_t) { items.push_back(any(depth + 1)); });
      return value;
    }
    case Kind::object: {
      check_depth(depth);
      json value(json::value_t::object);
      auto& members = *value.get_ptr<json::object_t*>();
      object([&](std::string_view key) {
        members.insert_or_assign(std::string(key), any(depth + 1));
      });
      return value;
    }
    }
    return json(); // unreachable: peek() throws on anything else
  }

  // Checks and steps over any value.
  void skip(int depth = 0) {
    switch (peek()) {
    case Kind::null:
      literal("null");
      return;
    case Kind::boolean:
      boolean();
      return;
    case Kind::number:
      number();
      return;
    case Kind::string: {
      std::string scratch;
      string(scratch);
      return;
    }
    case Kind::array:
      check_depth(depth);
      array([&](size_t) { skip(depth + 1); });
      return;
    case Kind::object:
      check_depth(depth);
      object([&](std::string_view) { skip(depth + 1); });
      return;
    }
  }

  // Steps over a value checking only that its brackets pair up and its strings end: several
  // times faster than skip(), for values the caller does not need (a summary read).
  void skip_roughly() {
    const Kind kind = peek();
    if (kind != Kind::object && kind != Kind::array) {
      skip();
      return;
    }
    char closers[k_max_depth];
    int depth = 0;
    while (m_p < m_end) {
      const char c = *m_p;
      if (c == '"') {
        skip_string_roughly();
        continue;
      }
      if (c == '{' || c == '[') {
        check_depth(depth);
        closers[depth++] = c == '{' ? '}' : ']';
      } else if (c == '}' || c == ']') {
        if (depth == 0 || closers[depth - 1] != c) {
          fail(fmt::format("unexpected {}", describe_byte(c)));
        }
        if (--depth == 0) {
          ++m_p;
          return;
        }
      }
      ++m_p;
    }
    fail("unterminated value");
  }

  // Only white space may follow the document.
  void finish() {
    skip_space();
    if (m_p != m_end) {
      fail("unexpected content after the end of the document");
    }
  }

private:
  static bool is_digit(char c) { return c >= '0' && c <= '9'; }

  static std::string describe_byte(char c) {
    const auto byte = static_cast<unsigned char>(c);
    return byte >= 0x20 && byte < 0x7F ? fmt::format("character '{}'", c)
                                       : fmt::format("byte 0x{:02x}", byte);
  }

  [[noreturn]] void fail(std::string_view message) const {
    throw SyntaxError{offset(), m_p >= m_end ? fmt::format("unexpected end of input ({})", message)
                                             : std::string(message)};
  }

  // From an opening quote to just past its closing one, which is the first quote not escaped by
  // an odd run of backslashes.
  void skip_string_roughly() {
    ++m_p;
    while (true) {
      const auto* quote =
          static_cast<const char*>(std::memchr(m_p, '"', static_cast<size_t>(m_end - m_p)));
      if (!quote) {
        m_p = m_end;
        fail("unterminated string");
      }
      const char* run = quote;
      while (run > m_p && run[-1] == '\\') {
        --run;
      }
      m_p = quote + 1;
      if ((quote - run) % 2 == 0) {
        return;
      }
    }
  }

  void skip_space() {
    while (m_p < m_end && (*m_p == ' ' || *m_p == '\n' || *m_p == '\r' || *m_p == '\t')) {
      ++m_p;
    }
  }

  bool take(char c) {
    if (m_p < m_end && *m_p == c) {
      ++m_p;
      return true;
    }
    return false;
  }

  bool take_digits() {
    const char* start = m_p;
    while (m_p < m_end && is_digit(*m_p)) {
      ++m_p;
    }
    return m_p != start;
  }

  // peek() checks a literal before naming its kind, so that "nonsense" is reported as invalid
  // JSON rather than as a null where an object was expected.
  void check_literal(std::string_view word) const {
    if (static_cast<size_t>(m_end - m_p) < word.size() ||
        std::string_view(m_p, word.size()) != word) {
      fail(fmt::format("unexpected {}", describe_byte(*m_p)));
    }
  }

  // Steps over a literal that peek() checked.
  void literal(std::string_view word) { m_p += word.size(); }

  void check_depth(int depth) const {
    if (depth >= k_max_depth) {
      fail(fmt::format("nesting deeper than {} levels", k_max_depth));
    }
  }

  // Steps over one byte that is_plain() rejected and that is neither a quote nor a backslash.
  void skip_non_plain(unsigned char c) {
    if (c < 0x20) {
      fail(fmt::format("unescaped control character 0x{:02x} in a string", c));
    }
    const size_t length = utf8_sequence_length(reinterpret_cast<const unsigned char*>(m_p),
                                               static_cast<size_t>(m_end - m_p));
    if (length == 0) {
      fail("invalid UTF-8 in a string");
    }
    m_p += length;
  }

  std::uint32_t hex4() {
    if (m_end - m_p < 4) {
      m_p = m_end;
      fail("truncated \\u escape");
    }
    std::uint32_t value = 0;
    for (int i = 0; i < 4; ++i, ++m_p) {
      const char c = *m_p;
      const int digit = is_digit(c)              ? c - '0'
                        : (c >= 'a' && c <= 'f') ? c - 'a' + 10
                        : (c >= 'A' && c <= 'F') ? c - 'A' + 10
                                                 : -1;
      if (digit < 0) {
        fail("invalid \\u escape");
      }
      value = value * 16 + static_cast<std::uint32_t>(digit);
    }
    return value;
  }

  void escape(std::string& out) {
    ++m_p; // the backslash
    if (m_p == m_end) {
      fail("unterminated string");
    }
    switch (*m_p++) {
    case '"':
      out += '"';
      return;
    case '\\':
      out += '\\';
      return;
    case '/':
      out += '/';
      return;
    case 'b':
      out += '\b';
      return;
    case 'f':
      out += '\f';
      return;
    case 'n':
      out += '\n';
      return;
    case 'r':
      out += '\r';
      return;
    case 't':
      out += '\t';
      return;
    case 'u':
      break;
    default:
      --m_p;
      fail(fmt::format("invalid escape \\{}", *m_p));
    }
    std::uint32_t cp = hex4();
    if (cp >= 0xDC00 && cp <= 0xDFFF) {
      fail("invalid \\u escape: unpaired low surrogate");
    }
    if (cp >= 0xD800 && cp <= 0xDBFF) {
      if (!take('\\') || !take('u')) {
        fail("invalid \\u escape: high surrogate without its low half");
      }
      const std::uint32_t low = hex4();
      if (low < 0xDC00 || low > 0xDFFF) {
        fail("invalid \\u escape: high surrogate without its low half");
      }
      cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
    }
    append_utf8(out, cp);
  }

  // The slow path of string(): decodes escapes into `out`, which holds what came before.
  std::string_view decode_rest(std::string& out) {
    while (true) {
      const char* run = m_p;
      m_p = skip_plain(m_p, m_end);
      out.append(run, static_cast<size_t>(m_p - run));
      if (m_p == m_end) {
        fail("unterminated string");
      }
      const auto c = static_cast<unsigned char>(*m_p);
      if (c == '"') {
        ++m_p;
        return out;
      }
      if (c == '\\') {
        escape(out);
        continue;
      }
      const char* sequence = m_p;
      skip_non_plain(c);
      out.append(sequence, static_cast<size_t>(m_p - sequence));
    }
  }

  const char* m_begin;
  const char* m_p;
  const char* m_end;
  size_t m_base;
};

} // namespace sandboxer::json_text
