#pragma once

#include <string>
#include <vector>

#include <sandboxer/driver.hpp>

namespace sandboxer {

// Every compiled-in driver, in the order of the table in src/registry.cpp.
const std::vector<const DriverFactory*>& all_drivers();
std::vector<std::string> driver_names();

// The factory named `name`; throws UsageError "unknown driver 'dokcer', did you mean 'docker'?".
const DriverFactory& find_driver(const std::string& name);

struct Profile;
// Binds the profile's driver section through the driver's schema; throws ProfileError prefixed with
// the YAML location of the offending key. Returns the normalized spec.
nlohmann::json check_profile_driver(const Profile& profile);

} // namespace sandboxer
