#include <cerrno>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <poll.h>
#include <spawn.h>
#include <spdlog/spdlog.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sandboxer/error.hpp>
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

class Spawner {
public:
  Spawner() {
    posix_spawn_file_actions_init(&m_actions);
    posix_spawnattr_init(&m_attr);
    // The parent ignores SIGPIPE; the child should not inherit that.
    sigset_t defaults;
    sigemptyset(&defaults);
    sigaddset(&defaults, SIGPIPE);
    posix_spawnattr_setsigdefault(&m_attr, &defaults);
    sigset_t empty;
    sigemptyset(&empty);
    posix_spawnattr_setsigmask(&m_attr, &empty);
    posix_spawnattr_setflags(&m_attr, POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);
  }
  ~Spawner() {
    posix_spawn_file_actions_destroy(&m_actions);
    posix_spawnattr_destroy(&m_attr);
  }
  posix_spawn_file_actions_t m_actions;
  posix_spawnattr_t m_attr;
};

void set_nonblocking(int fd) {
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

} // namespace

Result run(const Command& command) {
  if (command.argv.empty()) {
    throw Error(ExitCode::runtime, "internal error: empty command");
  }
  spdlog::debug("run: {}", fmt::join(command.argv, " "));

  Pipe out_pipe, err_pipe, in_pipe;
  Spawner spawner;
  auto* actions = &spawner.m_actions;
  if (command.stdin_fd >= 0) {
    posix_spawn_file_actions_adddup2(actions, command.stdin_fd, STDIN_FILENO);
  } else if (command.stdin_data) {
    posix_spawn_file_actions_adddup2(actions, in_pipe.fds[0], STDIN_FILENO);
  } else {
    posix_spawn_file_actions_addopen(actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  }
  posix_spawn_file_actions_adddup2(actions, out_pipe.fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(actions, err_pipe.fds[1], STDERR_FILENO);
  if (command.cwd) {
    posix_spawn_file_actions_addchdir_np(actions, command.cwd->c_str());
  }

  std::vector<std::string> argv_strings = command.argv;
  std::vector<std::string> env_strings = build_environment(command);
  auto argv = as_pointers(argv_strings);
  auto envp = as_pointers(env_strings);

  pid_t pid = -1;
  int rc = posix_spawnp(&pid, argv[0], actions, &spawner.m_attr, argv.data(), envp.data());
  if (rc != 0) {
    throw Error(ExitCode::runtime,
                fmt::format("cannot run '{}': {}", command.argv[0], strerror(rc)));
  }
  out_pipe.close_write();
  err_pipe.close_write();
  in_pipe.close_read();

  Result result;
  std::string_view to_write = command.stdin_data ? std::string_view(*command.stdin_data) : "";
  if (to_write.empty()) {
    in_pipe.close_write();
  } else {
    set_nonblocking(in_pipe.fds[1]);
  }

  using clock = std::chrono::steady_clock;
  auto deadline = command.timeout ? std::optional(clock::now() + *command.timeout) : std::nullopt;
  std::optional<clock::time_point> kill_at;
  char buffer[65536];
  while (out_pipe.fds[0] >= 0 || err_pipe.fds[0] >= 0) {
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
    int wait_ms = -1;
    if (deadline) {
      auto target = kill_at ? *kill_at : *deadline;
      wait_ms = std::max<int>(
          0, std::chrono::duration_cast<std::chrono::milliseconds>(target - clock::now()).count());
    }
    int ready = poll(fds, count, wait_ms);
    if (ready < 0 && errno != EINTR) {
      break;
    }
    if (ready == 0 && deadline) {
      if (!kill_at) {
        result.timed_out = true;
        kill(pid, SIGTERM);
        kill_at = clock::now() + std::chrono::seconds(2);
      } else {
        kill(pid, SIGKILL);
        deadline.reset();
      }
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

  // The child may close its output and keep running: the timeout still applies to the wait.
  int status = 0;
  while (true) {
    pid_t done = waitpid(pid, &status, deadline ? WNOHANG : 0);
    if (done == pid || (done < 0 && errno != EINTR)) {
      break;
    }
    if (done == 0 && clock::now() >= (kill_at ? *kill_at : *deadline)) {
      result.timed_out = true;
      kill(pid, kill_at ? SIGKILL : SIGTERM);
      if (kill_at) {
        deadline.reset();
      } else {
        kill_at = clock::now() + std::chrono::seconds(2);
      }
    } else if (done == 0) {
      usleep(10000);
    }
  }
  if (WIFEXITED(status)) {
    result.exit_code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    result.signal = WTERMSIG(status);
  }
  spdlog::debug("run: {} -> {}", command.argv[0], result.status());
  return result;
}

} // namespace sandboxer::proc
