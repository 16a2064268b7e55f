#pragma once

#include "pg/connection.hpp"

struct pg_conn;
struct pg_result;

namespace sandboxer::ledger::pg {

// A connection made by this process: libpq in non-blocking mode, every wait bounded by a deadline
// and ended early by a signal (the statement is cancelled on the server).
class LibpqConnection : public Connection {
public:
  // Starts connecting and returns at once: the handshake proceeds while the caller does other
  // work, and the first statement finishes it.
  explicit LibpqConnection(ConnectOptions options);
  ~LibpqConnection() override;

  Rows query(std::string_view sql, const std::vector<Param>& params = {},
             std::chrono::milliseconds timeout = std::chrono::seconds(60)) override;
  Rows run_script(std::string_view sql,
                  std::chrono::milliseconds timeout = std::chrono::seconds(60)) override;
  std::vector<Rows> pipeline(const std::vector<Statement>& statements,
                             std::chrono::milliseconds timeout = std::chrono::seconds(60)) override;
  int server_version() override;
  // Finishes the handshake (every statement calls it).
  void wait_connected();

  // For the keeper, which runs statements for a client on the other end of `fd`: a wait that
  // sees the client hang up cancels the statement and throws, as a signal would.
  void watch(int fd) { m_watch_fd = fd; }
  // Connected, not broken, and outside any transaction: another client may have it.
  bool reusable() const;
  // Whether the server said something unasked (it ended the session, say): checked without
  // waiting before a kept connection is lent again.
  bool broken_while_idle();

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

  pg_conn* m_conn = nullptr;
  bool m_connected = false;
  int m_watch_fd = -1;
  std::chrono::steady_clock::time_point m_connect_deadline;
};

} // namespace sandboxer::ledger::pg
