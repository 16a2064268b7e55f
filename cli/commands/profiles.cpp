#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <iostream>

#include <sandboxer/log.hpp>

#include "cli/commands/commands.hpp"
#include "core/profile/profile.hpp"

namespace sandboxer::commands {
namespace {

struct ProfilesArgs {
  CLI::App* list = nullptr;
  CLI::App* show = nullptr;
  CLI::App* validate = nullptr;
  std::string show_name;
  std::vector<std::string> files;
};

// A profile with its driver section bound by the driver's own schema.
Profile load_checked(const Context& context, const std::string& name_or_path,
                     const std::vector<std::filesystem::path>& search) {
  Profile profile = load_profile(find_profile(name_or_path, search), search);
  profile.driver_spec = context.drivers().check_profile(profile);
  return profile;
}

ExitCode run_list(Context& context) {
  auto search = context.profile_search_path();
  nlohmann::json items = nlohmann::json::array();
  Table table{{"NAME", "DRIVER", "PATH", "PROBLEM"}, {}};
  for (const auto& [name, path] : list_profiles(search)) {
    nlohmann::json item = {{"name", name}, {"path", path.string()}};
    try {
      Profile profile = load_checked(context, path.string(), search);
      item["driver"] = profile.driver;
      item["error"] = nullptr;
    } catch (const Error& e) {
      item["driver"] = nullptr;
      item["error"] = e.what();
    }
    table.rows.push_back({name, item["driver"].is_null() ? "-" : item["driver"].get<std::string>(),
                          path.string(),
                          item["error"].is_null() ? "" : item["error"].get<std::string>()});
    items.push_back(std::move(item));
  }
  context.out().print(items, [&] { return table; });
  return ExitCode::ok;
}

ExitCode run_show(Context& context, const std::string& name) {
  Profile profile = load_checked(context, name, context.profile_search_path());
  nlohmann::json data = profile.resolved;
  data[profile.driver] = profile.driver_spec;
  data["name"] = profile.name;
  nlohmann::json shown = {{"name", profile.name},
                          {"path", profile.path.string()},
                          {"hash", profile.hash},
                          {"profile", data}};
  if (context.out().format() == Format::table) {
    // A human reads a resolved profile best as the YAML it came from: the driver's defaults are
    // filled in, but what the profile wrote stays as written ("memory: 512m", not its bytes,
    // which JSON and YAML output give).
    nlohmann::json written = profile.resolved.value(profile.driver, nlohmann::json::object());
    nlohmann::json& shown_spec = data[profile.driver];
    if (written.is_object() && shown_spec.is_object()) {
      for (const auto& [key, value] : written.items()) {
        if (shown_spec.contains(key) && !value.is_object() && !value.is_array()) {
          shown_spec[key] = value;
        }
      }
    }
    std::cout << "# " << profile.path.string() << " (" << profile.hash << ")\n" << to_yaml(data);
    return ExitCode::ok;
  }
  context.out().print(shown, nullptr);
  return ExitCode::ok;
}

// For CI linting: every file is checked, every problem printed, one exit code for all.
ExitCode run_validate(Context& context, const std::vector<std::string>& files) {
  auto search = context.profile_search_path();
  nlohmann::json items = nlohmann::json::array();
  int bad = 0;
  int unreachable = 0; // files whose driver failed, so that nothing could be said of them
  for (const auto& file : files) {
    try {
      Profile profile = load_checked(context, file, search);
      for (const auto& warning : profile.warnings) {
        std::cerr << log::prefix() << "warning: " << warning << "\n";
      }
      items.push_back(
          {{"file", file}, {"ok", true}, {"error", nullptr}, {"warnings", profile.warnings}});
      context.out().note(fmt::format("{}: ok ({} driver {})", file, profile.name, profile.driver));
    } catch (const Error& e) {
      ++(e.code() == ExitCode::backend ? unreachable : bad);
      items.push_back({{"file", file},
                       {"ok", false},
                       {"error", e.what()},
                       {"warnings", nlohmann::json::array()}});
      std::cerr << log::prefix() << "error: " << e.what() << "\n";
    }
  }
  if (context.out().format() != Format::table) {
    context.out().print(items, nullptr);
  }
  // An invalid profile is the file's fault (2); a driver that did not answer is the backend's (4).
  return bad > 0 ? ExitCode::usage : unreachable > 0 ? ExitCode::backend : ExitCode::ok;
}

} // namespace

void setup_profiles(CLI::App& app, Runner& runner) {
  auto args = std::make_shared<ProfilesArgs>();
  args->list = app.add_subcommand("list", "List the profiles found in the search path");
  args->show = app.add_subcommand("show", "Print a profile fully resolved (extends, variables)");
  args->show->add_option("name", args->show_name, "Profile name or file")->required();
  args->validate = app.add_subcommand("validate", "Check profile files, with their driver schema");
  args->validate->add_option("files", args->files, "Profile files or names")->required();
  app.require_subcommand(0, 1);
  runner = [args](Context& context) {
    if (args->show->parsed()) {
      return run_show(context, args->show_name);
    }
    if (args->validate->parsed()) {
      return run_validate(context, args->files);
    }
    return run_list(context);
  };
}

} // namespace sandboxer::commands
