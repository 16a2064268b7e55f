#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "cli/commands/commands.hpp"
#include "cli/commands/exec_io.hpp"
#include "core/errors.hpp"

namespace sandboxer::commands {

void add_exec_flags(CLI::App& app, ExecFlags& flags) {
  app.add_option("-e,--env", flags.env, "Environment variable KEY=VALUE (repeatable)")
      ->allow_extra_args(false);
  app.add_option("-w,--workdir", flags.workdir, "Working directory inside the sandbox");
  app.add_flag("-i,--interactive", flags.interactive, "Attach stdin");
  app.add_option("-u,--user", flags.user,
                 "Run as this user (name or uid; uid:gid where the backend takes it), as docker "
                 "exec -u; refused (exit 4) by a driver that cannot");
  app.add_flag("-t,--tty", flags.tty,
               "Allocate a terminal in the sandbox (also without a local one; stderr then "
               "arrives with stdout)");
}

ExecRequest exec_request_of(const ExecFlags& flags, const std::vector<std::string>& command) {
  ExecRequest request;
  request.argv = command;
  request.env = key_value_options("--env", flags.env);
  request.workdir = flags.workdir;
  request.user = flags.user;
  request.attach_stdin = flags.interactive;
  // -t allocates a terminal in the backend whether or not we are on one, as `docker exec -t`
  // does (a CI job running `top` or a test that checks `[ -t 1 ]`); only the local side (raw
  // mode, resizes) needs a local terminal.
  request.tty = flags.tty;
  return request;
}

namespace {

struct ExecArgs {
  std::string id;
  std::vector<std::string> command;
  ExecFlags flags;
};

ExitCode run_exec(Context& context, const ExecArgs& args) {
  ExecRequest request = exec_request_of(args.flags, args.command);
  LocalTerminal terminal(args.flags.tty);
  StdIo io(args.flags.interactive, terminal.window());
  int status = context.engine().exec(args.id, request, io);
  return static_cast<ExitCode>(status);
}

} // namespace

void setup_exec(CLI::App& app, Runner& runner) {
  auto args = std::make_shared<ExecArgs>();
  app.add_option("id", args->id, "Sandbox id or name")->required();
  app.add_option("command", args->command, "The command and its arguments, after --")->required();
  add_exec_flags(app, args->flags);
  app.footer("The exit code is the command's own (127: not found), or sandboxer's when it could "
             "not run it.");
  runner = [args](Context& context) { return run_exec(context, *args); };
}

} // namespace sandboxer::commands
