#include "pg/libpq_connection.hpp"

#include <fmt/format.h>
#include <poll.h>

#include <sandboxer/interrupt.hpp>
#include <sandboxer/log.hpp>

#include "pg/libpq_on_demand.hpp"

namespace sandboxer::ledger::pg {
namespace {

using SteadyClock = std::chrono::steady_clock;

// libpq's messages end with a newline and may span lines; errors show one line each.
std::string one_line(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) {
    text.pop_back();
  }
  std::string line;
  for (char c : text) {
    const bool blank = c == '\n' || c == '\t' || c == ' ';
    if (!blank || (!line.empty() && line.back() != ' ')) {
      line += blank ? ' ' : c;
    }
  }
  return log::redact(line);
}

} // namespace

LibpqConnection::LibpqConnection(ConnectOptions options) : Connection(std::move(options)) {
  const Libpq& pq = libpq();
  // Keywords are applied in order: the defaults before the URI (which may override them), the
  // password and sandboxer's own session name after it.
  const std::string timeout_seconds = std::to_string(std::max<long long>(
      2, std::chrono::duration_cast<std::chrono::seconds>(m_options.connect_timeout).count()));
  std::vector<const char*> keys = {"connect_timeout", "keepalives", "dbname"};
  std::vector<const char*> values = {timeout_seconds.c_str(), "1", m_options.url.c_str()};
  if (m_options.password) {
    keys.push_back("password");
    values.push_back(m_options.password->c_str());
  }
  if (!m_options.application_name.empty()) {
    keys.push_back("application_name");
    values.push_back(m_options.application_name.c_str());
  }
  keys.push_back(nullptr);
  values.push_back(nullptr);
  m_connect_deadline = SteadyClock::now() + m_options.connect_timeout;
  m_conn = pq.PQconnectStartParams(keys.data(), values.data(), 1);
  if (!m_conn) {
    throw PgError(Failure::unavailable, "", "out of memory starting a PostgreSQL connection");
  }
  if (pq.PQstatus(m_conn) == CONNECTION_BAD) {
    fail_connection("connecting");
  }
}

LibpqConnection::~LibpqConnection() {
  if (m_conn) {
    libpq().PQfinish(m_conn);
  }
}

void LibpqConnection::fail_connection(const std::string& doing) {
  const std::string why = one_line(libpq().PQerrorMessage(m_conn));
  const Failure failure = m_connected ? Failure::connection_lost : Failure::unavailable;
  // A refused password or a missing role is the operator's to fix, not a server to wait for.
  const bool denied = why.find("password authentication failed") != std::string::npos ||
                      why.find("no password supplied") != std::string::npos ||
                      (why.find("role \"") != std::string::npos &&
                       why.find("does not exist") != std::string::npos) ||
                      (why.find("database \"") != std::string::npos &&
                       why.find("does not exist") != std::string::npos);
  throw PgError(denied ? Failure::denied : failure, "",
                fmt::format("ledger {}: {} failed: {}", m_options.where, doing, why));
}

void LibpqConnection::wait_for(Wait what, SteadyClock::time_point deadline, const char* doing) {
  const Libpq& pq = libpq();
  while (true) {
    if (!m_abandon) {
      interrupt::check();
    }
    auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - SteadyClock::now());
    if (left.count() <= 0) {
      if (m_connected) {
        cancel();
      }
      throw PgError(
          m_connected ? Failure::connection_lost : Failure::unavailable, "",
          fmt::format("ledger {}: no answer while {} within the deadline", m_options.where, doing));
    }
    if (m_abandon && m_abandon->load()) {
      throw PgError(Failure::unavailable, "",
                    fmt::format("ledger {}: {} was abandoned", m_options.where, doing));
    }
    // A negative fd is skipped by poll(): no wake fd in the background, nor once a signal came
    // (either it is this wait's to act on, checked above on every pass, or a shielded cleanup's,
    // whose wake fd stays readable and would wake it again and again); no client to watch outside
    // the keeper.
    const bool watch_signals = !m_abandon && interrupt::count() == 0;
    pollfd fds[3] = {
        {pq.PQsocket(m_conn), static_cast<short>(what == Wait::read ? POLLIN : POLLOUT), 0},
        {watch_signals ? interrupt::wake_fd() : -1, POLLIN, 0},
        {m_watch_fd, POLLIN, 0}};
    int ready =
        ::poll(fds, 3, static_cast<int>(std::min<long long>(left.count(), m_abandon ? 50 : 1000)));
    if (ready < 0 && errno != EINTR) {
      fail_connection(doing);
    }
    if ((fds[1].revents & POLLIN) && interrupt::requested()) {
      if (m_connected) {
        cancel();
      }
      interrupt::check();
    }
    if (fds[2].revents) { // the client sends nothing while it waits: this is its hang-up
      if (m_connected) {
        cancel();
      }
      throw PgError(
          Failure::connection_lost, "",
          fmt::format("ledger {}: the client went away while {}", m_options.where, doing));
    }
    if (ready > 0 && fds[0].revents) {
      return;
    }
  }
}

