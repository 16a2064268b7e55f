// What TAB offers, decided here once for bash, zsh and fish (docs/completion.md): the scripts
// only pass the words and show the answer, as cobra's do for docker, kubectl and gh.
#include "cli/commands/complete.hpp"

#include <CLI/CLI.hpp>
#include <algorithm>

#include "cli/commands/cli_values.hpp"
#include "cli/commands/commands.hpp"
#include "core/ledger/record.hpp"

namespace sandboxer::commands {
namespace {

std::vector<Candidate> words_of(std::initializer_list<Candidate> list) {
  return list;
}

std::vector<Candidate> states() {
  std::vector<Candidate> out;
  for (int s = 0; s <= static_cast<int>(State::pooled); ++s) { // the last State
    out.push_back({to_string(static_cast<State>(s)), ""});
  }
  return out;
}

const CLI::App* nested_named(const CLI::App& command, const std::string& word) {
  for (const CLI::App* nested : nested_commands(command)) {
    if (nested->check_name(word)) { // its name or an alias (`ls`, `rm`)
      return nested;
    }
  }
  return nullptr;
}

// Aliases (`ls`, `ps`, `rm`) are offered only for a word that begins no command's own name:
// offered always, each would double the list; offered never, `rm<TAB>` would complete nothing.
void append_aliases(const CLI::App& command, const std::string& typed,
                    std::vector<Candidate>& out) {
  const auto nested = nested_commands(command);
  if (typed.empty() || std::any_of(nested.begin(), nested.end(), [&](const CLI::App* sub) {
        return sub->get_name().starts_with(typed);
      })) {
    return;
  }
  for (const CLI::App* sub : nested) {
    for (const std::string& alias : sub->get_aliases()) {
      out.push_back({alias, "alias of " + sub->get_name()});
    }
  }
}

// An option of `command` or of a command above it (the globals work after any command).
struct Found {
  const CLI::Option* option = nullptr;
  const CLI::App* owner = nullptr;
};

Found find_option(const CLI::App& command, const std::string& name) {
  for (const CLI::App* at = &command; at != nullptr; at = at->get_parent()) {
    for (const CLI::Option* option : at->get_options()) {
      if (!option->get_positional() && option->check_name(name)) {
        return {option, at};
      }
    }
  }
  return {};
}

// Where the words before the last one leave us.
struct Walk {
  const CLI::App* command = nullptr;
  size_t positional = 0; // positionals of `command` given so far
  GivenOptions given;
  bool ended = false;   // after `--`: the words are a command's, not ours
  bool help = false;    // `sandboxer help WORD`
  bool unknown = false; // a command word that is none
  Found pending;        // the option whose value the last word is
};

Walk walk(const CLI::App& root, const std::vector<std::string>& words) {
  Walk at;
  at.command = &root;
  const size_t last = words.empty() ? 0 : words.size() - 1;
  for (size_t i = 0; i < last && !at.ended && !at.unknown; ++i) {
    const std::string& word = words[i];
    if (word == "--") {
      at.ended = true;
    } else if (word.size() > 1 && word[0] == '-') {
      const bool is_long = word.starts_with("--");
      const size_t equals = is_long ? word.find('=') : std::string::npos;
      const std::string name = is_long ? word.substr(0, equals) : word.substr(0, 2);
      const Found found = find_option(*at.command, name);
      if (!found.option || value_kind(*found.owner, *found.option) == ValueKind::none) {
        continue;
      }
      const std::string key = value_key(*found.option);
      if (equals != std::string::npos || (!is_long && word.size() > 2)) {
        at.given[key] = word.substr(is_long ? equals + 1 : 2);
        continue;
      }
      const bool next_is_value = i + 1 < words.size() && !words[i + 1].starts_with("-");
      if (value_optional(*found.option) && !next_is_value) {
        continue;
      }
      if (i + 1 == last) {
        at.pending = found;
        break;
      }
      at.given[key] = words[++i];
    } else if (at.command == &root && word == "help" && !at.help) {
      at.help = true;
    } else if (at.help) {
      at.unknown = true; // help takes one word
    } else if (const CLI::App* nested =
                   at.positional == 0 ? nested_named(*at.command, word) : nullptr) {
      at.command = nested;
    } else if (at.command == &root) {
      at.unknown = true;
    } else {
      const auto positionals = positionals_of(*at.command);
      // A positional that takes many (destroy's ids) takes every word that follows.
      if (at.positional < positionals.size() &&
          positionals[at.positional]->get_expected_max() <= 1) {
        ++at.positional;
      }
    }
  }
  return at;
}

// The values of an option or positional of kind `kind`.
Completions values_of(ValueKind kind, const std::string& typed, const CLI::App& root,
                      const GivenOptions& given, CompletionSource& source) {
  switch (kind) {
  case ValueKind::sandbox:
  case ValueKind::live_sandbox:
    return {source.sandboxes(given, kind == ValueKind::live_sandbox)};
  case ValueKind::snapshot:
    return {source.snapshots(given)};
  case ValueKind::profile:
    // A value with a slash is a file (find_profile); a bare word is a name on the search path.
    if (typed.find('/') != std::string::npos || typed.starts_with(".") || typed.starts_with("~")) {
      return {{}, Directive::files};
    }
    return {source.profiles(given)};
  case ValueKind::dir:
    return {{}, Directive::dirs};
  case ValueKind::file:
    return {{}, Directive::files};
  case ValueKind::format:
    return {words_of({{"table", "columns for people (the default)"},
                      {"wide", "the table with every column"},
                      {"json", "for scripts and jq"},
                      {"yaml", "for people and config"},
                      {"csv", "for spreadsheets (usage only)"}})};
  case ValueKind::grouping:
    return {words_of({{"profile", "by profile name"},
                      {"driver", "by driver"},
                      {"owner", "by the user who created it"},
                      {"label:", "by the value of a label: label:KEY"}}),
            typed.starts_with("l") ? Directive::nospace : Directive::none};
  case ValueKind::log_level:
    return {words_of(
        {{"trace", ""}, {"debug", ""}, {"info", ""}, {"warn", ""}, {"error", ""}, {"off", ""}})};
  case ValueKind::state:
    return {states()};
  case ValueKind::driver:
    return {source.drivers()};
  case ValueKind::schema:
    return {source.schemas()};
  case ValueKind::shell:
    return {words_of({{"bash", ""}, {"zsh", ""}, {"fish", ""}})};
  case ValueKind::orphans_mode:
    return {words_of({{"report", "list what the backends hold without a live record (default)"},
                      {"destroy", "destroy it"}})};
  case ValueKind::wait_condition:
    return {words_of({{"running", "recorded running and the backend says so"},
                      {"gone", "destroyed, failed or no longer in the ledger"}})};
  case ValueKind::command: {
    std::vector<Candidate> out;
    for (const CLI::App* sub : nested_commands(root)) {
      out.push_back({sub->get_name(), sub->get_description()});
    }
    return {out};
  }
  case ValueKind::none:
  case ValueKind::duration:
  case ValueKind::time:
  case ValueKind::key_value:
  case ValueKind::count:
  case ValueKind::text:
    break;
  }
  return {};
}

// The options of `command` and of the commands above it, nearest first, flags before options
// that take a value; short names only when the word is not yet `--`.
std::vector<Candidate> option_candidates(const CLI::App& command, const std::string& typed) {
  std::vector<Candidate> flags, valued, seen;
  for (const CLI::App* at = &command; at != nullptr; at = at->get_parent()) {
    for (const CLI::Option* option : at->get_options()) {
      if (option->get_positional() || option->get_group().empty()) {
        continue;
      }
      auto& into = value_kind(*at, *option) == ValueKind::none ? flags : valued;
      std::vector<std::string> names;
      for (const auto& name : option->get_lnames()) {
        names.push_back("--" + name);
      }
      if (!typed.starts_with("--")) {
        for (const auto& name : option->get_snames()) {
          names.push_back("-" + name);
        }
      }
      for (const auto& name : names) {
        const bool again = std::any_of(seen.begin(), seen.end(),
                                       [&](const Candidate& c) { return c.value == name; });
        if (!again) {
          seen.push_back({name, ""});
          into.push_back({name, option->get_description()});
        }
      }
    }
  }
  flags.insert(flags.end(), valued.begin(), valued.end());
  return flags;
}

Completions kept(Completions all, const std::string& typed, const std::string& prefix = "") {
  Completions out{{}, all.directive};
  for (auto& candidate : all.candidates) {
    candidate.value = prefix + candidate.value;
    const bool again = std::any_of(out.candidates.begin(), out.candidates.end(),
                                   [&](const Candidate& c) { return c.value == candidate.value; });
    if (candidate.value.starts_with(typed) && !again) {
      out.candidates.push_back(std::move(candidate));
    }
  }
  return out;
}

} // namespace

Completions complete(const CLI::App& root, const std::vector<std::string>& words,
                     CompletionSource& source) {
  const std::string typed = words.empty() ? "" : words.back();
  const Walk at = walk(root, words);
  if (at.ended || at.unknown) {
    return {};
  }
  if (at.pending.option) {
    return kept(
        values_of(value_kind(*at.pending.owner, *at.pending.option), typed, root, at.given, source),
        typed);
  }
  if (typed.starts_with("--") && typed.find('=') != std::string::npos) {
    const std::string name = typed.substr(0, typed.find('='));
    const Found found = find_option(*at.command, name);
    if (!found.option || value_kind(*found.owner, *found.option) == ValueKind::none) {
      return {};
    }
    const std::string value = typed.substr(name.size() + 1);
    return kept(values_of(value_kind(*found.owner, *found.option), value, root, at.given, source),
                typed, name + "=");
  }
  if (typed.starts_with("-")) {
    return kept({option_candidates(*at.command, typed)}, typed);
  }
  if (at.help) {
    return kept(values_of(ValueKind::command, typed, root, at.given, source), typed);
  }
  // A command's words: its own commands and its next positional's values, never options (a
  // shell would insert their common `-`).
  Completions out;
  if (at.positional == 0) {
    for (const CLI::App* nested : nested_commands(*at.command)) {
      out.candidates.push_back({nested->get_name(), nested->get_description()});
    }
    append_aliases(*at.command, typed, out.candidates);
  }
  if (at.command == &root) {
    out.candidates.push_back({"help", "Show a command's options and examples"});
  }
  const auto positionals = positionals_of(*at.command);
  if (!positionals.empty()) {
    const size_t next = std::min(at.positional, positionals.size() - 1);
    if (at.positional < positionals.size() || positionals[next]->get_expected_max() > 1) {
      Completions values =
          values_of(value_kind(*at.command, *positionals[next]), typed, root, at.given, source);
      out.directive = values.directive;
      out.candidates.insert(out.candidates.end(), values.candidates.begin(),
                            values.candidates.end());
    }
  }
  return kept(std::move(out), typed);
}

std::string format_completions(const Completions& completions) {
  std::string text;
  for (const auto& candidate : completions.candidates) {
    std::string description = candidate.description;
    std::replace_if(
        description.begin(), description.end(), [](char c) { return c == '\t' || c == '\n'; }, ' ');
    text += candidate.value + (description.empty() ? "" : "\t" + description) + "\n";
  }
  static const char* const k_directives[] = {":none", ":nospace", ":files", ":dirs"};
  return text + k_directives[static_cast<int>(completions.directive)] + "\n";
}

} // namespace sandboxer::commands
