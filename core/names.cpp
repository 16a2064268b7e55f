#include "core/names.hpp"

#include <algorithm>
#include <cstdint>
#include <fmt/format.h>

#include "sdk/json/utf8.hpp"

namespace sandboxer {
namespace {

bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '_' || c == '-';
}

// Decodes the UTF-8 sequence at `pos` into `code`, advancing `pos`; false when it is not valid
// UTF-8 (the JSON reader's check: overlong forms, surrogates, values past U+10FFFF).
bool next_code_point(std::string_view text, size_t& pos, std::uint32_t& code) {
  const auto* bytes = reinterpret_cast<const unsigned char*>(text.data()) + pos;
  const size_t length =
      bytes[0] < 0x80 ? 1 : json_text::utf8_sequence_length(bytes, text.size() - pos);
  if (length == 0) {
    return false;
  }
  code = length == 1 ? bytes[0] : bytes[0] & (0x7F >> length);
  for (size_t i = 1; i < length; ++i) {
    code = (code << 6) | (bytes[i] & 0x3F);
  }
  pos += length;
  return true;
}

bool is_control(std::uint32_t code) {
  return code < 0x20 || code == 0x7F || (code >= 0x80 && code <= 0x9F);
}

// Marks that reorder or hide text on a terminal (the "Trojan Source" set) and invisible
// separators.
bool is_bidi_or_invisible(std::uint32_t code) {
  return code == 0x061C || code == 0x200B || code == 0x200E || code == 0x200F ||
         (code >= 0x202A && code <= 0x202E) || (code >= 0x2066 && code <= 0x2069) ||
         code == 0x2028 || code == 0x2029 || code == 0xFEFF;
}

} // namespace

std::optional<std::string> name_problem(std::string_view name) {
  if (name.empty() || name.size() > 63) {
    return "a name has 1 to 63 characters";
  }
  if (!std::all_of(name.begin(), name.end(), is_name_char)) {
    return "use only letters, digits, \".\", \"_\" and \"-\"";
  }
  if (name.front() == '.' || name.front() == '-') {
    return "a name does not start with \".\" or \"-\"";
  }
  for (std::string_view prefix : {"sbx-", "snp-", "ldg-"}) {
    if (name.starts_with(prefix)) {
      return fmt::format("\"{}\" starts the ids sandboxer makes; choose a name that does not look "
                         "like one",
                         prefix);
    }
  }
  return std::nullopt;
}

std::optional<std::string> label_key_problem(std::string_view key) {
  if (key.empty() || key.size() > 253) {
    return "a label key has 1 to 253 characters";
  }
  const bool allowed =
      std::all_of(key.begin(), key.end(), [](char c) { return is_name_char(c) || c == '/'; });
  if (!allowed) {
    return "use letters, digits, \".\", \"_\", \"/\" and \"-\"";
  }
  return std::nullopt;
}

std::optional<std::string> label_value_problem(std::string_view value) {
  if (value.size() > 256) {
    return fmt::format("a label value has at most 256 bytes, this one {}", value.size());
  }
  size_t pos = 0;
  while (pos < value.size()) {
    std::uint32_t code = 0;
    if (!next_code_point(value, pos, code)) {
      return "a label value must be UTF-8 text";
    }
    if (is_control(code) || is_bidi_or_invisible(code)) {
      return fmt::format("a label value cannot hold control characters or bidirectional marks "
                         "(found U+{:04X})",
                         code);
    }
  }
  return std::nullopt;
}

std::string printable(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t start = pos;
    std::uint32_t code = 0;
    if (!next_code_point(text, pos, code)) {
      out += fmt::format("\\x{:02x}", static_cast<unsigned char>(text[start]));
      pos = start + 1;
    } else if (code == '\n') {
      out += "\\n";
    } else if (code == '\t') {
      out += "\\t";
    } else if (code == '\r') {
      out += "\\r";
    } else if (code == '\\') {
      out += "\\\\";
    } else if (code < 0x80 && is_control(code)) {
      out += fmt::format("\\x{:02x}", code);
    } else if (is_control(code) || is_bidi_or_invisible(code)) {
      out += fmt::format("\\u{:04x}", code);
    } else {
      out.append(text.substr(start, pos - start));
    }
  }
  return out;
}

} // namespace sandboxer