void LibpqConnection::wait_connected() {
  if (m_connected) {
    return;
  }
  const Libpq& pq = libpq();
  PostgresPollingStatusType state = PGRES_POLLING_WRITING;
  while (true) {
    if (state == PGRES_POLLING_OK) {
      break;
    }
    if (state == PGRES_POLLING_FAILED) {
      fail_connection("connecting");
    }
    wait_for(state == PGRES_POLLING_READING ? Wait::read : Wait::write, m_connect_deadline,
             "connecting");
    state = pq.PQconnectPoll(m_conn);
  }
  if (pq.PQsetnonblocking(m_conn, 1) != 0) {
    fail_connection("setting up the connection");
  }
  m_connected = true;
}

void LibpqConnection::cancel() {
  const Libpq& pq = libpq();
  if (PGcancel* handle = pq.PQgetCancel(m_conn)) {
    char error[256];
    pq.PQcancel(handle, error, sizeof error);
    pq.PQfreeCancel(handle);
  }
}

Rows LibpqConnection::query(std::string_view sql, const std::vector<Param>& params,
                            std::chrono::milliseconds timeout) {
  wait_connected();
  const Libpq& pq = libpq();
  const auto deadline = SteadyClock::now() + timeout;
  const std::string text(sql);
  std::vector<const char*> values;
  for (const auto& param : params) {
    values.push_back(param ? param->c_str() : nullptr);
  }
  if (!pq.PQsendQueryParams(m_conn, text.c_str(), static_cast<int>(values.size()), nullptr,
                            values.data(), nullptr, nullptr, 0)) {
    fail_connection("sending a statement");
  }
  flush(deadline);
  return collect(deadline);
}

Rows LibpqConnection::run_script(std::string_view sql, std::chrono::milliseconds timeout) {
  wait_connected();
  const auto deadline = SteadyClock::now() + timeout;
  const std::string text(sql);
  if (!libpq().PQsendQuery(m_conn, text.c_str())) {
    fail_connection("sending statements");
  }
  flush(deadline);
  return collect(deadline);
}

std::vector<Rows> LibpqConnection::pipeline(const std::vector<Statement>& statements,
                                            std::chrono::milliseconds timeout) {
  wait_connected();
  const Libpq& pq = libpq();
  const auto deadline = SteadyClock::now() + timeout;
  if (!pq.PQenterPipelineMode(m_conn)) {
    fail_connection("starting a pipeline");
  }
  for (const auto& statement : statements) {
    std::vector<const char*> values;
    for (const auto& param : statement.params) {
      values.push_back(param ? param->c_str() : nullptr);
    }
    if (!pq.PQsendQueryParams(m_conn, statement.sql.c_str(), static_cast<int>(values.size()),
                              nullptr, values.data(), nullptr, nullptr, 0)) {
      fail_connection("sending a statement");
    }
  }
  if (!pq.PQpipelineSync(m_conn)) {
    fail_connection("sending a statement");
  }
  flush(deadline);
  std::vector<Rows> results(statements.size());
  std::optional<PgError> error;
  for (auto& rows : results) {
    while (pg_result* result = next_result(deadline)) {
      take(result, rows, error);
    }
  }
  // Then the sync point, after which the connection leaves pipeline mode.
  for (int ends = 0; true;) {
    pg_result* result = next_result(deadline);
    const bool sync = result && pq.PQresultStatus(result) == PGRES_PIPELINE_SYNC;
    pq.PQclear(result);
    ends = result ? 0 : ends + 1;
    if (sync) {
      break;
    }
    if (ends > 1) { // two ends in a row and no sync: libpq lost track of the pipeline
      fail_connection("reading a pipeline's answers");
    }
  }
  if (!pq.PQexitPipelineMode(m_conn)) {
    fail_connection("ending a pipeline");
  }
  if (error) {
    throw *error;
  }
  return results;
}

