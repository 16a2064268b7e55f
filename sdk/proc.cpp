#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <csignal>
#include <cstring>
#include <deque>
#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <functional>
#include <future>
#include <mutex>
#include <poll.h>
#include <spawn.h>
#include <spdlog/spdlog.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <utility>

#include <sandboxer/error.hpp>
#include <sandboxer/interrupt.hpp>
#include <sandboxer/proc.hpp>

extern char** environ;

namespace sandboxer::proc {
namespace {

// A pipe whose ends close themselves.
struct Pipe {
  int fds[2] = {-1, -1};
  Pipe() {
    if (pipe2(fds, O_CLOEXEC) != 0) {
      throw Error(ExitCode::runtime, fmt::format("cannot create a pipe: {}", strerror(errno)));
    }
  }
  ~Pipe() {
    close_read();
    close_write();
  }
  void close_read() {
    if (fds[0] >= 0) {
      close(fds[0]);
      fds[0] = -1;
    }
  }
  void close_write() {
    if (fds[1] >= 0) {
      close(fds[1]);
      fds[1] = -1;
    }
  }
};

// Command::terminal: a pseudo-terminal whose slave side becomes the program's stdout and stderr
// (and stdin when it is given none); the master side is read as its output.
struct Pty {
  int master = -1;
  int slave = -1;
  Pty() {
    char name[128];
    master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (master < 0 || grantpt(master) != 0 || unlockpt(master) != 0 ||
        ptsname_r(master, name, sizeof name) != 0 ||
        (slave = ::open(name, O_RDWR | O_NOCTTY | O_CLOEXEC)) < 0) {
      const int error = errno;
      close_both();
      throw Error(ExitCode::runtime,
                  fmt::format("cannot open a pseudo-terminal: {}", strerror(error)));
    }
  }
  ~Pty() { close_both(); }
  Pty(const Pty&) = delete;
  Pty& operator=(const Pty&) = delete;
  void close_both() {
    for (int* fd : {&master, &slave}) {
      if (*fd >= 0) {
        ::close(*fd);
        *fd = -1;
      }
    }
  }
};

std::vector<std::string> build_environment(const Command& command) {
  std::map<std::string, std::string> merged;
  if (!command.clear_env) {
    for (char** entry = environ; *entry; ++entry) {
      std::string_view text(*entry);
      auto eq = text.find('=');
      if (eq != std::string_view::npos) {
        merged[std::string(text.substr(0, eq))] = std::string(text.substr(eq + 1));
      }
    }
  }
  for (const auto& [key, value] : command.env_set) {
    merged[key] = value;
  }
  std::vector<std::string> result;
  result.reserve(merged.size());
  for (const auto& [key, value] : merged) {
    result.push_back(key + "=" + value);
  }
  return result;
}

std::vector<char*> as_pointers(std::vector<std::string>& strings) {
  std::vector<char*> pointers;
  for (auto& s : strings) {
    pointers.push_back(s.data());
  }
  pointers.push_back(nullptr);
  return pointers;
}

// posix_spawn* return an error number instead of setting errno.
void check_spawn(int rc, const char* what) {
  if (rc != 0) {
    throw Error(ExitCode::runtime,
                fmt::format("cannot prepare a subprocess ({}): {}", what, strerror(rc)));
  }
}

class Spawner {
public:
  explicit Spawner(bool own_group) {
    check_spawn(posix_spawn_file_actions_init(&m_actions), "file actions");
    if (int rc = posix_spawnattr_init(&m_attr); rc != 0) {
      posix_spawn_file_actions_destroy(&m_actions);
      check_spawn(rc, "attributes");
    }
    // The parent ignores SIGPIPE; the child should not inherit that.
    sigset_t defaults;
    sigemptyset(&defaults);
    sigaddset(&defaults, SIGPIPE);
    sigset_t empty;
    sigemptyset(&empty);
    short flags = POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK;
    if (own_group) {
      // A process group of its own, so that a deadline ends the program and everything it
      // started (a hook's background `sleep &` holding our pipe), not the program alone.
      flags |= POSIX_SPAWN_SETPGROUP;
      check_spawn(posix_spawnattr_setpgroup(&m_attr, 0), "process group");
    }
    check_spawn(posix_spawnattr_setsigdefault(&m_attr, &defaults), "signal defaults");
    check_spawn(posix_spawnattr_setsigmask(&m_attr, &empty), "signal mask");
    check_spawn(posix_spawnattr_setflags(&m_attr, flags), "flags");
  }
  ~Spawner() {
    posix_spawn_file_actions_destroy(&m_actions);
    posix_spawnattr_destroy(&m_attr);
  }
  Spawner(const Spawner&) = delete;
  Spawner& operator=(const Spawner&) = delete;

