# libpq for the PostgreSQL ledger (src/ledger/pg/): Debian's libpq.so.5, opened with dlopen() the
# first time a command uses a PostgreSQL ledger (src/ledger/pg/libpq_on_demand.cpp), so commands
# on the local ledger do not pay for loading it and its ~24 libraries. Only its headers are used
# at build time (libpq-dev); `ldd sandboxer` names no libpq.
#
# Sets SANDBOXER_LIBPQ_SOURCES (the .cpp files for the core) and the target sandboxer_libpq.
find_package(PkgConfig REQUIRED)
pkg_check_modules(LIBPQ REQUIRED libpq)
add_library(sandboxer_libpq INTERFACE)
target_include_directories(sandboxer_libpq INTERFACE ${LIBPQ_INCLUDE_DIRS})
target_link_libraries(sandboxer_libpq INTERFACE ${CMAKE_DL_LIBS})
set(SANDBOXER_LIBPQ_SOURCES
  ledger/pg/closings.cpp
  ledger/pg/connection.cpp
  ledger/pg/keeper.cpp
  ledger/pg/keeper_wire.cpp
  ledger/pg/kept_connection.cpp
  ledger/pg/libpq_connection.cpp
  ledger/pg/libpq_on_demand.cpp
  ledger/pg/schema.cpp
  ledger/pg/pg_outbox.cpp
  ledger/pg/pg_store.cpp)
