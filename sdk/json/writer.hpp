#pragma once

// Compact JSON straight into a string, byte for byte what nlohmann's dump() writes for the same
// values, without building a nlohmann document first.

#include <charconv>
#include <cmath>
#include <fmt/format.h>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include <sandboxer/clock.hpp>

#include "sdk/json/utf8.hpp"

namespace sandboxer::json_text {

using json = nlohmann::json;

class JsonWriter {
public:
  explicit JsonWriter(std::string& out) : m_out(out) {}

  void raw(std::string_view text) { m_out.append(text); }

  // Invalid UTF-8 (a backend's error text, say) becomes U+FFFD rather than an error, so that
  // recording a failure cannot fail.
  void string(std::string_view text) {
    m_out += '"';
    const char* p = text.data();
    const char* end = p + text.size();
    while (true) {
      const char* run = p;
      p = skip_plain(p, end);
      m_out.append(run, static_cast<size_t>(p - run));
      if (p == end) {
        break;
      }
      const auto c = static_cast<unsigned char>(*p);
      if (c < 0x80) {
        escape(c);
        ++p;
        continue;
      }
      const size_t length = utf8_sequence_length(reinterpret_cast<const unsigned char*>(p),
                                                 static_cast<size_t>(end - p));
      if (length == 0) {
        m_out += "\xEF\xBF\xBD";
        ++p;
      } else {
        m_out.append(p, length);
        p += length;
      }
    }
    m_out += '"';
  }

  void optional_string(const std::optional<std::string>& text) {
    if (text) {
      string(*text);
    } else {
      raw("null");
    }
  }

  void time(TimePoint t) {
    m_out += '"';
    m_out += format_time(t);
    m_out += '"';
  }

  void optional_time(const std::optional<TimePoint>& t) {
    if (t) {
      time(*t);
    } else {
      raw("null");
    }
  }

  template <typename Integer> void integer(Integer value) {
    char buffer[24];
    const auto result = std::to_chars(buffer, buffer + sizeof(buffer), value);
    m_out.append(buffer, result.ptr);
  }

  void string_map(const std::map<std::string, std::string>& map) {
    m_out += '{';
    bool first = true;
    for (const auto& [key, value] : map) {
      if (!first) {
        m_out += ',';
      }
      first = false;
      string(key);
      m_out += ':';
      string(value);
    }
    m_out += '}';
  }

  // Any nlohmann value, as its dump() would write it (keys in order, shortest round-trip
  // doubles), except that non-finite numbers and binary values, which JSON cannot hold, are null.
  // A value nested deeper than `max_depth` levels is not written: false, and the output is as it
  // was. The depth is counted while writing, so no separate walk is needed and the recursion
  // stays within `max_depth`.
  bool any(const json& value, int max_depth) {
    const size_t mark = m_out.size();
    if (!bounded(value, max_depth)) {
      m_out.resize(mark);
      return false;
    }
    return true;
  }

private:
  bool bounded(const json& value, int depth_left) {
    switch (value.type()) {
    case json::value_t::null:
    case json::value_t::binary:
    case json::value_t::discarded:
      raw("null");
      return true;
    case json::value_t::boolean:
      raw(value.get<bool>() ? "true" : "false");
      return true;
    case json::value_t::number_integer:
      integer(value.get<std::int64_t>());
      return true;
    case json::value_t::number_unsigned:
      integer(value.get<std::uint64_t>());
      return true;
    case json::value_t::number_float:
      floating(value.get<double>());
      return true;
    case json::value_t::string:
      string(*value.get_ptr<const std::string*>());
      return true;
    case json::value_t::array: {
      if (depth_left == 0) {
        return false;
      }
      m_out += '[';
      bool first = true;
      for (const auto& item : *value.get_ptr<const json::array_t*>()) {
        if (!first) {
          m_out += ',';
        }
        first = false;
        if (!bounded(item, depth_left - 1)) {
          return false;
        }
      }
      m_out += ']';
      return true;
    }
    case json::value_t::object: {
      if (depth_left == 0) {
        return false;
      }
      m_out += '{';
      bool first = true;
      for (const auto& [key, item] : *value.get_ptr<const json::object_t*>()) {
        if (!first) {
          m_out += ',';
        }
        first = false;
        string(key);
        m_out += ':';
        if (!bounded(item, depth_left - 1)) {
          return false;
        }
      }
      m_out += '}';
      return true;
    }
    }
    return true;
  }

  void escape(unsigned char c) {
    switch (c) {
    case '"':
      raw("\\\"");
      return;
    case '\\':
      raw("\\\\");
      return;
    case '\b':
      raw("\\b");
      return;
    case '\f':
      raw("\\f");
      return;
    case '\n':
      raw("\\n");
      return;
    case '\r':
      raw("\\r");
      return;
    case '\t':
      raw("\\t");
      return;
    default:
      m_out += fmt::format("\\u{:04x}", c);
    }
  }

  void floating(double value) {
    if (!std::isfinite(value)) {
      raw("null");
      return;
    }
    char buffer[32];
    const auto result = std::to_chars(buffer, buffer + sizeof(buffer), value);
    const std::string_view text(buffer, static_cast<size_t>(result.ptr - buffer));
    m_out.append(text);
    // Keep it a float when read back, as nlohmann writes 2.0 rather than 2.
    if (text.find_first_of(".e") == std::string_view::npos) {
      raw(".0");
    }
  }

  std::string& m_out;
};

} // namespace sandboxer::json_text