  posix_spawn_file_actions_t m_actions;
  posix_spawnattr_t m_attr;
};

void set_nonblocking(int fd) {
  int flags = fcntl(fd, F_GETFL);
  if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0) {
    throw Error(ExitCode::runtime,
                fmt::format("cannot make a pipe non-blocking: {}", strerror(errno)));
  }
}

// Adds `command`'s cwd to the spawner's actions (its fds are set by the caller) and starts it
// with its argv and environment: argv[0] looked up on PATH, or `program` when given (a file that
// argv[0] only names). Throws naming argv[0] when it cannot be started.
pid_t spawn(const Command& command, Spawner& spawner,
            const std::optional<std::filesystem::path>& program = std::nullopt) {
  if (command.cwd) {
    check_spawn(posix_spawn_file_actions_addchdir_np(&spawner.m_actions, command.cwd->c_str()),
                "cwd");
  }
  std::vector<std::string> argv_strings = command.argv;
  std::vector<std::string> env_strings = build_environment(command);
  auto argv = as_pointers(argv_strings);
  auto envp = as_pointers(env_strings);
  pid_t pid = -1;
  int rc = program ? posix_spawn(&pid, program->c_str(), &spawner.m_actions, &spawner.m_attr,
                                 argv.data(), envp.data())
                   : posix_spawnp(&pid, argv[0], &spawner.m_actions, &spawner.m_attr, argv.data(),
                                  envp.data());
  if (rc != 0) {
    throw Error(ExitCode::runtime,
                fmt::format("cannot run '{}': {}", command.argv[0], strerror(rc)));
  }
  return pid;
}

} // namespace

int start_detached(const Command& command, const std::filesystem::path& output,
                   const std::optional<std::filesystem::path>& program) {
  Spawner spawner(false);
  short flags = 0;
  check_spawn(posix_spawnattr_getflags(&spawner.m_attr, &flags), "flags");
  check_spawn(posix_spawnattr_setflags(&spawner.m_attr, flags | POSIX_SPAWN_SETSID), "session");
  auto* actions = &spawner.m_actions;
  check_spawn(posix_spawn_file_actions_addopen(actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0),
              "stdin");
  check_spawn(posix_spawn_file_actions_addopen(actions, STDOUT_FILENO, output.c_str(),
                                               O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW, 0600),
              "stdout");
  check_spawn(posix_spawn_file_actions_adddup2(actions, STDOUT_FILENO, STDERR_FILENO), "stderr");
  check_spawn(posix_spawn_file_actions_addclosefrom_np(actions, STDERR_FILENO + 1), "descriptors");
  return spawn(command, spawner, program);
}

