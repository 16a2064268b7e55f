#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <sandboxer/error.hpp>

struct pg_conn;
struct pg_result;

// One connection to the PostgreSQL ledger: libpq in non-blocking mode, every wait bounded by a
// deadline and ended early by a signal (the statement is cancelled on the server), every failure
// classified so that the store knows what it may retry.
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
};

// A result's rows as text (NULL = nullopt), and how many rows a command touched.
struct Rows {
  std::vector<std::string> columns;
  std::vector<std::vector<std::optional<std::string>>> values;
  long affected = 0;
};

using Param = std::optional<std::string>;

class Connection {
public:
  // Starts connecting and returns at once: the handshake proceeds while the caller does other
  // work, and the first query() finishes it.
  explicit Connection(ConnectOptions options);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Runs one statement with text parameters ($1, $2, ...) within `timeout`.
  Rows query(std::string_view sql, const std::vector<Param>& params = {},
             std::chrono::milliseconds timeout = std::chrono::seconds(60));
  // Runs several statements separated by semicolons (the simple protocol, no parameters) in
  // one round trip; returns the rows of the last one that has any.
  Rows run_script(std::string_view sql,
                  std::chrono::milliseconds timeout = std::chrono::seconds(60));
  // Sends every statement at once (libpq's pipeline mode: one round trip) and returns each one's
  // result; the first statement that fails fails the rest, and its error is thrown.
  struct Statement {
    std::string sql;
    std::vector<Param> params;
  };
  std::vector<Rows> pipeline(const std::vector<Statement>& statements,
                             std::chrono::milliseconds timeout = std::chrono::seconds(60));
  // Finishes the handshake (query() calls it).
  void wait_connected();
  // While `abandon` is set (not null), waits leave signals to the thread that owns them and end
  // as soon as *abandon turns true: a connection made ahead of need on a helper thread.
  void run_in_background(const std::atomic<bool>* abandon) { m_abandon = abandon; }
  int server_version();
  const std::string& where() const { return m_options.where; }

private:
  enum class Wait { read, write };
  void wait_for(Wait what, std::chrono::steady_clock::time_point deadline, const char* doing);
  [[noreturn]] void fail_connection(const std::string& doing);
  void cancel();
  void flush(std::chrono::steady_clock::time_point deadline);
  Rows collect(std::chrono::steady_clock::time_point deadline);
  // The next result (waiting for it within `deadline`); nullptr at the end of a statement's.
  pg_result* next_result(std::chrono::steady_clock::time_point deadline);
  // Adds a result's rows to `rows`, or keeps its error in `error` (the first one only).
  void take(pg_result* result, Rows& rows, std::optional<PgError>& error);

  ConnectOptions m_options;
  pg_conn* m_conn = nullptr;
  bool m_connected = false;
  std::chrono::steady_clock::time_point m_connect_deadline;
  const std::atomic<bool>* m_abandon = nullptr;
};

} // namespace sandboxer::ledger::pg
