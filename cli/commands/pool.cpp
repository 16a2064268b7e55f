// `sandboxer pool fill|status`: warm pools (docs/pools.md). Filling is what reap does after its
// destroys; this verb does it now, for one profile or all that have a pool.
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "cli/commands/commands.hpp"
#include "core/lifecycle/rules.hpp"

namespace sandboxer::commands {
namespace {

struct PoolArgs {
  std::vector<std::string> profiles;
  std::string wait = "1m";
  bool no_wait = false;
  int parallel = 4;
};

nlohmann::json fill_json(const PoolFill& fill, const std::string& profile) {
  return {{"pool", fill.pool},         {"profile", profile},      {"size", fill.size},
          {"ready", fill.ready},       {"filling", fill.filling}, {"made", fill.made},
          {"recycled", fill.recycled}, {"errors", fill.errors}};
}

ExitCode run_fill(Context& context, const PoolArgs& args) {
  std::vector<Profile> profiles = pool_profiles(context, args.profiles);
  // The reaper's lock: a fill and a reap (which refills too) never make members side by side.
  LockFile::Guard guard = lock_reaper(context, args.no_wait, args.wait);
  if (!guard.held()) {
    spdlog::info("a reaper holds {} (--no-wait): it fills the pools; exiting with code 5",
                 (context.ledger().state_dir() / "reap.lock").string());
    return ExitCode::lock_timeout;
  }
  nlohmann::json results = nlohmann::json::array();
  Table table{{"POOL", "SIZE", "READY", "FILLING", "MADE", "RECYCLED", "ERRORS"}, {}};
  size_t errors = 0;
  for (const auto& profile : profiles) {
    PoolFill fill = context.engine().fill_pool(profile, args.parallel);
    for (const auto& error : fill.errors) {
      spdlog::error("pool {}: {}", fill.pool, error);
    }
    errors += fill.errors.size();
    results.push_back(fill_json(fill, profile.name));
    table.rows.push_back({fill.pool, std::to_string(fill.size), std::to_string(fill.ready),
                          std::to_string(fill.filling), std::to_string(fill.made),
                          std::to_string(fill.recycled), std::to_string(fill.errors.size())});
  }
  context.out().print(results, [&] { return table; });
  return errors == 0 ? ExitCode::ok : ExitCode::partial;
}

ExitCode run_status(Context& context, const PoolArgs& args) {
  std::vector<Profile> profiles = pool_profiles(context, args.profiles);
  const LedgerData data = context.ledger().read(ReadScope::summary);
  const TimePoint now = context.clock().now();
  nlohmann::json results = nlohmann::json::array();
  Table table{{"POOL", "PROFILE", "SIZE", "READY", "FILLING", "STALE", "OLDEST"}, {}};
  for (const auto& profile : profiles) {
    const SandboxRecord wanted = context.engine().record_from(profile);
    const std::string key = lifecycle_rules::pool_key_of(wanted);
    const std::string spec_hash = lifecycle_rules::pool_spec_hash(wanted);
    const lifecycle_rules::PoolCensus census =
        lifecycle_rules::pool_census(data.sandboxes, key, spec_hash, now);
    const int stale = static_cast<int>(census.stale.size()) + census.expired;
    const std::optional<TimePoint>& oldest = census.oldest;
    const auto age = oldest ? std::chrono::duration_cast<Seconds>(now - *oldest) : Seconds(0);
    results.push_back(
        {{"pool", key},
         {"profile", profile.name},
         {"size", profile.pool->size},
         {"max_age", format_duration(profile.pool->max_age)},
         {"ready", census.ready},
         {"filling", census.filling},
         {"stale", stale},
         {"oldest_pooled_at", oldest ? nlohmann::json(format_time(*oldest)) : nullptr},
         {"oldest_age_seconds", oldest ? nlohmann::json(age.count()) : nullptr}});
    table.rows.push_back({key, profile.name, std::to_string(profile.pool->size),
                          std::to_string(census.ready), std::to_string(census.filling),
                          std::to_string(stale), oldest ? format_duration(age) : "-"});
  }
  context.out().print(results, [&] { return table; });
  return ExitCode::ok;
}

} // namespace

std::vector<Profile> pool_profiles(Context& context, const std::vector<std::string>& names) {
  auto search = context.profile_search_path();
  std::vector<Profile> profiles;
  if (!names.empty()) {
    for (const auto& name : names) {
      Profile profile = load_profile(find_profile(name, search), search);
      if (!profile.pool) {
        throw UsageError(fmt::format("profile {} has no pool (add pool: {{size: 2, max_age: 1h}}; "
                                     "docs/pools.md)",
                                     profile.name));
      }
      profiles.push_back(std::move(profile));
    }
    return profiles;
  }
  for (const auto& [name, path] : list_profiles(search)) {
    try {
      Profile profile = load_profile(path, search);
      if (profile.pool) {
        profiles.push_back(std::move(profile));
      }
    } catch (const Error& e) {
      // One broken profile must not stop every other pool's refill (cron runs this).
      spdlog::warn("profile {} ({}) is skipped: {}", name, path.string(), e.what());
    }
  }
  return profiles;
}

void setup_pool(CLI::App& app, Runner& runner) {
  auto args = std::make_shared<PoolArgs>();
  auto fill = app.add_subcommand(
      "fill", "Make members until each pool holds its size; recycle those of an old spec");
  auto status = app.add_subcommand("status", "Show each pool: size, ready, filling, stale, age");
  for (auto* sub : {fill, status}) {
    sub->add_option("-p,--profile", args->profiles,
                    "This profile's pool (repeatable; default every profile with a pool)")
        ->expected(1)
        ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  }
  auto* wait = fill->add_option("--wait", args->wait,
                                "Wait this long for a running reaper to finish (default 1m)");
  fill->add_flag("--no-wait", args->no_wait, "Exit at once (code 5) if a reaper runs")
      ->excludes(wait);
  fill->add_option("--parallel", args->parallel,
                   "Members made at once, after the first (default 4)")
      ->check(CLI::Range(1, 64));
  app.require_subcommand(1);
  runner = [args, fill](Context& context) {
    return fill->parsed() ? run_fill(context, *args) : run_status(context, *args);
  };
}

} // namespace sandboxer::commands