namespace {

using clock = std::chrono::steady_clock;

// After a SIGTERM, the time a program gets before SIGKILL.
constexpr auto k_term_grace = std::chrono::seconds(2);
// After the program itself exited, how long output still held open by something it left behind
// is read before we stop listening.
constexpr auto k_drain_after_exit = std::chrono::milliseconds(250);
// After SIGKILL, how long the kernel gets to deliver it before we stop waiting (a process stuck
// in uninterruptible sleep cannot be reaped, and must not hang sandboxer).
constexpr auto k_reap_bound = std::chrono::seconds(5);

int ms_until(clock::time_point t) {
  return static_cast<int>(std::clamp<long long>(
      std::chrono::duration_cast<std::chrono::milliseconds>(t - clock::now()).count(), 0, 60'000));
}

} // namespace

Result run(const Command& command) {
  if (command.argv.empty()) {
    throw Error(ExitCode::runtime, "internal error: empty command");
  }
  spdlog::debug("run: {}", fmt::join(command.argv, " "));

  // A program reading a terminal stays in the terminal's foreground group (job control would stop
  // it otherwise); every other one gets its own group.
  const bool own_group = !(command.stdin_fd >= 0 && isatty(command.stdin_fd));
  Pipe out_pipe, err_pipe, in_pipe;
  std::optional<Pty> pty;
  if (command.terminal) {
    pty.emplace();
  }
  Spawner spawner(own_group);
  auto* actions = &spawner.m_actions;
  if (command.stdin_fd >= 0) {
    check_spawn(posix_spawn_file_actions_adddup2(actions, command.stdin_fd, STDIN_FILENO), "stdin");
  } else if (command.stdin_data) {
    check_spawn(posix_spawn_file_actions_adddup2(actions, in_pipe.fds[0], STDIN_FILENO), "stdin");
  } else if (pty) {
    check_spawn(posix_spawn_file_actions_adddup2(actions, pty->slave, STDIN_FILENO), "stdin");
  } else {
    check_spawn(posix_spawn_file_actions_addopen(actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0),
                "stdin");
  }
  check_spawn(
      posix_spawn_file_actions_adddup2(actions, pty ? pty->slave : out_pipe.fds[1], STDOUT_FILENO),
      "stdout");
  check_spawn(
      posix_spawn_file_actions_adddup2(actions, pty ? pty->slave : err_pipe.fds[1], STDERR_FILENO),
      "stderr");
  const pid_t pid = spawn(command, spawner);
  out_pipe.close_write();
  err_pipe.close_write();
  in_pipe.close_read();
  if (pty) {
    // One stream, as a terminal has: the master is read in place of the stdout pipe, and the
    // slave is the program's alone (its end is then EIO on the master).
    ::close(std::exchange(pty->slave, -1));
    out_pipe.close_read();
    out_pipe.fds[0] = std::exchange(pty->master, -1);
    err_pipe.close_read();
  }

  Result result;
  std::string_view to_write = command.stdin_data ? std::string_view(*command.stdin_data) : "";
  if (to_write.empty()) {
    in_pipe.close_write();
  } else {
    set_nonblocking(in_pipe.fds[1]);
  }

  // The deadline applies to the whole group: SIGTERM, then SIGKILL k_term_grace later.
  auto signal_all = [&](int sig) { ::kill(own_group ? -pid : pid, sig); };
  auto deadline = command.timeout ? std::optional(clock::now() + *command.timeout) : std::nullopt;
  std::optional<clock::time_point> kill_at;
  bool killed = false;
  auto on_deadline = [&] {
    if (!kill_at) {
      result.timed_out = true;
      signal_all(SIGTERM);
      kill_at = clock::now() + k_term_grace;
    } else if (!killed) {
      signal_all(SIGKILL);
      killed = true;
    }
  };
  auto next_signal_at = [&]() -> std::optional<clock::time_point> {
    if (killed) {
      return std::nullopt;
    }
    return kill_at ? kill_at : deadline;
  };

  // Signals to sandboxer: forwarded to the program, or the end of it (like a deadline, at once).
  int signals_seen = interrupt::count();
  bool stopped_by_signal = false;
  auto on_interrupt = [&] {
    if (interrupt::count() == signals_seen) {
      return;
    }
    signals_seen = interrupt::count();
    if (command.on_interrupt == Command::OnInterrupt::forward) {
      result.interrupted_by = interrupt::last_signal();
      signal_all(result.interrupted_by);
    } else if (interrupt::requested() && !stopped_by_signal) {
      stopped_by_signal = true;
      deadline = clock::now();
    }
  };

  int status = 0;
  bool reaped = false;
  std::optional<clock::time_point> stop_reading_at;
  auto try_reap = [&] {
    if (reaped) {
      return;
    }
    pid_t done = waitpid(pid, &status, WNOHANG);
    if (done == pid || (done < 0 && errno != EINTR)) {
      reaped = true;
      // Whatever still holds the pipes was left behind by the program: read what is already
      // there, then stop listening instead of waiting for its end.
      stop_reading_at = clock::now() + k_drain_after_exit;
    }
  };

  char buffer[65536];
  while (out_pipe.fds[0] >= 0 || err_pipe.fds[0] >= 0) {
    if (killed || (stop_reading_at && clock::now() >= *stop_reading_at)) {
      break; // after SIGKILL, or once the program is gone: nothing more is worth waiting for
    }
    pollfd fds[3];
    int count = 0;
    int out_index = -1, err_index = -1, in_index = -1;
    if (out_pipe.fds[0] >= 0) {
      out_index = count;
      fds[count++] = {out_pipe.fds[0], POLLIN, 0};
    }
    if (err_pipe.fds[0] >= 0) {
      err_index = count;
      fds[count++] = {err_pipe.fds[0], POLLIN, 0};
    }
    if (in_pipe.fds[1] >= 0) {
      in_index = count;
      fds[count++] = {in_pipe.fds[1], POLLOUT, 0};
    }
    // Wake up for the next signal, the end of the drain, and every 50 ms to notice the program's
    // exit while something it left behind keeps the pipes open.
    int wait_ms = 50;
    if (auto at = next_signal_at()) {
      wait_ms = std::min(wait_ms, ms_until(*at));
    }
    if (stop_reading_at) {
      wait_ms = std::min(wait_ms, ms_until(*stop_reading_at));
    }
    int ready = poll(fds, count, wait_ms);
    if (ready < 0 && errno != EINTR) {
      break;
    }
    on_interrupt();
    if (auto at = next_signal_at(); at && clock::now() >= *at) {
      on_deadline();
      continue;
    }
    if (ready <= 0) {
      try_reap();
      continue;
    }
    auto drain = [&](int index, Pipe& pipe, std::string& sink,
                     const std::function<void(std::string_view)>& stream) {
      if (index < 0 || !(fds[index].revents & (POLLIN | POLLHUP | POLLERR))) {
        return;
      }
      ssize_t n = read(pipe.fds[0], buffer, sizeof buffer);
      if (n > 0) {
        if (stream) {
          stream(std::string_view(buffer, n));
        } else {
          sink.append(buffer, n);
        }
      } else if (n == 0 || errno != EINTR) {
        pipe.close_read();
      }
    };
    drain(out_index, out_pipe, result.out, command.on_stdout);
    drain(err_index, err_pipe, result.err, command.on_stderr);
    if (in_index >= 0 && (fds[in_index].revents & (POLLOUT | POLLERR | POLLHUP))) {
      ssize_t n = write(in_pipe.fds[1], to_write.data(), to_write.size());
      if (n > 0) {
        to_write.remove_prefix(n);
      }
      if (to_write.empty() || (n < 0 && errno != EAGAIN && errno != EINTR)) {
        in_pipe.close_write();
      }
    }
  }
  in_pipe.close_write();
  out_pipe.close_read();
  err_pipe.close_read();

  // The program may close its output and keep running: the deadline still applies to the wait,
  // and after SIGKILL the wait is bounded.
  std::optional<clock::time_point> give_up_at;
  while (!reaped) {
    on_interrupt();
    if (!next_signal_at() && !killed) {
      // No deadline: wait as long as the program runs (a user's command in `exec`), waking up to
      // forward signals.
      try_reap();
      if (!reaped) {
        usleep(10000);
      }
      continue;
    }
    try_reap();
    if (reaped) {
      break;
    }
    if (auto at = next_signal_at(); at && clock::now() >= *at) {
      on_deadline();
    }
    if (killed) {
      give_up_at = give_up_at ? give_up_at : std::optional(clock::now() + k_reap_bound);
      if (clock::now() >= *give_up_at) {
        spdlog::warn("run: {} (pid {}) did not end within {} s of SIGKILL; not waiting longer",
                     command.argv[0], pid, k_reap_bound.count());
        if (stopped_by_signal) {
          throw Interrupted(interrupt::last_signal());
        }
        result.timed_out = true;
        return result;
      }
    }
    usleep(10000);
  }
  if (own_group && !killed && result.timed_out) {
    signal_all(SIGKILL); // what the group left behind after the program answered SIGTERM
  }
  if (stopped_by_signal) {
    throw Interrupted(interrupt::last_signal());
  }
  if (WIFEXITED(status)) {
    result.exit_code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    result.signal = WTERMSIG(status);
  }
  spdlog::debug("run: {} -> {}", command.argv[0], result.status());
  return result;
}

namespace {

// Runs `task` on one thread that lasts as long as sandboxer. PR_SET_PDEATHSIG fires when the
// thread that made the child ends, not the process: a driver started by a reaper's worker
// thread, then pooled, would otherwise die with that worker.
pid_t on_lasting_thread(std::function<pid_t()> task) {
  // Never destroyed: the thread still waits on it while exit() runs the static destructors.
  struct Queue {
    std::mutex mutex;
    std::condition_variable wake;
    std::deque<std::packaged_task<pid_t()>> tasks;
  };
  static Queue* const queue = [] {
    auto* created = new Queue;
    std::thread([created] {
      while (true) {
        std::unique_lock lock(created->mutex);
        created->wake.wait(lock, [&] { return !created->tasks.empty(); });
        auto next = std::move(created->tasks.front());
        created->tasks.pop_front();
        lock.unlock();
        next();
      }
    }).detach();
    return created;
  }();
  std::packaged_task<pid_t()> packaged(std::move(task));
  auto result = packaged.get_future();
  {
    std::lock_guard lock(queue->mutex);
    queue->tasks.push_back(std::move(packaged));
  }
  queue->wake.notify_one();
  return result.get();
}

// fork+exec, for what posix_spawn cannot do: a child that dies with sandboxer
// (PR_SET_PDEATHSIG), in a process group of its own, with `fds` as its stdin, stdout and stderr.
// Between fork and exec only async-signal-safe calls.
pid_t spawn_tethered(const Command& command, const int (&fds)[3]) {
  std::vector<std::string> argv_strings = command.argv;
  std::vector<std::string> env_strings = build_environment(command);
  auto argv = as_pointers(argv_strings);
  auto envp = as_pointers(env_strings);
  const char* cwd = command.cwd ? command.cwd->c_str() : nullptr;
  const bool search = command.argv[0].find('/') == std::string::npos;
  Pipe report; // carries exec's errno back; closed by a successful exec
  sigset_t all, before;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &before); // no handler of ours runs in the child
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid == 0) {
    for (int sig = 1; sig < NSIG; ++sig) {
      ::signal(sig, SIG_DFL); // SIGPIPE was ignored; handlers would write to our wake pipe
    }
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) {
      ::_exit(127); // sandboxer died before the tether was tied
    }
    for (int target = 0; target < 3; ++target) {
      ::dup2(fds[target], target);
    }
    int error = 0;
    if (cwd && ::chdir(cwd) != 0) {
      error = errno;
    } else {
      sigset_t none;
      sigemptyset(&none);
      ::sigprocmask(SIG_SETMASK, &none, nullptr);
      if (search) {
        ::execvpe(argv[0], argv.data(), envp.data());
      } else {
        ::execve(argv[0], argv.data(), envp.data());
      }
      error = errno;
    }
    (void)!::write(report.fds[1], &error, sizeof error);
    ::_exit(127);
  }
  const int fork_errno = errno;
  pthread_sigmask(SIG_SETMASK, &before, nullptr);
  if (pid > 0) {
    ::setpgid(pid, pid); // also from this side: a kill of the group must not race the child's own
  }
  if (pid < 0) {
    throw Error(ExitCode::runtime,
                fmt::format("cannot run '{}': fork: {}", command.argv[0], strerror(fork_errno)));
  }
  report.close_write();
  int error = 0;
  ssize_t got;
  while ((got = ::read(report.fds[0], &error, sizeof error)) < 0 && errno == EINTR) {
  }
  if (got == static_cast<ssize_t>(sizeof error)) {
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    throw Error(ExitCode::runtime,
                fmt::format("cannot run '{}': {}", command.argv[0], strerror(error)));
  }
  return pid;
}

} // namespace

