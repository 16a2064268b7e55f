#include <CLI/CLI.hpp>
#include <cerrno>
#include <csignal>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include "cli/commands/commands.hpp"
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

// SIGWINCH as a readable pipe for the length of a -t session, so that the driver can wait for a
// resize of the local terminal along with the command's output; the previous disposition comes
// back at the end.
class WindowChanges {
public:
  WindowChanges() {
    if (::pipe2(m_fds, O_CLOEXEC | O_NONBLOCK) != 0) {
      m_fds[0] = m_fds[1] = -1;
      return;
    }
    s_write_fd = m_fds[1];
    struct sigaction action {};
    action.sa_handler = on_signal;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART;
    m_installed = sigaction(SIGWINCH, &action, &m_previous) == 0;
  }
  ~WindowChanges() {
    if (m_installed) {
      sigaction(SIGWINCH, &m_previous, nullptr);
    }
    s_write_fd = -1;
    for (int fd : m_fds) {
      if (fd >= 0) {
        ::close(fd);
      }
    }
  }
  WindowChanges(const WindowChanges&) = delete;
  WindowChanges& operator=(const WindowChanges&) = delete;
  int read_fd() const { return m_installed ? m_fds[0] : -1; }

private:
  static void on_signal(int) {
    int saved = errno;
    if (s_write_fd >= 0) {
      char byte = 1;
      // A full pipe already says "resized": nothing is lost.
      [[maybe_unused]] auto ignored = ::write(s_write_fd, &byte, 1);
    }
    errno = saved;
  }
  static inline volatile sig_atomic_t s_write_fd = -1;
  int m_fds[2] = {-1, -1};
  struct sigaction m_previous {};
  bool m_installed = false;
};

// The command's bytes go straight to our stdout and stderr, unbuffered and unmixed.
class StdIo : public ExecIo {
public:
  StdIo(bool attach_stdin, const WindowChanges* window)
      : m_attach_stdin(attach_stdin), m_window(window) {}
  void out(std::string_view bytes) override { write_all(STDOUT_FILENO, bytes); }
  void err(std::string_view bytes) override { write_all(STDERR_FILENO, bytes); }
  int stdin_fd() const override { return m_attach_stdin ? STDIN_FILENO : -1; }
  std::optional<TerminalSize> terminal_size() const override {
    winsize size{};
    if (!m_window || ::ioctl(STDOUT_FILENO, TIOCGWINSZ, &size) != 0 || size.ws_row == 0 ||
        size.ws_col == 0) {
      return std::nullopt;
    }
    return TerminalSize{size.ws_row, size.ws_col};
  }
  int resize_fd() const override { return m_window ? m_window->read_fd() : -1; }

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
  const WindowChanges* m_window;
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
  request.user = args.user;
  request.attach_stdin = args.interactive;
  // -t allocates a terminal in the backend whether or not we are on one, as `docker exec -t`
  // does (a CI job running `top` or a test that checks `[ -t 1 ]`); only the local side (raw
  // mode, resizes) needs a local terminal.
  request.tty = args.tty;
  const bool local_terminal = args.tty && isatty(STDIN_FILENO) && isatty(STDOUT_FILENO);
  std::optional<WindowChanges> window;
  std::optional<RawTerminal> raw;
  if (local_terminal) {
    window.emplace();
    raw.emplace(STDIN_FILENO);
  }
  StdIo io(args.interactive, window ? &*window : nullptr);
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
