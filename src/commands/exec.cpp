#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <termios.h>
#include <unistd.h>

#include "commands/commands.hpp"

namespace sandboxer::commands {
namespace {

struct ExecArgs {
  std::string id;
  std::vector<std::string> command;
  std::vector<std::string> env;
  std::optional<std::string> workdir;
  bool interactive = false;
  bool tty = false;
};

// The command's bytes go straight to our stdout and stderr, unbuffered and unmixed.
class StdIo : public ExecIo {
public:
  explicit StdIo(bool attach_stdin) : m_attach_stdin(attach_stdin) {}
  void out(std::string_view bytes) override { write_all(STDOUT_FILENO, bytes); }
  void err(std::string_view bytes) override { write_all(STDERR_FILENO, bytes); }
  int stdin_fd() const override { return m_attach_stdin ? STDIN_FILENO : -1; }

private:
  static void write_all(int fd, std::string_view bytes) {
    while (!bytes.empty()) {
      ssize_t n = ::write(fd, bytes.data(), bytes.size());
      if (n <= 0) {
        return; // a closed reader: the rest is dropped, as a pipe would
      }
      bytes.remove_prefix(n);
    }
  }
  bool m_attach_stdin;
};

// The local terminal in raw mode for the length of a -t session, so that keys (Ctrl-C included) go
// to the command's terminal instead of being handled here; the settings come back on every way out
// of the scope (return or exception).
class RawTerminal {
public:
  explicit RawTerminal(int fd) : m_fd(fd) {
    if (tcgetattr(m_fd, &m_saved) != 0) {
      return;
    }
    termios raw = m_saved;
    cfmakeraw(&raw);
    m_active = tcsetattr(m_fd, TCSADRAIN, &raw) == 0;
  }
  ~RawTerminal() {
    if (m_active) {
      tcsetattr(m_fd, TCSADRAIN, &m_saved);
    }
  }
  RawTerminal(const RawTerminal&) = delete;
  RawTerminal& operator=(const RawTerminal&) = delete;

private:
  int m_fd;
  termios m_saved{};
  bool m_active = false;
};

ExitCode run_exec(Context& context, const ExecArgs& args) {
  ExecRequest request;
  request.argv = args.command;
  for (const auto& item : args.env) {
    auto eq = item.find('=');
    if (eq == std::string::npos || eq == 0) {
      throw UsageError(fmt::format("--env \"{}\": expected KEY=VALUE", item));
    }
    request.env[item.substr(0, eq)] = item.substr(eq + 1);
  }
  request.workdir = args.workdir;
  request.attach_stdin = args.interactive;
  // A tty only makes sense when we are on one; in CI the flag is harmlessly ignored.
  request.tty = args.tty && isatty(STDIN_FILENO) && isatty(STDOUT_FILENO);
  StdIo io(args.interactive);
  std::optional<RawTerminal> raw;
  if (request.tty) {
    raw.emplace(STDIN_FILENO);
  }
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
  app.add_flag("-t,--tty", args->tty, "Allocate a terminal (when stdin and stdout are terminals)");
  app.footer("The exit code is the command's own (127: not found), or sandboxer's when it could "
             "not run it.");
  runner = [args](Context& context) { return run_exec(context, *args); };
}

} // namespace sandboxer::commands
