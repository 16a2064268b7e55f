#pragma once

// A driver's answers checked before the engine sees them (docs/driver-protocol.md, "Limits on
// answers"): a driver, built in or external, cannot put into the ledger what would break it
// (a value nested past what the reader reads, a 40 MB info, an id with a newline), nor a secret
// it was handed.

#include <memory>
#include <string>

#include <sandboxer/driver.hpp>

namespace sandboxer {

inline constexpr size_t k_max_backend_id_bytes = 1024;
inline constexpr size_t k_max_status_detail_bytes = 4096;

// Wraps `inner`, the driver `name` opened on `spec`; every answer is checked, every string in
// `info` has the resolved secrets masked. An unusable create answer is a DriverError, after the
// resource it made is destroyed (or, when that fails, left to `reap --orphans` by its labels).
std::unique_ptr<Driver> checked_driver(std::unique_ptr<Driver> inner, std::string name,
                                       nlohmann::json spec);

// What is wrong with an id a backend gave (empty, too long, control characters, not UTF-8, a
// secret in it), or "" when it is usable.
std::string backend_id_problem(const std::string& id);

} // namespace sandboxer
