#include "cli/ledger_select.hpp"

#include <fmt/format.h>

#include <sandboxer/error.hpp>

#include "core/ledger/local_store.hpp"
#if SANDBOXER_LEDGER_PG
#include "pg/pg_store.hpp"
#endif
#include "core/errors.hpp"
#include "core/owner.hpp"
#include "core/secrets/secrets.hpp"

namespace sandboxer::ledger {
namespace {

bool starts_with(const std::string& text, std::string_view prefix) {
  return text.compare(0, prefix.size(), prefix) == 0;
}

bool is_postgresql_url(const std::string& url) {
  return starts_with(url, "postgresql://") || starts_with(url, "postgres://");
}

// What a message may show of a refused value: the scheme, host and database, never the user
// info or the parameters (either may hold the password).
std::string shown(const std::string& url) {
  const auto scheme = url.find("://");
  if (scheme == std::string::npos) {
    return url.size() > 40 ? url.substr(0, 40) + "..." : url;
  }
  std::string kept = url.substr(0, url.find('?'));
  if (kept.size() < url.size()) {
    kept += "?...";
  }
  const auto at = kept.find('@', scheme);
  const auto path = kept.find('/', scheme + 3);
  if (at != std::string::npos && (path == std::string::npos || at < path)) {
    kept = kept.substr(0, scheme + 3) + "...@" + kept.substr(at + 1);
  }
  return kept;
}

} // namespace

bool url_has_password(const std::string& url) {
  const auto scheme = url.find("://");
  if (scheme == std::string::npos) {
    return false;
  }
  const auto authority_end = url.find_first_of("/?", scheme + 3);
  const std::string authority =
      url.substr(scheme + 3, authority_end == std::string::npos ? std::string::npos
                                                                : authority_end - scheme - 3);
  const auto at = authority.rfind('@');
  if (at != std::string::npos && authority.substr(0, at).find(':') != std::string::npos) {
    return true;
  }
  const auto query = url.find('?');
  if (query == std::string::npos) {
    return false;
  }
  const std::string parameters = "&" + url.substr(query + 1);
  // sslpassword: the passphrase of the client's key, as secret as a password.
  return parameters.find("&password=") != std::string::npos ||
         parameters.find("&sslpassword=") != std::string::npos;
}

LedgerChoice choose_ledger(const std::optional<std::string>& flag,
                           const std::optional<std::string>& environment,
                           const std::optional<std::string>& config_value,
                           const std::string& config_where) {
  LedgerChoice choice;
  if (flag && !flag->empty()) {
    choice.url = *flag;
    choice.source = "--ledger";
  } else if (environment && !environment->empty()) {
    choice.url = *environment;
    choice.source = "$SANDBOXER_LEDGER";
  } else if (config_value && !config_value->empty()) {
    choice.url = *config_value;
    choice.source = config_where;
  } else {
    return choice;
  }
  if (choice.url == "local") {
    // Named explicitly: the local files even where the environment or config.yaml name a
    // database (exporting a machine's own ledger into the fleet's).
    return choice;
  }
  if (!is_postgresql_url(choice.url)) {
    throw UsageError(fmt::format("{}: \"{}\" is not a ledger sandboxer knows: give a PostgreSQL "
                                 "URI (postgresql://user@host/db?sslmode=verify-full), or "
                                 "\"local\" (or nothing) for the local files",
                                 choice.source, shown(choice.url)));
  }
  if (url_has_password(choice.url)) {
    throw UsageError(fmt::format(
        "{}: the ledger URI {} holds a password, which would show in `ps`, in `status` and in "
        "evidence; remove it and give the password as ledger.password ({{env: VAR}} or {{file: "
        "PATH}}) in config.yaml, or in PGPASSFILE (~/.pgpass)",
        choice.source, shown(choice.url)));
  }
  choice.kind = LedgerChoice::Kind::postgresql;
  return choice;
}

} // namespace sandboxer::ledger

namespace sandboxer::ledger {

std::shared_ptr<LedgerStore> open_store(const LedgerChoice& choice,
                                        const nlohmann::json& password_ref,
                                        const std::filesystem::path& state_dir,
                                        Seconds lock_timeout, Seconds keeper_idle) {
  if (choice.kind == LedgerChoice::Kind::local) {
    return std::make_shared<LocalStore>(state_dir, lock_timeout);
  }
#if SANDBOXER_LEDGER_PG
  pg::PgStoreOptions options;
  options.url = choice.url;
  options.state_dir = state_dir;
  options.lock_timeout = lock_timeout;
  options.host = host_name();
  options.keeper_idle = keeper_idle;
  if (password_ref.is_object()) {
    options.password = resolve_secrets({{"ledger.password", password_ref}}).at("ledger.password");
  }
  return std::make_shared<pg::PgStore>(std::move(options));
#else
  (void)password_ref;
  (void)keeper_idle;
  throw Error(ExitCode::usage,
              fmt::format("ledger {}: this sandboxer was built without the PostgreSQL ledger "
                          "(cmake -DSANDBOXER_LEDGER_PG=ON)",
                          shown(choice.url)));
#endif
}

std::string describe_choice(const LedgerChoice& choice, const std::filesystem::path& state_dir) {
  if (choice.kind == LedgerChoice::Kind::local) {
    const std::string files = (state_dir / "ledger.json").string();
    return choice.source.empty() ? fmt::format("local files {}", files)
                                 : fmt::format("local files {} (from {})", files, choice.source);
  }
  return fmt::format("postgresql {} (from {})", choice.url, choice.source);
}

} // namespace sandboxer::ledger
