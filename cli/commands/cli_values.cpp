#include "cli/commands/cli_values.hpp"

#include <CLI/CLI.hpp>
#include <string_view>
#include <vector>

namespace sandboxer::commands {
namespace {

struct Entry {
  std::string_view command; // its path: "" for the root (the global options), "ledger verify"
  std::string_view option;  // long name without dashes, or the positional's name
  ValueKind kind;
  std::string_view name = {}; // the value's name where the kind's own does not fit
};

// Every option that takes a value. A new one must be added here (tests/unit/test_cli_complete).
const std::vector<Entry>& table() {
  using K = ValueKind;
  static const std::vector<Entry> entries = {
      {"", "state-dir", K::dir},
      {"", "profiles-dir", K::dir},
      {"", "output", K::format},
      {"", "log-level", K::log_level},
      {"", "ledger", K::text, "URI"},
      {"", "lock-timeout", K::duration},
      {"create", "profile", K::profile},
      {"create", "name", K::text, "NAME"},
      {"create", "ttl", K::duration},
      {"create", "idempotency-key", K::text, "KEY"},
      {"create", "label", K::key_value},
      {"destroy", "ids", K::live_sandbox},
      {"destroy", "reason", K::text, "TEXT"},
      {"destroy", "timeout", K::duration},
      {"destroy", "label", K::key_value},
      {"wait", "id", K::sandbox},
      {"wait", "for", K::wait_condition},
      {"wait", "timeout", K::duration},
      {"exec", "user", K::text, "USER"},
      {"list", "label", K::key_value},
      {"list", "profile", K::profile},
      {"list", "name", K::text, "NAME"},
      {"list", "driver", K::driver},
      {"list", "state", K::state},
      {"list", "expiring-within", K::duration},
      {"status", "id", K::sandbox},
      {"exec", "id", K::live_sandbox},
      {"exec", "command", K::text, "COMMAND"},
      {"exec", "env", K::key_value},
      {"exec", "workdir", K::text, "DIR"},
      {"logs", "id", K::sandbox},
      {"logs", "since", K::duration, "DURATION|TIME"},
      {"logs", "tail", K::count},
      {"cp", "paths", K::file},
      {"port", "id", K::live_sandbox},
      {"port", "port", K::text, "PORT[/PROTO]"},
      {"forward", "id", K::live_sandbox},
      {"forward", "ports", K::text, "[LOCAL:]PORT[/PROTO]"},
      {"run", "profile", K::profile},
      {"run", "name", K::text, "NAME"},
      {"run", "label", K::key_value},
      {"run", "ttl", K::duration},
      {"run", "lease", K::duration},
      {"run", "stop-timeout", K::duration},
      {"run", "env", K::key_value},
      {"run", "workdir", K::text, "DIR"},
      {"run", "user", K::text, "USER"},
      {"run", "cp-in", K::text, "LOCAL:SANDBOX_PATH"},
      {"run", "cp-out", K::text, "SANDBOX_PATH:LOCAL"},
      {"run", "evidence", K::file},
      {"run", "idempotency-key", K::text, "KEY"},
      {"run", "command", K::text, "COMMAND"},
      {"cp", "owner", K::text, "UID:GID"},
      {"cp", "via", K::text, "any|native|exec"},
      {"snapshot", "id", K::live_sandbox},
      {"snapshot", "name", K::text, "NAME"},
      {"snapshots", "id", K::sandbox},
      {"snapshots rm", "snapshot", K::snapshot},
      {"restore", "snapshot", K::snapshot},
      {"restore", "name", K::text, "NAME"},
      {"restore", "ttl", K::duration},
      {"restore", "idempotency-key", K::text, "KEY"},
      {"restore", "in-place", K::live_sandbox},
      {"pause", "ids", K::live_sandbox},
      {"resume", "ids", K::live_sandbox},
      {"extend", "id", K::live_sandbox},
      {"extend", "by", K::duration},
      {"extend", "to", K::time},
      {"reap", "parallel", K::count},
      {"reap", "max-destroy", K::count},
      {"reap", "grace", K::duration},
      {"reap", "skew", K::duration},
      {"reap", "claim-lease", K::duration},
      {"reap", "stuck-after", K::duration},
      {"reap", "keep-history", K::duration},
      {"reap", "orphans", K::orphans_mode},
      {"reap", "profile", K::profile},
      {"pool fill", "profile", K::profile},
      {"pool fill", "wait", K::duration},
      {"pool fill", "parallel", K::count},
      {"pool status", "profile", K::profile},
      {"reap", "plan", K::file},
      {"reap", "wait", K::duration},
      {"reap", "expiring-window", K::duration},
      {"reap", "metrics-file", K::file},
      {"history", "id", K::sandbox},
      {"evidence", "id", K::sandbox},
      {"usage", "since", K::duration, "DURATION|TIME"},
      {"usage", "from", K::time},
      {"usage", "to", K::time},
      {"usage", "by", K::grouping},
      {"ledger verify", "head", K::text, "HEAD"},
      {"ledger export", "output", K::file},
      {"ledger import", "file", K::file},
      {"ledger keep", "idle", K::duration},
      {"events flush", "timeout", K::duration},
      {"profiles show", "name", K::profile},
      {"profiles validate", "files", K::profile},
      {"drivers test", "profile", K::profile},
      {"schema", "name", K::schema},
      {"completion", "shell", K::shell},
  };
  return entries;
}

std::string_view name_of(ValueKind kind) {
  switch (kind) {
  case ValueKind::none:
    return "";
  case ValueKind::duration:
    return "DURATION";
  case ValueKind::time:
    return "TIME";
  case ValueKind::sandbox:
  case ValueKind::live_sandbox:
    return "ID";
  case ValueKind::snapshot:
    return "SNAPSHOT";
  case ValueKind::profile:
    return "PROFILE";
  case ValueKind::dir:
    return "DIR";
  case ValueKind::file:
    return "FILE";
  case ValueKind::format:
    return "FORMAT";
  case ValueKind::log_level:
    return "LEVEL";
  case ValueKind::state:
    return "STATE";
  case ValueKind::driver:
    return "DRIVER";
  case ValueKind::schema:
    return "SCHEMA";
  case ValueKind::shell:
    return "SHELL";
  case ValueKind::orphans_mode:
    return "MODE";
  case ValueKind::wait_condition:
    return "CONDITION";
  case ValueKind::grouping:
    return "GROUP";
  case ValueKind::key_value:
    return "KEY=VALUE";
  case ValueKind::count:
    return "N";
  case ValueKind::command:
    return "COMMAND";
  case ValueKind::text:
    return "VALUE";
  }
  return "VALUE";
}

const Entry* entry_of(const CLI::App& command, const CLI::Option& option) {
  const std::string path = command_path(command);
  const std::string key = value_key(option);
  for (const auto& entry : table()) {
    if (entry.command == path && entry.option == key) {
      return &entry;
    }
  }
  return nullptr;
}

} // namespace

std::string value_key(const CLI::Option& option) {
  if (option.get_positional()) {
    return option.get_name(true);
  }
  return option.get_lnames().empty() ? option.get_name() : option.get_lnames().front();
}

std::vector<const CLI::App*> nested_commands(const CLI::App& command) {
  return command.get_subcommands([](const CLI::App*) { return true; });
}

std::vector<const CLI::Option*> positionals_of(const CLI::App& command) {
  return command.get_options([](const CLI::Option* option) { return option->get_positional(); });
}

std::string command_path(const CLI::App& command) {
  std::string path;
  for (const CLI::App* at = &command; at->get_parent() != nullptr; at = at->get_parent()) {
    path = at->get_name() + (path.empty() ? "" : " " + path);
  }
  return path;
}

std::optional<ValueKind> classified_kind(const CLI::App& command, const CLI::Option& option) {
  if (option.get_expected_max() == 0) {
    return ValueKind::none;
  }
  const Entry* entry = entry_of(command, option);
  return entry ? std::optional(entry->kind) : std::nullopt;
}

ValueKind value_kind(const CLI::App& command, const CLI::Option& option) {
  return classified_kind(command, option).value_or(ValueKind::text);
}

bool value_optional(const CLI::Option& option) {
  return option.get_expected_min() == 0 && option.get_expected_max() > 0;
}

std::string value_name(const CLI::App& command, const CLI::Option& option) {
  const Entry* entry = entry_of(command, option);
  if (entry && !entry->name.empty()) {
    return std::string(entry->name);
  }
  return std::string(name_of(value_kind(command, option)));
}

} // namespace sandboxer::commands
