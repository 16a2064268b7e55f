#pragma once
// What `exec` and `run` share to connect a command in a sandbox to this process's terminal:
// stdout and stderr straight through, stdin on -i, and with -t the local terminal in raw mode and
// its resizes.

#include <cerrno>
#include <csignal>
#include <fcntl.h>
#include <map>
#include <optional>
#include <string>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>
#include <vector>

#include <sandboxer/driver.hpp>

namespace sandboxer::commands {

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

// -t on a local terminal: raw mode and resizes for the length of the session (nothing off one: the
// backend still gets a terminal, as `docker exec -t` gives one).
class LocalTerminal {
public:
  explicit LocalTerminal(bool tty) {
    if (tty && isatty(STDIN_FILENO) && isatty(STDOUT_FILENO)) {
      m_window.emplace();
      m_raw.emplace(STDIN_FILENO);
    }
  }
  const WindowChanges* window() const { return m_window ? &*m_window : nullptr; }
  // The terminal's own settings back before the session ends (the window stays watched).
  void restore() { m_raw.reset(); }

private:
  std::optional<WindowChanges> m_window;
  std::optional<RawTerminal> m_raw;
};

} // namespace sandboxer::commands
