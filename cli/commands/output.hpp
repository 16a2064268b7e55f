#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/errors.hpp"
#include "core/ledger/ledger.hpp"
#include "core/public_json.hpp"

namespace sandboxer::commands {

// csv: a table as comma-separated values, offered only by commands that say so (CommandEntry::csv).
enum class Format { table, json, yaml, csv };

// Reads "table", "wide", "json", "yaml" or "csv"; throws UsageError otherwise.
Format parse_format(const std::string& text);

struct Table {
  std::vector<std::string> headers;
  std::vector<std::vector<std::string>> rows;
};

// Everything a command prints as data goes to stdout through here; logs go to stderr.
class Output {
public:
  Output(Format format, bool quiet) : m_format(format), m_quiet(quiet) {}
  Format format() const { return m_format; }
  bool quiet() const { return m_quiet; }
  // -o wide: tables get the columns that make them too wide for a terminal by default.
  bool wide() const { return m_wide; }
  void set_wide(bool wide) { m_wide = wide; }
  // --no-headers: tables without their header line, for scripts that read columns.
  void set_headers(bool headers) { m_headers = headers; }
  // Called before anything is printed: the terminal's progress line is erased first, so that the
  // table does not start in the middle of it.
  void set_before_print(std::function<void()> before) { m_before_print = std::move(before); }

  // JSON and YAML print `data`; table and CSV print what `table` builds (only called then).
  void print(const nlohmann::json& data, const std::function<Table()>& table) const;
  // A line of text for humans, printed in table format unless --quiet.
  void note(const std::string& text) const;

private:
  Format m_format;
  bool m_quiet;
  bool m_wide = false;
  bool m_headers = true;
  std::function<void()> m_before_print;
};

// A key/value table of one record, for `create`, `status`, ...
Table record_table(const SandboxRecord& record, TimePoint now);

// "12m", "1h30m", "expired 3m ago", "-" for no TTL.
std::string time_left(const SandboxRecord& record, TimePoint now);

std::string to_yaml(const nlohmann::json& value);

// "1.9 MiB", "512 B": sizes in tables (JSON keeps bytes).
std::string human_bytes(std::uint64_t bytes);

// The exit code of a verb applied to `asked` sandboxes one by one (destroy, pause, resume): 0, or
// with one asked (or all failed) the last error's own code, else partial failure (6).
ExitCode exit_of_each(size_t asked, size_t failures, ExitCode last_error);

} // namespace sandboxer::commands
