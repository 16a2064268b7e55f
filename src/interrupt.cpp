#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <unistd.h>

#include <sandboxer/interrupt.hpp>

namespace sandboxer::interrupt {
namespace {

std::atomic<int> g_count{0};
std::atomic<int> g_last{0};
int g_pipe[2] = {-1, -1};
thread_local int t_shields = 0;

// The third signal: the operator wants out now, cleanup or not.
constexpr int k_signals_before_exit = 3;

void on_signal(int signal) {
  int saved = errno;
  g_last.store(signal);
  int seen = g_count.fetch_add(1) + 1;
  if (g_pipe[1] >= 0) {
    char byte = 1;
    // A full pipe is readable already: nothing is lost.
    [[maybe_unused]] auto ignored = ::write(g_pipe[1], &byte, 1);
  }
  if (seen >= k_signals_before_exit) {
    static const char k_message[] = "sandboxer: third signal: exiting now without cleanup\n";
    [[maybe_unused]] auto ignored = ::write(STDERR_FILENO, k_message, sizeof k_message - 1);
    ::_exit(128 + signal);
  }
  errno = saved;
}

} // namespace

void install() {
  if (g_pipe[0] < 0 && ::pipe2(g_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
    g_pipe[0] = g_pipe[1] = -1;
  }
  struct sigaction action {};
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  for (int signal : {SIGINT, SIGTERM, SIGHUP}) {
    sigaction(signal, &action, nullptr);
  }
}

int last_signal() {
  return g_last.load();
}

int count() {
  return g_count.load();
}

int wake_fd() {
  return g_pipe[0];
}

void drain_wake_fd() {
  if (g_pipe[0] >= 0) {
    char buffer[64];
    while (::read(g_pipe[0], buffer, sizeof buffer) > 0) {
    }
  }
}

bool requested() {
  return t_shields == 0 && g_count.load() > 0;
}

void check() {
  if (requested()) {
    throw Interrupted(last_signal());
  }
}

void sleep_for(std::chrono::milliseconds duration) {
  auto until = std::chrono::steady_clock::now() + duration;
  while (true) {
    check();
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                    until - std::chrono::steady_clock::now())
                    .count();
    if (left <= 0) {
      return;
    }
    pollfd fd{wake_fd(), POLLIN, 0};
    // Without the pipe (install() not called: tests) this is a plain sleep in steps.
    ::poll(&fd, fd.fd >= 0 ? 1 : 0, static_cast<int>(std::min<long long>(left, 100)));
  }
}

std::string signal_name(int signal) {
  switch (signal) {
  case SIGINT:
    return "SIGINT";
  case SIGTERM:
    return "SIGTERM";
  case SIGHUP:
    return "SIGHUP";
  case SIGQUIT:
    return "SIGQUIT";
  case SIGKILL:
    return "SIGKILL";
  default:
    return fmt::format("signal {}", signal);
  }
}

Shield::Shield() {
  ++t_shields;
}

Shield::~Shield() {
  --t_shields;
}

void reset_for_tests() {
  g_count.store(0);
  g_last.store(0);
  drain_wake_fd();
}

void simulate(int signal) {
  g_last.store(signal);
  g_count.fetch_add(1);
}

} // namespace sandboxer::interrupt

namespace sandboxer {

Interrupted::Interrupted(int signal)
    : Error(static_cast<ExitCode>(128 + signal),
            fmt::format("interrupted by {}", interrupt::signal_name(signal))),
      m_signal(signal) {}

} // namespace sandboxer
