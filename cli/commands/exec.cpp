#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "cli/commands/commands.hpp"
#include "cli/commands/exec_io.hpp"
#include "core/errors.hpp"

namespace sandboxer::commands {
namespace {

struct ExecArgs {
  std::string id;
  std::vector<std::string> command;
  std::vector<std::string> env;
  std::optional<std::string> workdir;
  std::optional<std::string> user;
  bool interactive = false;
  bool tty = false;
};

ExitCode run_exec(Context& context, const ExecArgs& args) {
  ExecRequest request;
  request.argv = args.command;
  request.env = key_value_options("--env", args.env);
  request.workdir = args.workdir;
  request.user = args.user;
  request.attach_stdin = args.interactive;
  // -t allocates a terminal in the backend whether or not we are on one, as `docker exec -t`
  // does (a CI job running `top` or a test that checks `[ -t 1 ]`); only the local side (raw
  // mode, resizes) needs a local terminal.
  request.tty = args.tty;
  LocalTerminal terminal(args.tty);
  StdIo io(args.interactive, terminal.window());
  int status = context.engine().exec(args.id, request, io);
  return static_cast<ExitCode>(status);
}

} // namespace

void setup_exec(CLI::App& app, Runner& runner) {
  auto args = std::make_shared<ExecArgs>();
  app.add_option("id", args->id, "Sandbox id or name")->required();
  app.add_option("command", args->command, "The command and its arguments, after --")->required();
  app.add_option("-e,--env", args->env, "Environment variable KEY=VALUE (repeatable)")
      ->allow_extra_args(false);
  app.add_option("-w,--workdir", args->workdir, "Working directory inside the sandbox");
  app.add_flag("-i,--interactive", args->interactive, "Attach stdin");
  app.add_option("-u,--user", args->user,
                 "Run as this user (name or uid; uid:gid where the backend takes it), as docker "
                 "exec -u; refused (exit 4) by a driver that cannot");
  app.add_flag("-t,--tty", args->tty,
               "Allocate a terminal in the sandbox (also without a local one; stderr then "
               "arrives with stdout)");
  app.footer("The exit code is the command's own (127: not found), or sandboxer's when it could "
             "not run it.");
  runner = [args](Context& context) { return run_exec(context, *args); };
}

} // namespace sandboxer::commands
