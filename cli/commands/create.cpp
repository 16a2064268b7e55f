#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <sandboxer/log.hpp>

#include "cli/commands/commands.hpp"
#include "core/errors.hpp"
#include "core/profile/profile.hpp"

namespace sandboxer::commands {
namespace {

struct CreateArgs {
  CreateFlags flags;
  bool reuse_any = false;
};

ExitCode run_create(Context& context, const CreateArgs& args) {
  Profile profile = profile_of(context, args.flags);
  CreateOptions options = create_options_of(args.flags);
  options.reuse_any = args.reuse_any;
  CreateOutcome outcome =
      run_printing_failure(context, [&] { return context.engine().create(profile, options); });
  print_created(context, outcome);
  return ExitCode::ok;
}

} // namespace

CreateOutcome run_printing_failure(Context& context, const std::function<CreateOutcome()>& run) {
  try {
    return run();
  } catch (const Error&) {
    // A record was written (failed, with its error): -o json/yaml scripts get it on stdout along
    // with the exit code, so they have both the id and the reason.
    const auto& failed = context.engine().failed_record();
    if (failed && context.out().format() != Format::table) {
      nlohmann::json data = public_json(*failed, context.clock().now(), false);
      data["reused"] = false;
      data["notices"] = nlohmann::json::array();
      context.out().print(data, nullptr);
    }
    throw;
  }
}

void print_created(Context& context, const CreateOutcome& outcome) {
  TimePoint now = context.clock().now();
  if (context.out().quiet() && context.out().format() == Format::table) {
    fmt::print("{}\n", outcome.record.id);
    // --quiet silences the log, but a cap is never silent.
    for (const auto& notice : outcome.notices) {
      fmt::print(stderr, "{}notice: {}: {}\n", log::prefix(), outcome.record.id, notice);
    }
    return;
  }
  nlohmann::json data = public_json(outcome.record, now, false);
  data["reused"] = outcome.reused;
  data["notices"] = outcome.notices;
  context.out().print(data, [&] {
    Table table = record_table(outcome.record, now);
    for (const auto& notice : outcome.notices) {
      table.rows.push_back({"notice:", notice});
    }
    return table;
  });
}

void add_create_flags(CLI::App& app, CreateFlags& flags, const char* ttl_help) {
  app.add_option("-p,--profile", flags.profile, "Profile name or file (default: default)");
  app.add_option("--name", flags.name, "A unique name for the sandbox");
  app.add_option("--ttl", flags.ttl, ttl_help);
  app.add_option("--idempotency-key", flags.idempotency_key,
                 "Return the live sandbox created with this key instead of a second one");
  app.add_option("-l,--label", flags.labels, "Extra label KEY=VALUE (repeatable)")
      ->allow_extra_args(false);
  app.add_flag("--no-pool", flags.no_pool,
               "Create it cold even when the profile has a warm pool (docs/pools.md)");
}

Profile profile_of(Context& context, const CreateFlags& flags) {
  auto search = context.profile_search_path();
  return load_profile(find_profile(flags.profile, search), search);
}

CreateOptions create_options_of(const CreateFlags& flags) {
  CreateOptions options;
  options.name = flags.name;
  if (flags.ttl) {
    options.ttl = duration_option("--ttl", *flags.ttl);
  }
  options.idempotency_key = flags.idempotency_key;
  options.labels = key_value_options("--label", flags.labels);
  options.no_pool = flags.no_pool;
  return options;
}

void setup_create(CLI::App& app, Runner& runner) {
  auto args = std::make_shared<CreateArgs>();
  add_create_flags(app, args->flags, "Lifetime, e.g. 45m (capped by the profile's ttl.max)");
  app.add_flag("--reuse-any", args->reuse_any,
               "With --idempotency-key: return the key's sandbox even when it was made with "
               "another profile or --ttl (else exit 7)");
  runner = [args](Context& context) { return run_create(context, *args); };
}

} // namespace sandboxer::commands
