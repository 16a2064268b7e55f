#pragma once

#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "pg/connection.hpp"

// The machine's connection keeper (docs/fleet.md, "Kept connections"): one process per user,
// state directory and ledger that holds connections to the database open between commands and
// lends one to each command over a unix socket (0600, in a 0700 directory of the state dir).
// A command then neither loads libpq nor waits for a backend to start and a password exchange;
// the database sees the keeper's sessions, one per command running at a time.
namespace sandboxer::ledger::pg {

class LibpqConnection;

// Where the keeper for these connection options listens: under the state dir, named by a hash of
// the URI, the password, libpq's PG* environment, HOME, the user and the wire's version, keyed
// with a random salt kept beside it (the name says nothing of the password to who reads it), so
// that a command only ever finds a keeper that connects as it would. Makes the 0700 directory
// and the salt on first use. Empty when that fails, when the directory is not this user's alone,
// or when the path would be too long for a unix socket: the command then connects itself.
// With `make` false (a keeper a command started), nothing is made: a place removed meanwhile (its
// state directory deleted) stays removed.
std::filesystem::path keeper_socket_path(const std::filesystem::path& state_dir,
                                         const ConnectOptions& options, bool make = true);

// Set in the environment of a keeper a command starts.
inline constexpr const char* k_started_keeper_variable = "SANDBOXER_KEEPER_STARTED";

// Serves connections at `socket` until no command has used it for `idle` (zero: until SIGTERM
// or SIGINT), or until its socket is removed. Takes the place first (throws Error, exit 5, when
// another keeper serves there), then calls `first` for a connection to lend first (may return
// nullptr, or throw PgError: the keeper serves anyway, each command's request says why).
void run_keeper(const std::filesystem::path& socket, const ConnectOptions& options,
                std::chrono::seconds idle,
                const std::function<std::unique_ptr<LibpqConnection>()>& first);

// Starts `sandboxer ledger keep` for this ledger in the background (its own session, its output
// in a log file beside the socket) and returns at once; the process that comes up serves the
// next command at `socket`. At most once per process, and not while another start at `socket` is
// under way (many commands at once find no keeper: one of them starts it).
void start_keeper(const std::filesystem::path& state_dir, const std::filesystem::path& socket,
                  const std::string& url, std::chrono::seconds idle);

} // namespace sandboxer::ledger::pg
