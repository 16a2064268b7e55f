#pragma once

#include <optional>
#include <string>
#include <vector>

namespace CLI {
class App;
class Option;
} // namespace CLI

namespace sandboxer::commands {

// What an option or a positional takes, in the one table that the man page, --help's value names
// and shell completion all read (docs/completion.md).
enum class ValueKind {
  none,         // a flag
  duration,     // 30s, 45m, 7d
  time,         // RFC 3339
  sandbox,      // an id or name of any resident record
  live_sandbox, // an id or name of a live one
  snapshot,     // snp-... or SANDBOX:NAME
  profile,      // a profile name, or a file
  dir,
  file,
  format, // -o
  log_level,
  state,
  driver,
  schema,
  shell,
  orphans_mode,   // report, destroy
  wait_condition, // running, gone (`wait --for`)
  grouping,       // profile, driver, owner, label:KEY (`usage --by`)
  key_value,      // KEY=VALUE
  count,          // a whole number
  command,        // one of sandboxer's commands (`sandboxer help COMMAND`)
  text,           // anything: nothing to complete
};

// The kind of `option` of `command` (the command path, "" for the root, "ledger verify" for a
// nested one, is taken from `command`): none for every flag, else the table's entry; text when
// the table has none.
ValueKind value_kind(const CLI::App& command, const CLI::Option& option);
// The table's entry, or nothing: a test checks that every option of every command has one.
std::optional<ValueKind> classified_kind(const CLI::App& command, const CLI::Option& option);
// Whether the value may be left out (`--orphans` alone, `--orphans=destroy`).
bool value_optional(const CLI::Option& option);
// The value's name in the man page and --help: DURATION, PROFILE, ID, ...; "" for a flag.
std::string value_name(const CLI::App& command, const CLI::Option& option);
// "ledger verify": the names from below the root down to `command`.
std::string command_path(const CLI::App& command);
// An option's name in the table and in completion's GivenOptions: its first long name without
// dashes ("state-dir"), or a positional's name ("ids").
std::string value_key(const CLI::Option& option);
// The commands of `command` (`snapshots rm`), and its positionals in order.
std::vector<const CLI::App*> nested_commands(const CLI::App& command);
std::vector<const CLI::Option*> positionals_of(const CLI::App& command);

} // namespace sandboxer::commands
