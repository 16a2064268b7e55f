#include "pg/libpq_on_demand.hpp"

#include <dlfcn.h>

#include <sandboxer/error.hpp>

#include "sdk/bind_symbol.hpp"

namespace sandboxer::ledger::pg {
namespace {

struct Loaded {
  Libpq functions;
  std::string error; // why it could not be loaded; empty when it was
};

Loaded load() {
  Loaded loaded;
  void* handle = ::dlopen("libpq.so.5", RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* why = ::dlerror();
    loaded.error = std::string("cannot load libpq for the PostgreSQL ledger (") +
                   (why ? why : "libpq.so.5 not found") +
                   "); install it with: apt-get install libpq5";
    return loaded;
  }
  std::string missing;
#define SANDBOXER_LIBPQ_BIND(name)                                                                 \
  if (!bind_symbol(handle, #name, loaded.functions.name) && missing.empty()) {                     \
    missing = #name;                                                                               \
  }
  SANDBOXER_LIBPQ_FUNCTIONS(SANDBOXER_LIBPQ_BIND)
#undef SANDBOXER_LIBPQ_BIND
  if (!missing.empty()) {
    loaded.error = "the libpq found lacks " + missing +
                   ", which the PostgreSQL ledger needs; install libpq5 14 or later";
  }
  return loaded;
}

} // namespace

const Libpq& libpq() {
  // Thread-safe: reap destroys in parallel, each thread with its own connection.
  static const Loaded loaded = load();
  if (!loaded.error.empty()) {
    throw Error(ExitCode::runtime, loaded.error);
  }
  return loaded.functions;
}

} // namespace sandboxer::ledger::pg
