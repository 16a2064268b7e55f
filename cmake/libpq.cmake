# libpq for the PostgreSQL ledger (pg/): Debian's libpq.so.5, opened with dlopen() the
# first time a command uses a PostgreSQL ledger (pg/libpq_on_demand.cpp), so commands
# on the local ledger do not pay for loading it and its ~24 libraries. Only its headers are used
# at build time (libpq-dev); `ldd sandboxer` names no libpq.
#
# Sets the target sandboxer_libpq (headers, and dlopen) for pg/.
find_package(PkgConfig REQUIRED)
pkg_check_modules(LIBPQ REQUIRED libpq)
add_library(sandboxer_libpq INTERFACE)
target_include_directories(sandboxer_libpq INTERFACE ${LIBPQ_INCLUDE_DIRS})
target_link_libraries(sandboxer_libpq INTERFACE ${CMAKE_DL_LIBS})
