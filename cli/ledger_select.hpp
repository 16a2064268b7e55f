#pragma once

#include <optional>
#include <string>

// Which ledger a command uses: `--ledger URL`, else $SANDBOXER_LEDGER, else `ledger:` in
// config.yaml, else the local files under the state directory. docs/fleet.md.
namespace sandboxer::ledger {

struct LedgerChoice {
  enum class Kind { local, postgresql };
  Kind kind = Kind::local;
  std::string url;    // the PostgreSQL URI as given (never holds a password: refused)
  std::string source; // where it came from: "--ledger", "$SANDBOXER_LEDGER", "config.yaml:3"
};

// The first of the three that is set and non-empty. A value that is not a postgresql:// or
// postgres:// URI, or that holds a password (user:password@, password=), is a UsageError (exit 2)
// naming its source: a password on the command line shows in `ps`, and the URI is printed by
// `status` and kept in evidence. Passwords come from `ledger.password` ({env: VAR} or {file:
// PATH}) in config.yaml, PGPASSFILE or ~/.pgpass.
LedgerChoice choose_ledger(const std::optional<std::string>& flag,
                           const std::optional<std::string>& environment,
                           const std::optional<std::string>& config_value,
                           const std::string& config_where);

// Whether a libpq URI carries a password, in its user info or as a `password` parameter.
bool url_has_password(const std::string& url);

} // namespace sandboxer::ledger

#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>

#include <sandboxer/duration.hpp>

#include "core/errors.hpp"
#include "core/ledger/ledger_store.hpp"

namespace sandboxer::ledger {

// ledger.keep_connections when config.yaml says nothing.
inline constexpr Seconds k_keeper_idle{60};

// The store `choice` names: the local files under `state_dir`, or the PostgreSQL database, whose
// password (when not left to libpq: PGPASSFILE, ~/.pgpass) comes from `password_ref` ({env:
// VAR} or {file: PATH}); the state dir keeps this machine's outbox and drivers' data either way.
// `keeper_idle`: how long the machine's connection keeper outlives its last command (zero: no
// keeper; docs/fleet.md).
std::shared_ptr<LedgerStore> open_store(const LedgerChoice& choice,
                                        const nlohmann::json& password_ref,
                                        const std::filesystem::path& state_dir,
                                        Seconds lock_timeout, Seconds keeper_idle);

// "postgresql postgresql://db.example/ci (from $SANDBOXER_LEDGER)" or "local files under DIR".
std::string describe_choice(const LedgerChoice& choice, const std::filesystem::path& state_dir);

} // namespace sandboxer::ledger
