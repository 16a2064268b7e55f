#pragma once

#include <atomic>
#include <chrono>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <sandboxer/error.hpp>

// A session with the PostgreSQL ledger, and how its failures are classified so that the store
// knows what it may retry.
namespace sandboxer::ledger::pg {

// What a failure means to the ledger.
enum class Failure {
  unavailable,     // the server cannot be reached or is not accepting connections (yet)
  connection_lost, // the connection broke: the transaction did not commit, unless COMMIT was sent
  retryable,       // serialization failure or deadlock: the whole transaction may run again
  lock_timeout,    // a row lock was not granted within lock_timeout
  denied,          // authentication, a missing database, a missing privilege: an operator's fix
  statement        // anything else: a bug or a damaged schema
};

class PgError : public Error {
public:
  PgError(Failure failure, std::string sqlstate, const std::string& message);
  Failure failure() const { return m_failure; }
  const std::string& sqlstate() const { return m_sqlstate; }

private:
  Failure m_failure;
  std::string m_sqlstate;
};

// The failure a SQLSTATE stands for (an empty state: the connection itself failed).
Failure classify_sqlstate(std::string_view sqlstate);

struct ConnectOptions {
  std::string url;                     // a libpq URI, without a password
  std::optional<std::string> password; // from a secret reference; never in the URI
  std::string application_name;        // who this session is, in pg_stat_activity
  std::chrono::milliseconds connect_timeout{10000};
  std::string where; // how messages name the ledger (the URI without password)
  // The machine's connection keeper (keeper.hpp): used when one answers at keeper_socket;
  // started there when none does and keeper_idle is positive. Empty: this process connects.
  std::filesystem::path keeper_socket;
  std::chrono::seconds keeper_idle{0};
  std::filesystem::path state_dir; // for a keeper it starts
};

// A result's rows as text (NULL = nullopt), and how many rows a command touched.
struct Rows {
  std::vector<std::string> columns;
  std::vector<std::vector<std::optional<std::string>>> values;
  long affected = 0;
};

using Param = std::optional<std::string>;

// One session with the ledger's database, whoever carries it: libpq in this process
// (LibpqConnection) or the machine's connection keeper (KeptConnection, docs/fleet.md). Every
// call is bounded by its timeout and ended early by a signal; failures are PgErrors.
class Connection {
public:
  virtual ~Connection() = default;

  // Runs one statement with text parameters ($1, $2, ...) within `timeout`.
  virtual Rows query(std::string_view sql, const std::vector<Param>& params = {},
                     std::chrono::milliseconds timeout = std::chrono::seconds(60)) = 0;
  // Runs several statements separated by semicolons (the simple protocol, no parameters) in
  // one round trip; returns the rows of the last one that has any.
  virtual Rows run_script(std::string_view sql,
                          std::chrono::milliseconds timeout = std::chrono::seconds(60)) = 0;
  // Sends every statement at once (one round trip) and returns each one's result; the first
  // statement that fails fails the rest, and its error is thrown.
  struct Statement {
    std::string sql;
    std::vector<Param> params;
  };
  virtual std::vector<Rows>
  pipeline(const std::vector<Statement>& statements,
           std::chrono::milliseconds timeout = std::chrono::seconds(60)) = 0;
  // While `abandon` is set (not null), waits leave signals to the thread that owns them and end
  // as soon as *abandon turns true: a connection made ahead of need on a helper thread.
  void run_in_background(const std::atomic<bool>* abandon) { m_abandon = abandon; }
  virtual int server_version() = 0;
  const std::string& where() const { return m_options.where; }

protected:
  explicit Connection(ConnectOptions options) : m_options(std::move(options)) {}
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  ConnectOptions m_options;
  const std::atomic<bool>* m_abandon = nullptr;
};

} // namespace sandboxer::ledger::pg
