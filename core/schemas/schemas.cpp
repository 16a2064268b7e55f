#include "core/schemas/schemas.hpp"

#include <fmt/format.h>
#include <set>
#include <spdlog/spdlog.h>

#include <sandboxer/error.hpp>

#include "core/errors.hpp"
#include "core/external/external_driver.hpp"

namespace sandboxer::schemas {
namespace {

using json = nlohmann::json;
constexpr const char* k_draft = "https://json-schema.org/draft/2020-12/schema";
constexpr const char* k_base = "https://sandboxer.dev/schemas/";

const json* find_embedded(std::string_view name) {
  static const auto parsed = [] {
    std::vector<std::pair<std::string, json>> out;
    for (const auto& file : embedded()) {
      out.emplace_back(std::string(file.name), json::parse(file.text));
    }
    return out;
  }();
  for (const auto& [key, value] : parsed) {
    if (key == name) {
      return &value;
    }
  }
  return nullptr;
}

json protocol_bundle() {
  json defs = json::object();
  for (const auto& file : embedded()) {
    std::string_view name = file.name;
    if (name.starts_with("driver-protocol/")) {
      defs[std::string(name.substr(16))] = *find_embedded(name);
    }
  }
  return {{"$schema", k_draft},
          {"$id", std::string(k_base) + "driver-protocol.schema.json"},
          {"title", "driver protocol 1 (docs/driver-protocol.md): every message, one $defs entry "
                    "each: METHOD.params, METHOD.result, the notifications, request, response, "
                    "error"},
          {"$defs", defs}};
}

json profile_with_drivers(const DriverCatalog& drivers) {
  json schema = *find_embedded("profile");
  json known = json::array();
  std::set<std::string> ids;
  // Each section is its own schema resource in $defs (a 2020-12 compound document), referred to
  // by its $id: its own "#/$defs/..." refs then resolve inside it, not against the profile.
  auto add = [&](const std::string& name, json section) {
    std::string id = fmt::format("{}drivers/{}.schema.json", k_base, name);
    if (section.is_object()) {
      const json* own = section.contains("$id") ? &section["$id"] : nullptr;
      if (own && own->is_string() && !ids.contains(own->get<std::string>())) {
        id = own->get<std::string>();
      } else if (own) {
        spdlog::warn("schema profile: driver {}'s schema $id {} replaced by {} (one resource "
                     "per id)",
                     name, own->dump(), id);
      }
      section["$id"] = id;
    } else {
      // A boolean schema cannot carry an $id: wrapped, so that it is still a resource.
      section = {{"$id", id}, {"allOf", json::array({section})}};
    }
    ids.insert(id);
    schema["$defs"]["driver-" + name] = std::move(section);
    schema["properties"][name] = {{"anyOf", {{{"type", "null"}}, {{"$ref", id}}}}};
  };
  for (const auto* factory : drivers.builtin()) {
    std::string name(factory->name());
    known.push_back(name);
    if (const json* published = find_embedded("drivers/" + name)) {
      add(name, *published);
    } else if (json own = factory->schema(); !own.is_null()) {
      add(name, own);
    }
  }
  for (const auto& file : drivers.external()) {
    known.push_back(file.name);
    try {
      const auto& description = external::describe(drivers.find(file.name));
      add(file.name, description.schema.is_null() ? json{{"type", "object"}} : description.schema);
    } catch (const Error& e) {
      spdlog::warn("schema profile: driver {} left out: {}", file.name, e.what());
    }
  }
  // The drivers found now: a driver installed later needs the schema made again.
  json& driver = schema["properties"]["driver"];
  driver.erase("minLength");
  driver["anyOf"] = {{{"enum", known}}, {{"pattern", "\\$\\{"}}};
  driver["description"] = "a driver this sandboxer knew when the schema was made (sandboxer "
                          "schema profile: make it again after installing a driver), or a value "
                          "holding ${VAR}, checked after expansion";
  return schema;
}

} // namespace

std::vector<std::string> names() {
  std::vector<std::string> out = {"profile", "ledger", "event", "driver-protocol"};
  if (const json* output = find_embedded("output")) {
    for (const auto& [name, value] : (*output)["$defs"].items()) {
      if (value.contains("description")) {
        out.push_back(name);
      }
    }
  }
  for (const auto& file : embedded()) {
    std::string name(file.name);
    if (name.find('/') != std::string::npos) {
      out.push_back(name);
    }
  }
  return out;
}

json get(const std::string& name, const DriverCatalog& drivers) {
  if (name == "profile") {
    return profile_with_drivers(drivers);
  }
  if (name == "driver-protocol") {
    return protocol_bundle();
  }
  if (name.find('/') != std::string::npos || name == "ledger" || name == "event") {
    if (const json* schema = find_embedded(name)) {
      return *schema;
    }
  }
  const json* output = find_embedded("output");
  if (output && name != "sandbox" && name != "snapshot_item" && name != "history_entry" &&
      (*output)["$defs"].contains(name)) {
    return {{"$schema", k_draft},
            {"$id", fmt::format("{}output/{}.schema.json", k_base, name)},
            {"title", (*output)["$defs"][name].value("description", name)},
            {"$ref", "#/$defs/" + name},
            {"$defs", (*output)["$defs"]}};
  }
  auto known = names();
  std::string message = fmt::format("no schema named '{}'", name);
  if (auto guess = closest_match(name, known)) {
    message += fmt::format(", did you mean '{}'?", *guess);
  } else {
    message += " ('sandboxer schema' lists them)";
  }
  throw NotFoundError(message);
}

} // namespace sandboxer::schemas
