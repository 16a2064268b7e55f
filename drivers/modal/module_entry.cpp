// The one symbol the gRPC module exports: module_loader.cpp finds it with dlsym. Everything else
// the module needs from sandboxer (DriverError, interrupt, log) it takes from the executable,
// which exports those symbols, so both halves share one state (signals seen, secrets to redact).

#include <grpc/grpc.h>

#include "drivers/modal/api_client.hpp"
#include "drivers/modal/modal_driver.hpp"
#include "drivers/modal/module_abi.hpp"

namespace {
// gRPC stays initialized until the process ends: the last channel's destruction would otherwise
// run grpc_shutdown, which waits for gRPC's threads (some 50 ms at every Modal command's exit).
const bool k_grpc_initialized = [] {
  grpc_init();
  return true;
}();
} // namespace

extern "C" __attribute__((visibility("default"))) sandboxer::Driver*
SANDBOXER_MODAL_OPEN_SYMBOL(const sandboxer::drivers::modal::ModuleRequest* request) {
  using namespace sandboxer::drivers::modal;
  Token token{request->token_id, request->token_secret};
  return open_driver(located(parse_spec(*request->spec), request->context->location), token,
                     *request->context)
      .release();
}
