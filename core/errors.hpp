#pragma once
// The errors of the core and the command line, beside the SDK's (sandboxer/error.hpp): a driver
// never throws these, so the public SDK does not declare them.

#include <string>

#include <sandboxer/error.hpp>

namespace sandboxer {

// A bad command line. `main` adds "Try 'sandboxer <cmd> --help'".
class UsageError : public Error {
public:
  explicit UsageError(const std::string& message) : Error(ExitCode::usage, message) {}
};

// An invalid profile; the message starts with "file:line:col: ".
class ProfileError : public Error {
public:
  explicit ProfileError(const std::string& message) : Error(ExitCode::usage, message) {}
};

// A missing sandbox, snapshot or profile.
class NotFoundError : public Error {
public:
  explicit NotFoundError(const std::string& message) : Error(ExitCode::not_found, message) {}
};

// The ledger cannot be read or written (corrupt, unreadable, newer schema, ...).
class LedgerError : public Error {
public:
  explicit LedgerError(const std::string& message) : Error(ExitCode::runtime, message) {}
};

// A request refused by policy: a TTL beyond the cap, a reap beyond --max-destroy, ...
class PolicyError : public Error {
public:
  explicit PolicyError(const std::string& message) : Error(ExitCode::policy, message) {}
};

// The request does not fit the sandbox's state or what is at a path: exec of a sandbox that is not
// running, a name taken, cp of a directory onto a file.
class ConflictError : public Error {
public:
  explicit ConflictError(const std::string& message) : Error(ExitCode::conflict, message) {}
};

} // namespace sandboxer
