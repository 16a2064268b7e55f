#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include <sandboxer/clock.hpp>

#include "core/catalog/catalog.hpp"
#include "core/profile/profile.hpp"

// The conformance kit (`sandboxer drivers test`): the driver contract, run against the driver of a
// profile through the real engine, on a ledger of its own in a temporary directory.
namespace sandboxer::conformance {

struct Check {
  enum class Outcome { pass, fail, skip };
  std::string name;
  Outcome outcome = Outcome::pass;
  std::string detail; // why it failed or was skipped; what it saw when it passed
  double ms = 0;
};
const char* to_string(Check::Outcome outcome);

struct Report {
  std::string driver;
  std::string profile;
  std::vector<Check> checks;
  int count(Check::Outcome outcome) const;
  nlohmann::json to_json() const;
};

// Runs every check; `on_check` sees each one as it ends (for progress on a terminal). Never
// throws for a driver's failure: that is a failed check. Cleans up what it created, whatever
// happens.
Report run(const Profile& profile, const DriverCatalog& drivers, const Clock& clock,
           const std::function<void(const Check&)>& on_check = {});

} // namespace sandboxer::conformance
