#include "commands/output.hpp"

#include <fmt/format.h>
#include <iostream>

#include <sandboxer/error.hpp>

namespace sandboxer::commands {
namespace {

void print_table(const Table& table) {
  size_t columns = table.headers.size();
  for (const auto& row : table.rows) {
    columns = std::max(columns, row.size());
  }
  std::vector<size_t> widths(columns, 0);
  for (size_t c = 0; c < columns; ++c) {
    widths[c] = c < table.headers.size() ? table.headers[c].size() : 0;
    for (const auto& row : table.rows) {
      widths[c] = std::max(widths[c], c < row.size() ? row[c].size() : 0);
    }
  }
  std::string text;
  auto add_row = [&](const std::vector<std::string>& row) {
    std::string line;
    for (size_t c = 0; c < widths.size(); ++c) {
      const std::string& cell = c < row.size() ? row[c] : "";
      line += c + 1 == widths.size() ? cell : fmt::format("{:<{}}  ", cell, widths[c]);
    }
    while (!line.empty() && line.back() == ' ') {
      line.pop_back();
    }
    text += line + "\n";
  };
  if (!table.headers.empty()) {
    add_row(table.headers);
  }
  for (const auto& row : table.rows) {
    add_row(row);
  }
  std::cout << text;
}

bool needs_quotes(const std::string& s) {
  if (s.empty() || s == "true" || s == "false" || s == "null" || s == "~" || s == "yes" ||
      s == "no") {
    return true;
  }
  if (std::isdigit(static_cast<unsigned char>(s[0])) || s[0] == '-' || s[0] == ' ' ||
      s.back() == ' ') {
    return true;
  }
  return s.find_first_of(":#{}[],&*!|>'\"%@`\n\t") != std::string::npos;
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
    const auto& s = v.get_ref<const std::string&>();
    return needs_quotes(s) ? nlohmann::json(s).dump() : s;
  }
  return v.dump();
}

std::string yaml_key(const std::string& key) {
  return needs_quotes(key) ? nlohmann::json(key).dump() : key;
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
  if (text == "table") {
    return Format::table;
  }
  if (text == "json") {
    return Format::json;
  }
  if (text == "yaml") {
    return Format::yaml;
  }
  throw UsageError(fmt::format("unknown output format \"{}\" (use table, json or yaml)", text));
}

void Output::print(const nlohmann::json& data, const std::function<Table()>& table) const {
  switch (m_format) {
  case Format::json:
    std::cout << data.dump() << "\n";
    break;
  case Format::yaml:
    std::cout << to_yaml(data);
    break;
  case Format::table:
    print_table(table());
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

std::string to_yaml(const nlohmann::json& value) {
  if (!is_block(value)) {
    return inline_value(value) + "\n";
  }
  std::string out;
  yaml_block(value, 0, out);
  return out;
}

} // namespace sandboxer::commands
