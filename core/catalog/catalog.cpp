#include "core/catalog/catalog.hpp"

#include <algorithm>
#include <fmt/format.h>
#include <set>
#include <unistd.h>

#include <sandboxer/error.hpp>

#include "core/errors.hpp"
#include "core/external/external_driver.hpp"
#include "core/owner.hpp"
#include "core/profile/profile.hpp"

namespace sandboxer {
namespace fs = std::filesystem;

namespace {

constexpr std::string_view k_prefix = "sandboxer-driver-";

bool is_executable_file(const fs::path& path) {
  std::error_code ec;
  return fs::is_regular_file(path, ec) && access(path.c_str(), X_OK) == 0;
}

// "driver.docker.memory" from the section's name and a JSON pointer inside it ("/memory").
std::string dotted(const std::string& driver, const std::string& pointer) {
  std::string out = "driver." + driver;
  for (size_t start = 1; start < pointer.size();) {
    size_t end = pointer.find('/', start);
    out += "." + pointer.substr(start, end - start);
    start = end == std::string::npos ? end : end + 1;
  }
  return out;
}

} // namespace

std::vector<fs::path> external_driver_path() {
  std::vector<fs::path> dirs = directories_in("SANDBOXER_DRIVER_PATH");
  if (auto config = config_home()) {
    dirs.push_back(*config / "sandboxer" / "drivers");
  }
  dirs.emplace_back("/usr/local/lib/sandboxer/drivers");
  dirs.emplace_back("/usr/lib/sandboxer/drivers");
  for (auto& dir : directories_in("PATH")) {
    dirs.push_back(std::move(dir));
  }
  return dirs;
}

DriverCatalog::DriverCatalog(std::vector<BuiltinDriver> builtin, std::vector<fs::path> search)
    : m_builtin(std::move(builtin)), m_search(std::move(search)) {}

DriverCatalog::~DriverCatalog() = default;

std::vector<const DriverFactory*> DriverCatalog::builtin() const {
  std::vector<const DriverFactory*> factories;
  for (const auto& entry : m_builtin) {
    if (entry.factory != nullptr) {
      factories.push_back(entry.factory);
    }
  }
  return factories;
}

std::vector<std::string> DriverCatalog::builtin_names() const {
  std::vector<std::string> names;
  for (const auto& entry : m_builtin) {
    names.push_back(entry.name);
  }
  return names;
}

std::vector<ExternalDriverFile> DriverCatalog::external() const {
  auto reserved = builtin_names();
  std::set<std::string> seen(reserved.begin(), reserved.end());
  std::vector<ExternalDriverFile> found;
  for (const auto& dir : m_search) {
    std::error_code ec;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
      std::string file = it->path().filename().string();
      if (file.size() <= k_prefix.size() || file.compare(0, k_prefix.size(), k_prefix) != 0) {
        continue;
      }
      std::string name = file.substr(k_prefix.size());
      if (!seen.contains(name) && is_executable_file(it->path())) {
        seen.insert(name);
        found.push_back({name, it->path()});
      }
    }
  }
  std::sort(found.begin(), found.end(),
            [](const auto& a, const auto& b) { return a.name < b.name; });
  return found;
}

const DriverFactory& DriverCatalog::find(const std::string& name) const {
  for (const auto& entry : m_builtin) {
    if (entry.name != name) {
      continue;
    }
    if (entry.factory == nullptr) {
      throw UsageError(fmt::format("driver '{}' is not available in this build of sandboxer "
                                   "(drivers: {})",
                                   name, fmt::join(builtin_names(), " ")));
    }
    return *entry.factory;
  }
  std::lock_guard lock(m_mutex);
  if (auto it = m_started.find(name); it != m_started.end()) {
    return *it->second;
  }
  // A name that could make a path ("../x") is never looked up.
  bool plain = !name.empty() && name.find('/') == std::string::npos && name != "." && name != "..";
  for (const auto& dir : plain ? m_search : std::vector<fs::path>{}) {
    fs::path candidate = dir / (std::string(k_prefix) + name);
    if (is_executable_file(candidate)) {
      auto [it, added] = m_started.emplace(name, external::make_factory(name, candidate));
      return *it->second;
    }
  }
  std::vector<std::string> names = builtin_names();
  for (const auto& file : external()) {
    names.push_back(file.name);
  }
  std::string message = fmt::format("unknown driver '{}'", name);
  if (auto guess = closest_match(name, names)) {
    message += fmt::format(", did you mean '{}'?", *guess);
  } else {
    message += fmt::format(" (drivers: {}; an external driver is an executable {}{} on "
                           "$SANDBOXER_DRIVER_PATH or $PATH)",
                           fmt::join(names, " "), k_prefix, name);
  }
  throw UsageError(message);
}

nlohmann::json DriverCatalog::check_profile(const Profile& profile) const {
  for (const auto& section : profile.other_sections) {
    auto names = builtin_names();
    bool is_driver = std::find(names.begin(), names.end(), section) != names.end();
    if (!is_driver) {
      for (const auto& file : external()) {
        is_driver = is_driver || file.name == section;
      }
    }
    if (is_driver) {
      throw ProfileError(fmt::format("{}: section \"{}\" does not match driver \"{}\"",
                                     profile.location_of("/" + section), section, profile.driver));
    }
    names.push_back(profile.driver);
    auto guess = closest_match(section, names);
    throw ProfileError(fmt::format("{}: unknown key \"{}\"{}", profile.location_of("/" + section),
                                   section,
                                   guess ? fmt::format(", did you mean \"{}\"?", *guess) : ""));
  }
  const DriverFactory* factory = nullptr;
  try {
    factory = &find(profile.driver);
  } catch (const UsageError& e) {
    throw ProfileError(fmt::format("{}: {}", profile.location_of("/driver"), e.what()));
  }
  try {
    SpecOrigin origin;
    origin.directory_of = [&](const std::string& pointer) {
      return profile.directory_of("/" + profile.driver + pointer);
    };
    return factory->parse_profile_section(profile.driver_spec, origin);
  } catch (const SpecError& e) {
    throw ProfileError(fmt::format("{}: {}: {}",
                                   profile.location_of("/" + profile.driver + e.pointer()),
                                   dotted(profile.driver, e.pointer()), e.what()));
  }
}

} // namespace sandboxer
