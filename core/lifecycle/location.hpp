#pragma once

// Where a sandbox lives: the record decides, not today's environment (DriverFactory::location).
#include <nlohmann/json.hpp>

#include <sandboxer/driver.hpp>

#include "core/ledger/record.hpp"

namespace sandboxer {

struct Location {
  nlohmann::json used; // what the driver is opened with: the recorded keys, else `now`'s
  nlohmann::json now;  // where this environment would put a new sandbox of the same spec
  bool moved() const { return used != now; }
};

// The location `record` holds in its info, key by key; a key it does not hold (a new sandbox, a
// record written before locations were recorded) is where the environment points now.
Location location_of(const DriverFactory& factory, const SandboxRecord& record,
                     const DriverContext& context);

// One warning per process for each (driver, recorded, current) when the environment points
// somewhere else than where the sandbox lives: reap --parallel would otherwise say it per record.
void warn_if_moved(const SandboxRecord& record, const Location& location);

} // namespace sandboxer
