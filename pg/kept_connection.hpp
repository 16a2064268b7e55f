#pragma once

#include <filesystem>
#include <memory>

#include "pg/connection.hpp"

namespace sandboxer::ledger::pg {

// A session lent by the machine's connection keeper (keeper.hpp): each call is one request over
// its unix socket, carried out on the database connection the keeper holds for this session.
// Deadlines and signals as a connection of its own: a signal hangs up, and the keeper cancels
// the statement.
class KeptConnection : public Connection {
public:
  // The keeper's session, or nullptr when no keeper answers at `socket`.
  static std::unique_ptr<KeptConnection> open(const std::filesystem::path& socket,
                                              ConnectOptions options);
  ~KeptConnection() override;

  Rows query(std::string_view sql, const std::vector<Param>& params = {},
             std::chrono::milliseconds timeout = std::chrono::seconds(60)) override;
  Rows run_script(std::string_view sql,
                  std::chrono::milliseconds timeout = std::chrono::seconds(60)) override;
  std::vector<Rows> pipeline(const std::vector<Statement>& statements,
                             std::chrono::milliseconds timeout = std::chrono::seconds(60)) override;
  int server_version() override;

private:
  KeptConnection(int fd, ConnectOptions options);
  // Sends an encoded request and waits for its reply within `timeout` and the time the keeper
  // may take to connect.
  std::vector<Rows> call(std::string request, std::chrono::milliseconds timeout);
  void wait_for(short events, std::chrono::steady_clock::time_point deadline, const char* doing);
  [[noreturn]] void lose(const std::string& why);
  int m_fd;
};

// How a store gets its connections: from the keeper at options.keeper_socket when one answers
// there; else its own (libpq), and a keeper started for the next commands when
// options.keeper_idle is positive.
std::unique_ptr<Connection> open_connection(const ConnectOptions& options);

// For the keeper itself (set before any store opens): its connections are its own, and made
// once it holds its place, not ahead of need (a keeper that loses the race to another must not
// have cost the database a connection).
void serve_as_keeper();
bool serving_as_keeper();

} // namespace sandboxer::ledger::pg