void LibpqConnection::flush(SteadyClock::time_point deadline) {
  const Libpq& pq = libpq();
  while (true) {
    int flushed = pq.PQflush(m_conn);
    if (flushed < 0) {
      fail_connection("sending a statement");
    }
    if (flushed == 0) {
      return;
    }
    wait_for(Wait::write, deadline, "sending a statement");
  }
}

pg_result* LibpqConnection::next_result(SteadyClock::time_point deadline) {
  const Libpq& pq = libpq();
  while (pq.PQisBusy(m_conn)) {
    wait_for(Wait::read, deadline, "waiting for the server");
    if (!pq.PQconsumeInput(m_conn)) {
      fail_connection("reading the server's answer");
    }
  }
  return pq.PQgetResult(m_conn);
}

void LibpqConnection::take(pg_result* result, Rows& rows, std::optional<PgError>& error) {
  const Libpq& pq = libpq();
  switch (pq.PQresultStatus(result)) {
  case PGRES_TUPLES_OK:
  case PGRES_COMMAND_OK: {
    const int fields = pq.PQnfields(result);
    if (fields > 0) { // a script's statements without rows (BEGIN, SET) leave the last rows be
      rows.columns.clear();
      rows.values.clear();
    }
    for (int f = 0; f < fields; ++f) {
      rows.columns.emplace_back(pq.PQfname(result, f));
    }
    for (int r = 0, n = pq.PQntuples(result); r < n; ++r) {
      auto& row = rows.values.emplace_back();
      for (int f = 0; f < fields; ++f) {
        if (pq.PQgetisnull(result, r, f)) {
          row.emplace_back(std::nullopt);
        } else {
          row.emplace_back(std::string(pq.PQgetvalue(result, r, f),
                                       static_cast<std::size_t>(pq.PQgetlength(result, r, f))));
        }
      }
    }
    const char* affected = pq.PQcmdTuples(result);
    rows.affected = affected && *affected ? std::atol(affected) : 0;
    break;
  }
  case PGRES_PIPELINE_ABORTED: // skipped after an earlier statement's error, kept in `error`
    break;
  default:
    if (!error) {
      const char* state = pq.PQresultErrorField(result, PG_DIAG_SQLSTATE);
      const std::string sqlstate = state ? state : "";
      error.emplace(
          classify_sqlstate(sqlstate), sqlstate,
          fmt::format("ledger {}: {}", m_options.where, one_line(pq.PQresultErrorMessage(result))));
    }
  }
  pq.PQclear(result);
}

Rows LibpqConnection::collect(SteadyClock::time_point deadline) {
  Rows rows;
  std::optional<PgError> error;
  while (pg_result* result = next_result(deadline)) {
    take(result, rows, error);
  }
  if (error) {
    throw *error;
  }
  if (libpq().PQstatus(m_conn) == CONNECTION_BAD) {
    fail_connection("running a statement");
  }
  return rows;
}

bool LibpqConnection::reusable() const {
  const Libpq& pq = libpq();
  return m_connected && pq.PQstatus(m_conn) == CONNECTION_OK &&
         pq.PQtransactionStatus(m_conn) == PQTRANS_IDLE;
}

bool LibpqConnection::broken_while_idle() {
  const Libpq& pq = libpq();
  pollfd fd = {pq.PQsocket(m_conn), POLLIN, 0};
  if (::poll(&fd, 1, 0) > 0 &&
      (!pq.PQconsumeInput(m_conn) || pq.PQstatus(m_conn) != CONNECTION_OK)) {
    return true;
  }
  return !reusable();
}

int LibpqConnection::server_version() {
  wait_connected();
  return libpq().PQserverVersion(m_conn);
}

} // namespace sandboxer::ledger::pg
