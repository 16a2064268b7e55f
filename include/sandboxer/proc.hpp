#pragma once

#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sandboxer::proc {

// A program to run: an argv vector, never a shell string.
struct Command {
  std::vector<std::string> argv;
  std::map<std::string, std::string>
      env_set;            // added to (or replacing in) the inherited environment
  bool clear_env = false; // start from an empty environment instead
  std::optional<std::filesystem::path> cwd;
  std::optional<std::chrono::milliseconds> timeout; // SIGTERM, then SIGKILL 2s later
  std::optional<std::string> stdin_data;            // written to the child's stdin, then closed
  int stdin_fd = -1;                                // or: this fd becomes the child's stdin
  // A new pseudo-terminal as the program's stdout and stderr (and stdin when none is given):
  // one stream, as `docker exec -t` gives (run() only).
  bool terminal = false;
  // On SIGINT/SIGTERM/SIGHUP to sandboxer (interrupt.hpp): `stop` ends the program (SIGTERM, then
  // SIGKILL) and throws Interrupted; `forward` sends each signal on to the program and waits for
  // its end (a user's command in `exec`).
  enum class OnInterrupt { stop, forward };
  OnInterrupt on_interrupt = OnInterrupt::stop;
  // When set, output is streamed to these as it arrives instead of being collected.
  std::function<void(std::string_view)> on_stdout;
  std::function<void(std::string_view)> on_stderr;
};

struct Result {
  int exit_code = -1; // -1 when killed by a signal
  int signal = 0;
  bool timed_out = false;
  int interrupted_by = 0; // the signal forwarded to it (OnInterrupt::forward), or 0
  std::string out;
  std::string err;
  // The shell convention: exit_code, or 128 + signal.
  int status() const { return signal ? 128 + signal : exit_code; }
};

// `argv` as one command line that a POSIX shell parses back into exactly this argv: each word
// single-quoted. For the one place a string must cross a shell: the remote side of ssh, which
// only joins its words with spaces.
std::string shell_words(const std::vector<std::string>& argv);

// Starts `command` (argv, env_set, clear_env, cwd) left to run on its own, for a service that a
// command starts for later ones: a session of its own (a Ctrl-C meant for sandboxer leaves it be),
// stdin from /dev/null, stdout and stderr appended to `output` (created 0600, never through a
// symbolic link), and no other descriptor of sandboxer's (a CI runner's pipe would wait for it).
// Not waited for: returns its pid. With `program`, that file is run and argv[0] only names it
// (/proc/self/exe runs sandboxer itself). Throws sandboxer::Error naming argv[0] when it cannot
// be started.
int start_detached(const Command& command, const std::filesystem::path& output,
                   const std::optional<std::filesystem::path>& program = std::nullopt);

// Runs `command` with posix_spawnp and waits for it. Throws sandboxer::Error when the program
// cannot be started (not found, not executable), naming argv[0].
Result run(const Command& command);

// A program left running with pipes to its stdin, stdout and stderr, for a conversation (an
// external driver speaking the driver protocol). It runs in a process group of its own and dies
// with sandboxer (PR_SET_PDEATHSIG, SIGKILL), even when sandboxer is killed with SIGKILL. The
// destructor stops it like stop(), so no error path leaves it behind.
class Child {
public:
  // Starts `command` (argv, env_set, clear_env, cwd; the rest is ignored). Throws
  // sandboxer::Error naming argv[0] when it cannot be started.
  explicit Child(const Command& command);
  ~Child();
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  int pid() const { return m_pid; }
  int stdin_fd() const { return m_in; }   // blocking
  int stdout_fd() const { return m_out; } // non-blocking
  int stderr_fd() const { return m_err; } // non-blocking
  void close_stdin();
  // Whether it has exited (without waiting).
  bool exited();
  // The shell's status for its end (128+N when killed by signal N), once exited() said so.
  int status() const;
  // SIGKILL to its whole process group, whether or not it exited already: what it started goes
  // with it. For a conversation that failed.
  void kill_group();
  // Closes its stdin, gives it `grace` to exit, then SIGTERM to its group and SIGKILL 2 s later.
  // Returns the shell's status for its end (128+N when killed by signal N), -1 if it could not
  // be reaped.
  int stop(std::chrono::milliseconds grace);

private:
  int m_pid = -1;
  int m_in = -1, m_out = -1, m_err = -1;
  bool m_reaped = false;
  int m_status = 0;
};

} // namespace sandboxer::proc
