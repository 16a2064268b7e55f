#include "drivers/compose-ssh/ssh.hpp"

#include <algorithm>
#include <cstdlib>
#include <fmt/format.h>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <unistd.h>

#include <sandboxer/error.hpp>
#include <sandboxer/log.hpp>
#include <sandboxer/spec_fields.hpp>

namespace sandboxer::drivers::compose_ssh {
namespace {

namespace fs = std::filesystem;
using Kind = DriverError::Kind;

// How long the shared connection outlives its last use when nobody closes it (sandboxer killed).
constexpr const char* k_control_persist = "60";
constexpr auto k_close_timeout = std::chrono::seconds(5);
// How long a failure to connect stands for the later calls of the same command.
constexpr auto k_failure_remembered = std::chrono::seconds(30);

std::vector<std::string> destination_args(const Target& target) {
  std::vector<std::string> args = {"-p", std::to_string(target.port)};
  if (target.user) {
    args.insert(args.end(), {"-l", *target.user});
  }
  return args;
}

// The control sockets of this process: a private directory (sun_path holds 104 bytes, so it is
// short, under /tmp), ssh's %C naming one socket per target in it. The first call to a target
// opens the master under that target's lock, so that concurrent first calls do not each open
// one; at exit every master is asked to close and the directory goes.
class ControlMasters {
public:
  static ControlMasters& instance() {
    static ControlMasters masters;
    return masters;
  }
  ~ControlMasters() {
    for (const auto& [key, target] : m_opened) {
      proc::Command close;
      close.argv = {"ssh", "-o", "ControlPath=" + path(), "-O", "exit"};
      auto destination = destination_args(target);
      close.argv.insert(close.argv.end(), destination.begin(), destination.end());
      close.argv.insert(close.argv.end(), {"--", target.host});
      close.timeout = k_close_timeout;
      try {
        proc::run(close);
      } catch (const std::exception&) {
        // ControlPersist ends it a minute later anyway.
      }
    }
    if (!m_directory.empty()) {
      std::error_code ec;
      fs::remove_all(m_directory, ec);
    }
  }
  std::string path() {
    std::lock_guard lock(m_mutex);
    if (m_directory.empty()) {
      char pattern[] = "/tmp/sandboxer-ssh-XXXXXX";
      if (!::mkdtemp(pattern)) {
        throw Error(ExitCode::runtime,
                    "cannot create a directory for ssh's control socket in /tmp");
      }
      m_directory = pattern;
    }
    return m_directory + "/%C";
  }
  // Holds the target's lock until the master is known to be open; null when it already is.
  // Throws again what the last attempt to open it threw, for a while: the calls of one command
  // (a create's parallel steps, its cleanup) meet a host that is down once, not each after its
  // own connect timeout.
  std::unique_lock<std::mutex> first_use(const Target& target) {
    std::unique_lock lock(m_mutex);
    const std::string key = key_of(target);
    if (m_opened.count(key)) {
      return {};
    }
    throw_recent_failure(key);
    auto& opening = m_opening[key];
    if (!opening) {
      opening = std::make_unique<std::mutex>();
    }
    std::mutex& target_mutex = *opening;
    lock.unlock();
    std::unique_lock target_lock(target_mutex);
    std::lock_guard again(m_mutex);
    if (m_opened.count(key)) {
      return {};
    }
    throw_recent_failure(key);
    return target_lock;
  }
  void failed(const Target& target, const DriverError& error) {
    std::lock_guard lock(m_mutex);
    m_failures.insert_or_assign(
        key_of(target), Failure{error.kind(), error.what(), std::chrono::steady_clock::now()});
  }
  void opened(const Target& target) {
    std::lock_guard lock(m_mutex);
    m_opened.emplace(key_of(target), target);
  }

private:
  static std::string key_of(const Target& target) {
    return fmt::format("{}\n{}\n{}\n{}\n{}", target.host, target.port, target.user.value_or(""),
                       target.identity_file.value_or("").string(),
                       target.known_hosts.value_or("").string());
  }
  std::mutex m_mutex;
  std::string m_directory;
  std::map<std::string, std::unique_ptr<std::mutex>> m_opening;
  struct Failure {
    DriverError::Kind kind;
    std::string message;
    std::chrono::steady_clock::time_point at;
  };
  void throw_recent_failure(const std::string& key) const {
    auto found = m_failures.find(key);
    if (found != m_failures.end() &&
        std::chrono::steady_clock::now() - found->second.at < k_failure_remembered) {
      throw DriverError(found->second.kind, found->second.message);
    }
  }
  std::map<std::string, Target> m_opened;
  std::map<std::string, Failure> m_failures;
};

} // namespace

std::string last_lines(const std::string& text, size_t count) {
  std::vector<std::string> kept;
  size_t end = text.size();
  while (end > 0 && kept.size() < count) {
    size_t start = text.rfind('\n', end - 1);
    start = start == std::string::npos ? 0 : start + 1;
    std::string line = text.substr(start, end - start);
    while (!line.empty() && line.back() == '\r') {
      line.pop_back();
    }
    if (!line.empty()) {
      kept.insert(kept.begin(), std::move(line));
    }
    end = start == 0 ? 0 : start - 1;
  }
  return log::redact(fmt::format("{}", fmt::join(kept, " / ")));
}

Ssh::Ssh(Target target) : m_target(std::move(target)) {}

std::string Ssh::where() const {
  return fmt::format("{}{}:{}", m_target.user ? *m_target.user + "@" : "", m_target.host,
                     m_target.port);
}

std::vector<std::string> Ssh::argv_for(const RemoteCall& call) const {
  const auto connect_seconds = std::max<long long>(
      1, std::chrono::duration_cast<std::chrono::seconds>(m_target.connect_timeout).count());
  std::vector<std::string> argv = {
      "ssh",
      "-o",
      "BatchMode=yes",
      // Host keys are always checked: an unknown or changed key ends the call.
      "-o",
      "StrictHostKeyChecking=yes",
      "-o",
      "UpdateHostKeys=no",
      "-o",
      fmt::format("ConnectTimeout={}", connect_seconds),
      "-o",
      "ServerAliveInterval=10",
      "-o",
      "ServerAliveCountMax=3",
      "-o",
      "ControlMaster=auto",
      "-o",
      "ControlPath=" + ControlMasters::instance().path(),
      "-o",
      std::string("ControlPersist=") + k_control_persist,
      "-o",
      "LogLevel=ERROR",
  };
  if (m_target.known_hosts) {
    argv.insert(argv.end(), {"-o", "UserKnownHostsFile=" + m_target.known_hosts->string(), "-o",
                             "GlobalKnownHostsFile=/dev/null"});
  }
  if (m_target.identity_file) {
    argv.insert(argv.end(), {"-i", m_target.identity_file->string(), "-o", "IdentitiesOnly=yes"});
  }
  argv.push_back(call.tty ? "-tt" : "-T");
  auto destination = destination_args(m_target);
  argv.insert(argv.end(), destination.begin(), destination.end());
  argv.insert(argv.end(), {"--", m_target.host, proc::shell_words(call.argv)});
  return argv;
}

std::vector<std::string> Ssh::argv_without_command(const std::vector<std::string>& options,
                                                   bool own_connection) const {
  std::vector<std::string> argv = argv_for(RemoteCall{});
  argv.pop_back(); // the remote command
  if (own_connection) {
    std::replace(argv.begin(), argv.end(), std::string("ControlMaster=auto"),
                 std::string("ControlMaster=no"));
    for (auto& word : argv) {
      if (word.starts_with("ControlPath=")) {
        word = "ControlPath=none";
      } else if (word.starts_with("ServerAliveInterval=")) {
        // ssh keeps an option's first value: a tunnel notices a silent drop in 15 s, not 30.
        word = "ServerAliveInterval=5";
      }
    }
  }
  // Before the destination: `--` ends ssh's options.
  auto destination = std::find(argv.begin(), argv.end(), std::string("--"));
  argv.insert(destination, options.begin(), options.end());
  return argv;
}

void Ssh::open_master() const {
  // `-f -N`: ssh returns once it is authenticated and the master listens, so the calls waiting
  // for it start then, not after a first command's whole run.
  RemoteCall none;
  proc::Command command;
  command.argv = argv_for(none);
  command.argv.pop_back(); // no remote command
  auto master = std::find(command.argv.begin(), command.argv.end(), "ControlMaster=auto");
  *master = "ControlMaster=yes";
  command.argv.insert(command.argv.begin() + 1, {"-f", "-N"});
  command.timeout = m_target.connect_timeout + std::chrono::seconds(10);
  proc::Result result = proc::run(command);
  if (result.timed_out) {
    throw DriverError(Kind::timeout,
                      fmt::format("compose-ssh: cannot reach {}: no answer within {}", where(),
                                  spec_fields::duration_text(*command.timeout)));
  }
  if (result.exit_code != 0) {
    if (auto failure = classify_ssh_failure(result.err, m_target, where())) {
      throw DriverError(failure->auth ? Kind::auth : Kind::error, failure->message);
    }
    throw DriverError(Kind::error, fmt::format("compose-ssh: ssh to {} failed: {}", where(),
                                               last_lines(result.err, 1)));
  }
}

void Ssh::connect() const {
  auto& masters = ControlMasters::instance();
  if (auto opening = masters.first_use(m_target)) {
    try {
      open_master();
    } catch (const DriverError& e) {
      masters.failed(m_target, e);
      throw;
    }
    masters.opened(m_target);
  }
}

proc::Result Ssh::run(const RemoteCall& call) const {
  connect();
  proc::Command command;
  command.argv = argv_for(call);
  command.timeout = call.timeout;
  command.stdin_data = call.stdin_data;
  command.stdin_fd = call.stdin_fd;
  command.on_interrupt = call.on_interrupt;
  command.on_stdout = call.on_stdout;
  // ssh's own complaints are wanted in the result even when the command's stderr streams.
  std::string ssh_err;
  if (call.on_stderr) {
    command.on_stderr = [&](std::string_view bytes) {
      if (ssh_err.size() < 4096) {
        ssh_err.append(bytes.substr(0, 4096 - ssh_err.size()));
      }
      call.on_stderr(bytes);
    };
  }
  proc::Result result = proc::run(command);
  if (call.on_stderr) {
    result.err = ssh_err;
  }
  if (result.timed_out) {
    throw DriverError(Kind::timeout,
                      fmt::format("compose-ssh: '{}' on {} did not finish within {}",
                                  call.argv.empty() ? "" : call.argv.front(), where(),
                                  spec_fields::duration_text(call.timeout)));
  }
  if (result.exit_code == 255) {
    if (auto failure = classify_ssh_failure(result.err, m_target, where())) {
      throw DriverError(failure->auth ? Kind::auth : Kind::error, failure->message);
    }
  }
  return result;
}

std::optional<SshFailure> classify_ssh_failure(const std::string& stderr_text, const Target& target,
                                               const std::string& where) {
  auto has = [&](std::string_view words) { return stderr_text.find(words) != std::string::npos; };
  const std::string line = last_lines(stderr_text, 1);
  if (has("Host key verification failed") || has("REMOTE HOST IDENTIFICATION HAS CHANGED") ||
      has("No ED25519 host key is known") || has("host key for") || has("No matching host key")) {
    return SshFailure{
        true, fmt::format("compose-ssh: the host key of {} is not in {} (or differs from it): ssh "
                          "refuses to connect. Check the key, then add it (ssh-keyscan -p {} {})",
                          where,
                          target.known_hosts ? target.known_hosts->string()
                                             : std::string("~/.ssh/known_hosts"),
                          target.port, target.host)};
  }
  if (has("Permission denied") || has("Too many authentication failures")) {
    return SshFailure{true, fmt::format("compose-ssh: {} refused the key {}: {}", where,
                                        target.identity_file ? target.identity_file->string()
                                                             : std::string("(ssh's default keys)"),
                                        line)};
  }
  for (std::string_view unreachable :
       {"Connection refused", "Connection timed out", "timed out", "No route to host",
        "Could not resolve hostname", "Network is unreachable", "Connection closed",
        "Connection reset", "banner exchange", "kex_exchange_identification",
        "closed by remote host", "Broken pipe"}) {
    if (has(unreachable)) {
      return SshFailure{false, fmt::format("compose-ssh: cannot reach {}: {}", where, line)};
    }
  }
  if (stderr_text.starts_with("ssh:") || has("\nssh:") || has("ControlPath") || has("mux_client")) {
    return SshFailure{false, fmt::format("compose-ssh: ssh to {} failed: {}", where, line)};
  }
  return std::nullopt;
}

} // namespace sandboxer::drivers::compose_ssh
