#include "cli/commands/output.hpp"

#include <algorithm>
#include <cctype>
#include <fmt/format.h>
#include <iostream>

#include <sandboxer/error.hpp>

#include "core/errors.hpp"
#include "core/names.hpp"

namespace sandboxer::commands {
namespace {

// RFC 4180 (lines end in LF): a cell with a comma, a quote or a line break is quoted, its quotes
// doubled.
void print_csv(const Table& table, bool headers) {
  auto line = [](const std::vector<std::string>& cells) {
    std::string out;
    for (size_t i = 0; i < cells.size(); ++i) {
      const std::string& cell = cells[i];
      out += i > 0 ? "," : "";
      if (cell.find_first_of(",\"\r\n") == std::string::npos) {
        out += cell;
        continue;
      }
      out += '"';
      for (char c : cell) {
        out += c == '"' ? std::string("\"\"") : std::string(1, c);
      }
      out += '"';
    }
    std::cout << out << "\n";
  };
  if (headers && !table.headers.empty()) {
    line(table.headers);
  }
  for (const auto& row : table.rows) {
    line(row);
  }
}

void print_table(const Table& raw, bool headers) {
  // Names, labels and errors come from users and backends: a newline or an escape sequence in one
  // must not forge rows or rewrite the terminal. Cells that need it are escaped once, here.
  std::vector<std::vector<std::string>> escaped_rows;
  // Plain printable ASCII (the usual cell) is its own escape; anything else is asked.
  auto changed_by_escaping = [](const std::string& cell) {
    const bool plain = std::all_of(cell.begin(), cell.end(),
                                   [](char c) { return c >= 0x20 && c < 0x7f && c != '\\'; });
    return !plain && printable(cell) != cell;
  };
  auto cells_of = [&](const std::vector<std::string>& row) -> const std::vector<std::string>& {
    for (const auto& cell : row) {
      if (changed_by_escaping(cell)) {
        auto& copy = escaped_rows.emplace_back();
        for (const auto& c : row) {
          copy.push_back(printable(c));
        }
        return copy;
      }
    }
    return row;
  };
  std::vector<const std::vector<std::string>*> rows;
  rows.reserve(raw.rows.size() + 1);
  escaped_rows.reserve(raw.rows.size() + 1);
  if (headers && !raw.headers.empty()) {
    rows.push_back(&raw.headers);
  }
  for (const auto& row : raw.rows) {
    rows.push_back(&cells_of(row));
  }
  size_t columns = raw.headers.size();
  for (const auto* row : rows) {
    columns = std::max(columns, row->size());
  }
  std::vector<size_t> widths(columns, 0);
  for (size_t c = 0; c < raw.headers.size(); ++c) {
    widths[c] = raw.headers[c].size();
  }
  for (const auto* row : rows) {
    for (size_t c = 0; c < row->size(); ++c) {
      widths[c] = std::max(widths[c], (*row)[c].size());
    }
  }
  std::string text;
  for (const auto* row : rows) {
    const size_t start = text.size();
    for (size_t c = 0; c < widths.size(); ++c) {
      const std::string* cell = c < row->size() ? &(*row)[c] : nullptr;
      if (cell) {
        text += *cell;
      }
      if (c + 1 < widths.size()) {
        text.append(widths[c] - (cell ? cell->size() : 0) + 2, ' ');
      }
    }
    while (text.size() > start && text.back() == ' ') {
      text.pop_back();
    }
    text += '\n';
  }
  std::cout << text;
}

// Whether `s` may be written as a plain YAML scalar and read back, by a YAML 1.1 or 1.2 reader,
// as the same string. Deliberately narrow: a word that starts with a letter and holds only
// letters, digits and "._/-", and is none of the words YAML 1.1 reads as booleans or null. Every
// other string is quoted, so `yes`, `on`, `null`, `~`, `0x10`, `012`, `1e3` and times stay text.
bool is_plain_safe(const std::string& s) {
  if (s.empty() || !std::isalpha(static_cast<unsigned char>(s[0]))) {
    return false;
  }
  const bool word = std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '/' ||
           c == '-';
  });
  if (!word) {
    return false;
  }
  std::string lower;
  for (char c : s) {
    lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  static const char* const k_special[] = {"y",   "n",    "yes",   "no",  "on",
                                          "off", "true", "false", "null"};
  return std::none_of(std::begin(k_special), std::end(k_special),
                      [&](const char* special) { return lower == special; });
}

// A YAML double-quoted scalar. Unlike JSON's escaping, DEL and the C1 controls (U+0080-U+009F,
// except U+0085) are escaped too: YAML does not allow them raw.
std::string yaml_quoted(const std::string& s) {
  std::string out = "\"";
  for (size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7F) {
      out += fmt::format("\\x{:02x}", c);
    } else if (c == 0xC2 && i + 1 < s.size() && static_cast<unsigned char>(s[i + 1]) >= 0x80 &&
               static_cast<unsigned char>(s[i + 1]) <= 0x9F) {
      out += fmt::format("\\u{:04x}", static_cast<unsigned char>(s[i + 1]));
      ++i;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

std::string yaml_string(const std::string& s) {
  return is_plain_safe(s) ? s : yaml_quoted(s);
}

bool is_block(const nlohmann::json& v) {
  return (v.is_object() || v.is_array()) && !v.empty();
}

// A scalar, or an empty map or list, on one line.
std::string inline_value(const nlohmann::json& v) {
  if (v.is_object()) {
    return "{}";
  }
  if (v.is_array()) {
    return "[]";
  }
  if (v.is_string()) {
    return yaml_string(v.get_ref<const std::string&>());
  }
  return v.dump();
}

std::string yaml_key(const std::string& key) {
  return yaml_string(key);
}

void yaml_block(const nlohmann::json& v, int indent, std::string& out) {
  std::string pad(indent, ' ');
  if (v.is_object()) {
    for (const auto& [key, item] : v.items()) {
      if (is_block(item)) {
        out += pad + yaml_key(key) + ":\n";
        yaml_block(item, indent + 2, out);
      } else {
        out += pad + yaml_key(key) + ": " + inline_value(item) + "\n";
      }
    }
    return;
  }
  for (const auto& item : v) {
    if (is_block(item)) {
      std::string nested;
      yaml_block(item, indent + 2, nested);
      // The nested block's first line goes right after the dash.
      out += pad + "- " + nested.substr(indent + 2);
    } else {
      out += pad + "- " + inline_value(item) + "\n";
    }
  }
}

} // namespace

Format parse_format(const std::string& text) {
  if (text == "table" || text == "wide") {
    return Format::table; // wide: a table with more columns (Output::wide)
  }
  if (text == "json") {
    return Format::json;
  }
  if (text == "yaml") {
    return Format::yaml;
  }
  if (text == "csv") {
    return Format::csv;
  }
  throw UsageError(
      fmt::format("unknown output format \"{}\" (use table, wide, json, yaml or csv)", text));
}

void Output::print(const nlohmann::json& data, const std::function<Table()>& table) const {
  if (m_before_print) {
    m_before_print();
  }
  switch (m_format) {
  case Format::json:
    std::cout << data.dump() << "\n";
    break;
  case Format::yaml:
    std::cout << to_yaml(data);
    break;
  case Format::table:
    print_table(table(), m_headers);
    break;
  case Format::csv:
    print_csv(table(), m_headers);
    break;
  }
  std::cout.flush();
}

void Output::note(const std::string& text) const {
  if (m_format == Format::table && !m_quiet) {
    std::cout << text << "\n";
  }
}

std::string time_left(const SandboxRecord& record, TimePoint now) {
  // A destroyed or failed sandbox has no time left to speak of, whatever its deadline was.
  if (!record.expires_at || !is_live(record.state)) {
    return "-";
  }
  if (*record.expires_at <= now) {
    return "expired " + format_duration(now - *record.expires_at) + " ago";
  }
  return format_duration(*record.expires_at - now);
}

Table record_table(const SandboxRecord& record, TimePoint now) {
  Table table;
  auto add = [&](const std::string& key, const std::string& value) {
    table.rows.push_back({key + ":", value});
  };
  add("id", record.id);
  add("name", record.name);
  add("state", to_string(record.state));
  add("driver", record.driver);
  add("backend id", record.backend_id.empty() ? "-" : record.backend_id);
  add("profile", record.profile.name + " (" + record.profile.path + ")");
  add("created", format_time(record.created_at));
  add("expires", record.expires_at ? format_time(*record.expires_at) : "never (ttl: none)");
  add("time left", time_left(record, now));
  if (record.max_expires_at) {
    add("max expires", format_time(*record.max_expires_at));
  }
  for (const auto& [key, value] : record.labels) {
    add("label", key + "=" + value);
  }
  add("owner",
      record.owner.user + "@" + record.owner.host + " pid " + std::to_string(record.owner.pid));
  for (const auto& snapshot : record.snapshots) {
    add("snapshot", snapshot.id + " " + snapshot.name);
  }
  if (record.restored_from) {
    add("restored from", *record.restored_from);
  }
  if (record.error) {
    add("error", *record.error);
  }
  return table;
}

ExitCode exit_of_each(size_t asked, size_t failures, ExitCode last_error) {
  if (failures == 0) {
    return ExitCode::ok;
  }
  return asked == 1 || failures == asked ? last_error : ExitCode::partial;
}

std::string human_bytes(std::uint64_t bytes) {
  static const char* const k_units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  if (bytes < 1024) {
    return fmt::format("{} B", bytes);
  }
  double value = static_cast<double>(bytes);
  size_t unit = 0;
  while (value >= 1024 && unit + 1 < std::size(k_units)) {
    value /= 1024;
    ++unit;
  }
  return value < 10 ? fmt::format("{:.1f} {}", value, k_units[unit])
                    : fmt::format("{:.0f} {}", value, k_units[unit]);
}

std::string to_yaml(const nlohmann::json& value) {
  if (!is_block(value)) {
    return inline_value(value) + "\n";
  }
  std::string out;
  yaml_block(value, 0, out);
  return out;
}

} // namespace sandboxer::commands
