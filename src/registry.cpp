#include <fmt/format.h>

#include <sandboxer/error.hpp>
#include <sandboxer/profile.hpp>
#include <sandboxer/registry.hpp>

#ifdef SANDBOXER_WITH_DOCKER
#include "drivers/docker/docker_driver.hpp"
#endif
#ifdef SANDBOXER_WITH_E2B
#include "drivers/e2b/e2b_driver.hpp"
#endif
#ifdef SANDBOXER_WITH_STUB
#include "drivers/stub/stub_driver.hpp"
#endif

namespace sandboxer {

// The one table of drivers: one line per compiled-in driver, no static self-registration.
const std::vector<const DriverFactory*>& all_drivers() {
  static const std::vector<const DriverFactory*> table = {
#ifdef SANDBOXER_WITH_DOCKER
      &drivers::docker::docker_factory(),
#endif
#ifdef SANDBOXER_WITH_E2B
      &drivers::e2b::e2b_factory(),
#endif
#ifdef SANDBOXER_WITH_STUB
      &drivers::stub::stub_factory(),
#endif
  };
  return table;
}

std::vector<std::string> driver_names() {
  std::vector<std::string> names;
  for (const auto* factory : all_drivers()) {
    names.emplace_back(factory->name());
  }
  return names;
}

const DriverFactory& find_driver(const std::string& name) {
  for (const auto* factory : all_drivers()) {
    if (factory->name() == name) {
      return *factory;
    }
  }
  // Drivers of the design that a build may leave out (SANDBOXER_DRIVER_* options) or that are not
  // written yet: say so instead of suggesting a different driver.
  static const std::vector<std::string> k_known = {"docker", "compose-ssh", "vm-packer",
                                                   "e2b",    "modal",       "stub"};
  if (std::find(k_known.begin(), k_known.end(), name) != k_known.end()) {
    throw UsageError(fmt::format("driver '{}' is not available in this build of sandboxer "
                                 "(drivers: {})",
                                 name, fmt::join(driver_names(), " ")));
  }
  auto names = driver_names();
  std::string message = fmt::format("unknown driver '{}'", name);
  if (auto guess = closest_match(name, names)) {
    message += fmt::format(", did you mean '{}'?", *guess);
  } else {
    message += fmt::format(" (this build has: {})", fmt::join(names, " "));
  }
  throw UsageError(message);
}

nlohmann::json check_profile_driver(const Profile& profile) {
  const DriverFactory* factory = nullptr;
  try {
    factory = &find_driver(profile.driver);
  } catch (const UsageError& e) {
    throw ProfileError(fmt::format("{}: {}", profile.location_of("/driver"), e.what()));
  }
  try {
    return factory->parse_spec(profile.driver_spec);
  } catch (const SpecError& e) {
    std::string pointer = "/" + profile.driver + e.pointer();
    std::string dotted = "driver." + profile.driver;
    for (size_t start = 1; start < e.pointer().size();) {
      size_t end = e.pointer().find('/', start);
      dotted += "." + e.pointer().substr(start, end - start);
      start = end == std::string::npos ? end : end + 1;
    }
    throw ProfileError(fmt::format("{}: {}: {}", profile.location_of(pointer), dotted, e.what()));
  }
}

} // namespace sandboxer