Child::Child(const Command& command) {
  if (command.argv.empty()) {
    throw Error(ExitCode::runtime, "internal error: empty command");
  }
  Pipe in_pipe, out_pipe, err_pipe;
  const int fds[3] = {in_pipe.fds[0], out_pipe.fds[1], err_pipe.fds[1]};
  const pid_t pid = on_lasting_thread([&] { return spawn_tethered(command, fds); });
  m_pid = pid;
  set_nonblocking(out_pipe.fds[0]);
  set_nonblocking(err_pipe.fds[0]);
  m_in = std::exchange(in_pipe.fds[1], -1);
  m_out = std::exchange(out_pipe.fds[0], -1);
  m_err = std::exchange(err_pipe.fds[0], -1);
}

Child::~Child() {
  if (!m_reaped) {
    stop(std::chrono::milliseconds(0));
  }
  for (int fd : {m_out, m_err}) {
    if (fd >= 0) {
      close(fd);
    }
  }
}

void Child::close_stdin() {
  if (m_in >= 0) {
    close(m_in);
    m_in = -1;
  }
}

bool Child::exited() {
  if (!m_reaped) {
    pid_t done = waitpid(m_pid, &m_status, WNOHANG);
    m_reaped = done == m_pid || (done < 0 && errno != EINTR);
  }
  return m_reaped;
}

