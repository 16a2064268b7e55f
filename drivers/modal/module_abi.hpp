#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include <sandboxer/driver.hpp>

// What the executable hands the embedded gRPC module (module_entry.cpp) to open a driver. Both
// sides are built from the same sources in one build, so C++ types may cross.
#define SANDBOXER_MODAL_OPEN_SYMBOL sandboxer_modal_open_driver_v1

namespace sandboxer::drivers::modal {

struct ModuleRequest {
  const nlohmann::json* spec = nullptr; // the normalized spec, as stored in the ledger
  const DriverContext* context = nullptr;
  std::string token_id;
  std::string token_secret;
};

using OpenDriverFunction = Driver* (*)(const ModuleRequest*);

} // namespace sandboxer::drivers::modal
