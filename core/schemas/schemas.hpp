#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "core/catalog/catalog.hpp"
#include "core/errors.hpp"

// The published JSON Schemas (schemas/ in the source tree, embedded at build time).
namespace sandboxer::schemas {

struct Embedded {
  std::string_view name; // "profile", "driver-protocol/create.params", "output", ...
  std::string_view text;
};
const std::vector<Embedded>& embedded();

// What `sandboxer schema` accepts: profile, ledger, event, driver-protocol (every message), each
// -o json output by name (list, status, drivers-test, ...), and each embedded file by its name.
std::vector<std::string> names();

// The schema named `name`, self-contained. `profile` includes the section of every driver
// `drivers` knows (built-in, and external ones that publish a schema in their handshake), each as
// $defs/driver-NAME under its own $id, and lists their names in `driver`. Throws NotFoundError
// with a did-you-mean for an unknown name.
nlohmann::json get(const std::string& name, const DriverCatalog& drivers);

} // namespace sandboxer::schemas