int Child::status() const {
  return WIFSIGNALED(m_status) ? 128 + WTERMSIG(m_status) : WEXITSTATUS(m_status);
}

void Child::kill_group() {
  if (m_pid > 0) {
    ::kill(-m_pid, SIGKILL);
  }
}

int Child::stop(std::chrono::milliseconds grace) {
  close_stdin();
  // Polled from 100 us up to 5 ms: a driver told to stop usually exits within a millisecond, and
  // every command that used one waits for it.
  auto wait_until = [&](clock::time_point until) {
    useconds_t pause = 100;
    while (!exited() && clock::now() < until) {
      usleep(pause);
      pause = std::min<useconds_t>(pause * 2, 5000);
    }
    return m_reaped;
  };
  if (!wait_until(clock::now() + grace)) {
    ::kill(-m_pid, SIGTERM);
    if (!wait_until(clock::now() + k_term_grace)) {
      ::kill(-m_pid, SIGKILL);
      if (!wait_until(clock::now() + k_reap_bound)) {
        spdlog::warn("{} (pid {}) did not end within {} s of SIGKILL; not waiting longer", "driver",
                     m_pid, k_reap_bound.count());
        return -1;
      }
    }
  }
  // A driver that exited on its own keeps what it started (a VM it daemonized): only the
  // deadline above signals its group.
  return status();
}

std::string shell_words(const std::vector<std::string>& argv) {
  std::string line;
  for (const auto& word : argv) {
    if (!line.empty()) {
      line += ' ';
    }
    line += '\'';
    for (char c : word) {
      line += c == '\'' ? std::string_view("'\\''") : std::string_view(&c, 1);
    }
    line += '\'';
  }
  return line;
}

} // namespace sandboxer::proc
