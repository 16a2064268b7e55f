#include <CLI/CLI.hpp>

#include "cli/commands/commands.hpp"
#include "core/errors.hpp"

namespace sandboxer::commands {
namespace {

struct RestoreArgs {
  std::string snapshot;
  std::optional<std::string> name;
  std::optional<std::string> ttl;
  std::optional<std::string> idempotency_key;
  std::optional<std::string> in_place;
};

ExitCode run_restore(Context& context, const RestoreArgs& args) {
  if (args.in_place) {
    if (args.name || args.ttl || args.idempotency_key) {
      throw UsageError("--in-place keeps the sandbox's name and TTL: it takes no --name, --ttl or "
                       "--idempotency-key");
    }
    SandboxRecord record = context.engine().restore_in_place(args.snapshot, *args.in_place);
    print_created(context, {record, false, {}});
    return ExitCode::ok;
  }
  CreateOptions options;
  options.name = args.name;
  if (args.ttl) {
    options.ttl = duration_option("--ttl", *args.ttl);
  }
  options.idempotency_key = args.idempotency_key;
  print_created(context, run_printing_failure(context, [&] {
                  return context.engine().restore(args.snapshot, options);
                }));
  return ExitCode::ok;
}

} // namespace

void setup_restore(CLI::App& app, Runner& runner) {
  auto args = std::make_shared<RestoreArgs>();
  app.add_option("snapshot", args->snapshot, "Snapshot id (snp-...) or SANDBOX:NAME")->required();
  app.add_option("--name", args->name, "A unique name for the new sandbox");
  app.add_option("--ttl", args->ttl, "Lifetime of the new sandbox (default: the original's)");
  app.add_option("--idempotency-key", args->idempotency_key,
                 "Return the live sandbox created with this key instead of a second one");
  app.add_option("--in-place", args->in_place,
                 "Replace the backend of this live sandbox (id or name) with the snapshot's, "
                 "keeping its id, name, TTL and profile");
  runner = [args](Context& context) { return run_restore(context, *args); };
}

} // namespace sandboxer::commands
