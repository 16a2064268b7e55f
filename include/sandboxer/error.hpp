#pragma once

#include <stdexcept>
#include <string>

namespace sandboxer {

// The process exit codes, documented in docs/exit-codes.md. Scripts depend on these numbers: never
// renumber one.
enum class ExitCode : int {
  ok = 0,
  runtime = 1,            // unexpected runtime failure (I/O, corrupt ledger, ...)
  usage = 2,              // bad command line or invalid profile
  not_found = 3,          // no such sandbox, snapshot or profile
  backend = 4,            // the driver's backend failed or refused
  lock_timeout = 5,       // the ledger (or reaper) lock was not acquired in time
  partial = 6,            // some of several operations failed
  policy = 7,             // refused by policy (TTL cap, max-destroy, ...)
  unverified = 8,         // evidence does not verify: a hash chain is broken, a segment unreadable
  ledger_unavailable = 9, // the shared ledger's server could not be reached within the deadline
  conflict = 10,          // the sandbox's state or name conflicts with the request (exec of a
                          // sandbox that is not running, a name already taken)
  wait_timeout = 11,      // `wait`: the condition did not hold within --timeout
  hangup = 129,           // SIGHUP: the terminal went away mid-operation
  interrupted = 130,      // SIGINT: Ctrl-C
  terminated = 143        // SIGTERM: a CI cancel, systemd, kill
};

// Base of every error the user sees. `main` prints "sandboxer: error: <what()>" and exits with
// `code()`. Messages say what failed, on which sandbox/profile/file, and what to do about it.
class Error : public std::runtime_error {
public:
  Error(ExitCode code, const std::string& message) : std::runtime_error(message), m_code(code) {}
  ExitCode code() const { return m_code; }

private:
  ExitCode m_code;
};

// A lock (ledger or reaper) was not acquired within its bounded wait.
class LockTimeoutError : public Error {
public:
  explicit LockTimeoutError(const std::string& message) : Error(ExitCode::lock_timeout, message) {}
};

// What a driver reports when its backend fails. `kind` lets the core decide (a not_found on destroy
// counts as destroyed, unsupported is a capability gap, ...).
class DriverError : public Error {
public:
  // refused: the backend's own limits forbid what was asked (a plan's maximum lifetime); the
  // ledger is left as it was, as for the profile's own caps. unavailable: nothing answered (a
  // connection refused, no such host, no socket), so the request was never sent; callers that
  // explain it (a daemon not running) ask for this kind instead of reading the message.
  enum class Kind {
    error,
    timeout,
    auth,
    not_found,
    unsupported,
    conflict,
    invalid_spec,
    refused,
    unavailable
  };

  DriverError(Kind kind, const std::string& message)
      : Error(kind == Kind::not_found      ? ExitCode::not_found
              : kind == Kind::invalid_spec ? ExitCode::usage
              : kind == Kind::refused      ? ExitCode::policy
                                           : ExitCode::backend,
              message),
        m_kind(kind) {}
  Kind kind() const { return m_kind; }

private:
  Kind m_kind;
};

const char* to_string(DriverError::Kind kind);

} // namespace sandboxer
