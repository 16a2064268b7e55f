// `sandboxer __complete`: the real CompletionSource, which answers a TAB from what is on this
// machine without side effects: it reads the local ledger's files (no lock, no state dir made, no
// migration), lists the profile directories by file name (no YAML parsed) and the drivers by
// name (no external driver started). A shared PostgreSQL ledger answers no ids: a TAB opens no
// connection.
#include <fmt/format.h>
#include <iostream>
#include <optional>

#include <sandboxer/log.hpp>

#include "cli/commands/commands.hpp"
#include "cli/commands/complete.hpp"
#include "cli/ledger_select.hpp"
#include "cli/registry.hpp"
#include "core/catalog/catalog.hpp"
#include "core/ledger/ledger.hpp"
#include "core/profile/profile.hpp"
#include "core/schemas/schemas.hpp"

namespace sandboxer::commands {
namespace {

std::optional<std::string> given_option(const GivenOptions& given, const std::string& name) {
  auto it = given.find(name);
  return it == given.end() ? std::nullopt : std::optional(it->second);
}

// The local ledger that the words' --ledger/--state-dir (else the environment and config.yaml)
// name, or nothing for a shared one.
std::optional<Ledger> local_ledger(const GivenOptions& given) {
  const Config config = load_config_if_any();
  if (ledger_choice(given_option(given, "ledger"), config).kind !=
      ledger::LedgerChoice::Kind::local) {
    return std::nullopt;
  }
  return Ledger(resolve_state_dir(given_option(given, "state-dir")), Seconds(0));
}

class LocalSource : public CompletionSource {
public:
  std::vector<Candidate> sandboxes(const GivenOptions& given, bool live_only) override {
    std::vector<Candidate> out;
    scan(given, [&](const SandboxRecord& record) {
      if (live_only && !is_live(record.state)) {
        return;
      }
      const std::string about = fmt::format("{}, {}", to_string(record.state), record.profile.name);
      out.push_back({record.id, record.name.empty() ? about : record.name + ", " + about});
      if (!record.name.empty()) {
        out.push_back({record.name, record.id + ", " + about});
      }
    });
    return out;
  }

  std::vector<Candidate> snapshots(const GivenOptions& given) override {
    std::vector<Candidate> out;
    scan(given, [&](const SandboxRecord& record) {
      const std::string sandbox = record.name.empty() ? record.id : record.name;
      for (const auto& snapshot : record.snapshots) {
        out.push_back({sandbox + ":" + snapshot.name, snapshot.id});
        out.push_back({snapshot.id, sandbox + ":" + snapshot.name});
      }
    });
    return out;
  }

  std::vector<Candidate> profiles(const GivenOptions& given) override {
    std::vector<Candidate> out;
    for (const auto& [name, path] :
         list_profiles(profile_search_path(given_option(given, "profiles-dir")))) {
      out.push_back({name, path.string()});
    }
    return out;
  }

  std::vector<Candidate> drivers() override {
    DriverCatalog catalog(builtin_drivers(), external_driver_path());
    std::vector<Candidate> out;
    for (const auto* factory : catalog.builtin()) {
      out.push_back({std::string(factory->name()), "built in"});
    }
    for (const auto& file : catalog.external()) {
      out.push_back({file.name, file.path.string()});
    }
    return out;
  }

  std::vector<Candidate> schemas() override {
    std::vector<Candidate> out;
    for (auto& name : sandboxer::schemas::names()) {
      out.push_back({std::move(name), ""});
    }
    return out;
  }

private:
  template <typename Visit> void scan(const GivenOptions& given, Visit visit) {
    // A ledger that cannot be read offers no ids; the other candidates still come.
    try {
      auto ledger = local_ledger(given);
      if (ledger) {
        ledger->scan(Records::resident, ReadScope::summary, [&](SandboxRecord& record) {
          visit(record);
          return true;
        });
      }
    } catch (const std::exception&) {
    }
  }
};

} // namespace

int run_complete(const CLI::App& root, const std::vector<std::string>& words) {
  // Whatever goes wrong (no HOME, a corrupt ledger, a bad config.yaml), a TAB says nothing on
  // the terminal the user types in.
  log::init("off");
  LocalSource source;
  Completions completions;
  try {
    completions = complete(root, words, source);
  } catch (const std::exception&) {
    completions = {};
  }
  std::cout << format_completions(completions);
  return 0;
}

} // namespace sandboxer::commands
