#include "pg/connection.hpp"

#include <fmt/format.h>

namespace sandboxer::ledger::pg {
namespace {

ExitCode exit_code_of(Failure failure) {
  switch (failure) {
  case Failure::lock_timeout:
  case Failure::retryable: // contention, like a lock not granted: try again later
    return ExitCode::lock_timeout;
  case Failure::unavailable:
  case Failure::connection_lost:
    return ExitCode::ledger_unavailable;
  case Failure::denied:
  case Failure::statement:
    break;
  }
  return ExitCode::runtime;
}

} // namespace

PgError::PgError(Failure failure, std::string sqlstate, const std::string& message)
    : Error(exit_code_of(failure), message), m_failure(failure), m_sqlstate(std::move(sqlstate)) {}

Failure classify_sqlstate(std::string_view state) {
  if (state.empty()) {
    return Failure::connection_lost;
  }
  if (state == "40001" || state == "40P01") {
    return Failure::retryable;
  }
  if (state == "55P03") {
    return Failure::lock_timeout;
  }
  // 57P03 cannot connect now (starting up, shutting down), 53300 too many connections.
  if (state == "57P03" || state == "53300") {
    return Failure::unavailable;
  }
  // 08 connection exceptions, 57P01/57P02 the server ended the session (admin or crash).
  if (state.substr(0, 2) == "08" || state == "57P01" || state == "57P02") {
    return Failure::connection_lost;
  }
  // 28 authorization, 3D000 no such database, 42501 insufficient privilege.
  if (state.substr(0, 2) == "28" || state == "3D000" || state == "42501") {
    return Failure::denied;
  }
  return Failure::statement;
}

} // namespace sandboxer::ledger::pg
