#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <time.h>
#include <unistd.h>

#include <sandboxer/interrupt.hpp>

#include "sdk/testing.hpp"

namespace sandboxer::interrupt {
namespace {

std::atomic<int> g_count{0};
std::atomic<int> g_last{0};
int g_pipe[2] = {-1, -1};
thread_local int t_shields = 0;
thread_local int t_tolerated = 0;

// The third signal: the operator wants out now, cleanup or not.
constexpr int k_signals_before_exit = 3;
// Off a terminal every stderr line starts with its time, as the log's do (decided at install()).
bool g_stamp = false;

// Writes `value` as `width` digits at `out`.
char* digits(char* out, long value, int width) {
  for (int i = width - 1; i >= 0; --i) {
    out[i] = static_cast<char>('0' + value % 10);
    value /= 10;
  }
  return out + width;
}

// "YYYY-MM-DDTHH:MM:SS.mmmZ " in `out` (at least 25 bytes), from clock_gettime and arithmetic
// alone: a signal handler may call neither gmtime nor malloc. Returns the length.
size_t utc_stamp(char* out) {
  struct timespec now {};
  ::clock_gettime(CLOCK_REALTIME, &now);
  long days = static_cast<long>(now.tv_sec / 86400), second_of_day = now.tv_sec % 86400;
  // Civil date from days since 1970-01-01 (the proleptic Gregorian calendar, in 400-year eras).
  long z = days + 719468, era = z / 146097, day_of_era = z - era * 146097;
  long year_of_era =
      (day_of_era - day_of_era / 1460 + day_of_era / 36524 - day_of_era / 146096) / 365;
  long day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
  long month_index = (5 * day_of_year + 2) / 153;
  long day = day_of_year - (153 * month_index + 2) / 5 + 1;
  long month = month_index < 10 ? month_index + 3 : month_index - 9;
  long year = year_of_era + era * 400 + (month <= 2 ? 1 : 0);
  char* p = out;
  p = digits(p, year, 4);
  *p++ = '-';
  p = digits(p, month, 2);
  *p++ = '-';
  p = digits(p, day, 2);
  *p++ = 'T';
  p = digits(p, second_of_day / 3600, 2);
  *p++ = ':';
  p = digits(p, second_of_day / 60 % 60, 2);
  *p++ = ':';
  p = digits(p, second_of_day % 60, 2);
  *p++ = '.';
  p = digits(p, now.tv_nsec / 1000000, 3);
  *p++ = 'Z';
  *p++ = ' ';
  return static_cast<size_t>(p - out);
}

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
    char line[sizeof k_message + 32];
    size_t length = g_stamp ? utc_stamp(line) : 0;
    std::memcpy(line + length, k_message, sizeof k_message - 1);
    [[maybe_unused]] auto ignored = ::write(STDERR_FILENO, line, length + sizeof k_message - 1);
    ::_exit(128 + signal);
  }
  errno = saved;
}

} // namespace

void install() {
  if (g_pipe[0] < 0 && ::pipe2(g_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
    g_pipe[0] = g_pipe[1] = -1;
  }
  g_stamp = ::isatty(STDERR_FILENO) != 1;
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
  return t_shields == 0 && g_count.load() > t_tolerated;
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

Tolerance::Tolerance(int signals) : m_previous(t_tolerated) {
  t_tolerated = signals;
}

Tolerance::~Tolerance() {
  t_tolerated = m_previous;
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
