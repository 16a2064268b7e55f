#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <sandboxer/driver.hpp>

#include "core/errors.hpp"

namespace sandboxer {

struct Profile;

// A driver of the built-in table (cli/registry.cpp). `factory` is null for a driver of the design
// that this build leaves out (a SANDBOXER_DRIVER_* option) or that is not written yet.
struct BuiltinDriver {
  std::string name;
  const DriverFactory* factory = nullptr;
};

// An executable `sandboxer-driver-NAME` found on the external driver path.
struct ExternalDriverFile {
  std::string name;
  std::filesystem::path path;
};

// The external driver path, in order: each directory of $SANDBOXER_DRIVER_PATH (colon-separated),
// $XDG_CONFIG_HOME/sandboxer/drivers (or ~/.config/...), /usr/local/lib/sandboxer/drivers,
// /usr/lib/sandboxer/drivers, then each directory of $PATH.
std::vector<std::filesystem::path> external_driver_path();

// Every driver the core may use: the built-in table, then executables found on the external
// path. The core is handed one catalog and never names a driver itself; a built-in driver wins
// over an external one of the same name.
class DriverCatalog {
public:
  DriverCatalog(std::vector<BuiltinDriver> builtin, std::vector<std::filesystem::path> search);
  ~DriverCatalog();
  DriverCatalog(const DriverCatalog&) = delete;
  DriverCatalog& operator=(const DriverCatalog&) = delete;

  // The factory named `name`; an external one is started on first use. Throws UsageError
  // ("unknown driver 'dokcer', did you mean 'docker'?", or "not available in this build").
  const DriverFactory& find(const std::string& name) const;

  // The built-in drivers this build has, in table order.
  std::vector<const DriverFactory*> builtin() const;
  // Every name the table knows, built or not.
  std::vector<std::string> builtin_names() const;
  // Every external driver on the search path, first directory wins, built-in names left out,
  // sorted by name.
  std::vector<ExternalDriverFile> external() const;
  const std::vector<std::filesystem::path>& search_path() const { return m_search; }

  // Binds the profile's driver section through its driver: returns the normalized spec, or throws
  // ProfileError prefixed with the YAML location of the offending key. A section named after
  // another driver is an error, as is one named after nothing known.
  nlohmann::json check_profile(const Profile& profile) const;

private:
  std::vector<BuiltinDriver> m_builtin;
  std::vector<std::filesystem::path> m_search;
  mutable std::mutex m_mutex;
  mutable std::map<std::string, std::unique_ptr<DriverFactory>> m_started;
};

} // namespace sandboxer
