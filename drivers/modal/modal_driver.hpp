#pragma once

#include <memory>

#include <sandboxer/driver.hpp>

#include "drivers/modal/spec.hpp"

namespace sandboxer::drivers::modal {

struct Token;

// The live driver (in the gRPC module): `spec` parsed, `token` from the profile's secrets.
std::unique_ptr<Driver> open_driver(Spec spec, const Token& token, const DriverContext& context);

} // namespace sandboxer::drivers::modal
