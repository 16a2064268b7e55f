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

// Runs `command` with posix_spawnp and waits for it. Throws sandboxer::Error when the program
// cannot be started (not found, not executable), naming argv[0].
Result run(const Command& command);

} // namespace sandboxer::proc
