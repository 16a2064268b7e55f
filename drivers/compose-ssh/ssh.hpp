#pragma once

#include <chrono>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <sandboxer/proc.hpp>

namespace sandboxer::drivers::compose_ssh {

// Where and as whom ssh connects.
struct Target {
  std::string host;
  int port = 22;
  std::optional<std::string> user;
  std::optional<std::filesystem::path> identity_file;
  std::optional<std::filesystem::path> known_hosts;
  std::chrono::milliseconds connect_timeout{10000};
};

// The last `count` non-empty lines of a command's output, joined by " / " and redacted: the part
// of ssh's or docker's words an error message quotes.
std::string last_lines(const std::string& text, size_t count);

// One command to run on the host.
struct RemoteCall {
  std::vector<std::string> argv;
  std::chrono::milliseconds timeout{60000};
  std::optional<std::string> stdin_data;
  int stdin_fd = -1;
  bool tty = false; // a terminal on the host (ssh -tt)
  proc::Command::OnInterrupt on_interrupt = proc::Command::OnInterrupt::stop;
  std::function<void(std::string_view)> on_stdout;
  std::function<void(std::string_view)> on_stderr;
};

// The system ssh client, as an argv vector, with host keys always checked and BatchMode (never a
// prompt). Every call of this process to one target shares one ControlMaster connection: the
// first call opens it, the others ride on it, and it is closed when the process ends (or, if
// sandboxer is killed, ssh ends it after a minute of idleness).
class Ssh {
public:
  explicit Ssh(Target target);

  // Runs the command on the host and returns what it did. ssh's own failures (the host cannot be
  // reached, the key is refused, the host key is unknown) and a deadline throw DriverError naming
  // the host; the remote command's status is the caller's.
  proc::Result run(const RemoteCall& call) const;
  // Opens the shared connection now if it is not open (what run() does first): a caller that must
  // tell "the host was never reached" from "the command failed" calls this first. No remote
  // command, so no extra round trip.
  void connect() const;
  const Target& target() const { return m_target; }
  // "user@host:port", for messages.
  std::string where() const;
  // The ssh argv for `call`, without running it (tests).
  std::vector<std::string> argv_for(const RemoteCall& call) const;
  // ssh with no remote command and `options` (-L ..., -W ...): over the shared connection, or
  // with `own_connection` on a connection of its own (a tunnel that must outlive this process's
  // other calls and be remade alone when it drops).
  std::vector<std::string> argv_without_command(const std::vector<std::string>& options,
                                                bool own_connection) const;

private:
  void open_master() const;
  Target m_target;
};

// What an ssh exit 255 meant, from its stderr: an error naming `where` (and the key file or
// known_hosts at fault), or nullopt when the text is not ssh's own.
struct SshFailure {
  bool auth = false; // a refused key or an unknown host key
  std::string message;
};
std::optional<SshFailure> classify_ssh_failure(const std::string& stderr_text, const Target& target,
                                               const std::string& where);

} // namespace sandboxer::drivers::compose_ssh
