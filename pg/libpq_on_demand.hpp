#pragma once

#include <libpq-fe.h>
#include <string>

// libpq, loaded the first time a command uses a PostgreSQL ledger rather than when the program
// starts: linked normally, libpq and the ~24 libraries it pulls in (TLS, Kerberos, LDAP, SASL)
// add ~8.7 ms to every start of sandboxer, paid by commands on the local ledger too. Code calls
// libpq through `libpq().NAME(...)`, with the types of <libpq-fe.h>.
namespace sandboxer::ledger::pg {

#define SANDBOXER_LIBPQ_FUNCTIONS(X)                                                               \
  X(PQconnectStartParams)                                                                          \
  X(PQconnectPoll)                                                                                 \
  X(PQstatus)                                                                                      \
  X(PQtransactionStatus)                                                                           \
  X(PQsocket)                                                                                      \
  X(PQerrorMessage)                                                                                \
  X(PQfinish)                                                                                      \
  X(PQsetnonblocking)                                                                              \
  X(PQsendQuery)                                                                                   \
  X(PQsendQueryParams)                                                                             \
  X(PQflush)                                                                                       \
  X(PQconsumeInput)                                                                                \
  X(PQisBusy)                                                                                      \
  X(PQgetResult)                                                                                   \
  X(PQresultStatus)                                                                                \
  X(PQresultErrorField)                                                                            \
  X(PQresultErrorMessage)                                                                          \
  X(PQntuples)                                                                                     \
  X(PQnfields)                                                                                     \
  X(PQfname)                                                                                       \
  X(PQgetvalue)                                                                                    \
  X(PQgetisnull)                                                                                   \
  X(PQgetlength)                                                                                   \
  X(PQcmdTuples)                                                                                   \
  X(PQclear)                                                                                       \
  X(PQgetCancel)                                                                                   \
  X(PQcancel)                                                                                      \
  X(PQfreeCancel)                                                                                  \
  X(PQserverVersion)                                                                               \
  X(PQparameterStatus)                                                                             \
  X(PQconninfoParse)                                                                               \
  X(PQconninfoFree)                                                                                \
  X(PQsetNoticeProcessor)                                                                          \
  X(PQenterPipelineMode)                                                                           \
  X(PQexitPipelineMode)                                                                            \
  X(PQpipelineSync)                                                                                \
  X(PQlibVersion)

struct Libpq {
#define SANDBOXER_LIBPQ_POINTER(name) decltype(&::name) name = nullptr;
  SANDBOXER_LIBPQ_FUNCTIONS(SANDBOXER_LIBPQ_POINTER)
#undef SANDBOXER_LIBPQ_POINTER
};

// The loaded library. Throws sandboxer::Error (exit 1) saying what to install when Debian's
// libpq5 (libpq.so.5, 14 or later: pipeline mode) cannot be loaded.
const Libpq& libpq();

} // namespace sandboxer::ledger::pg
