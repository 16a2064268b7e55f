// The rules of every profile field, and the typed Profile they make (docs/profile-format.md).
#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <memory>

#include <sandboxer/error.hpp>

#include "core/names.hpp"
#include "core/owner.hpp"
#include "core/profile/document_reader.hpp"
#include "core/profile/internal.hpp"
#include "core/profile/profile.hpp"
#include "core/sha256.hpp"
#include "sdk/json/utf8.hpp"

namespace sandboxer::profile_internal {

// Checks the common fields of a merged document and fills a Profile from it.
class Checker : public DocumentReader {
public:
  using DocumentReader::DocumentReader;

  Profile run(std::vector<fs::path> chain) {
    Profile profile;
    profile.path = m_file;
    profile.chain = std::move(chain);
    check_top_level_keys();
    profile.driver = driver();
    profile.other_sections = other_sections(profile.driver);
    profile.name = name();
    check_description();
    profile.ttl = ttl();
    profile.snapshots_keep = snapshots_keep();
    profile.labels = string_map("labels", &Checker::check_label_key);
    profile.env = string_map("env", &Checker::check_env_key);
    profile.secrets = secrets();
    profile.events = sinks_of(m_file, m_doc);
    profile.ports = ports_of(m_file, m_doc, profile.warnings);
    profile.ready = ready_of(m_file, m_doc, profile.ports);
    profile.pause = pause_policy_of(m_file, m_doc);
    profile.pool = pool_policy_of(m_file, m_doc);
    profile.driver_spec = driver_spec(profile.driver);
    profile.resolved = resolved(profile);
    profile.hash = sha256_digest(profile.resolved.dump());
    for (const auto& [pointer, info] : m_doc.info) {
      profile.locations[pointer] = info.location;
    }
    return profile;
  }

private:
  // A key that is neither a common key nor the driver's may still be a driver's section (a
  // parent's, dropped with `NAME: ~`, or a mistake): those are mappings or null, and whether NAME
  // is a driver is the driver catalog's question. Any other key is unknown, as is a mapping
  // whose name is a typo of a common key (`lables:`).
  void check_top_level_keys() const {
    std::vector<std::string> allowed = k_common_keys;
    const json* driver = find("driver");
    if (driver != nullptr && driver->is_string()) {
      allowed.push_back(driver->get<std::string>());
    }
    for (const auto& [key, value] : m_root.items()) {
      bool maybe_section =
          (value.is_object() || value.is_null()) && !closest_match(key, k_common_keys).has_value();
      if (!contains(allowed, key) && !maybe_section) {
        fail_at_key("/" + escape_token(key), fmt::format("unknown key \"{}\"{}", key,
                                                         suggestion(key, allowed, "known keys")));
      }
    }
  }

  std::string driver() const {
    const json* driver = find("driver");
    if (driver == nullptr) {
      fail(m_file.string() + ":1:1",
           "no driver: set \"driver:\" in this profile or in a profile it extends");
    }
    if (!driver->is_string() || driver->get<std::string>().empty()) {
      fail_at("/driver", "driver: expected a driver name (`sandboxer drivers` lists them)");
    }
    return driver->get<std::string>();
  }

  // The mappings beside the driver's own section; null ones (`docker: ~`) are how a child that
  // switches driver drops its parent's section.
  std::vector<std::string> other_sections(const std::string& driver) const {
    std::vector<std::string> names;
    for (const auto& [key, value] : m_root.items()) {
      if (key != driver && !contains(k_common_keys, key) && value.is_object()) {
        names.push_back(key);
      }
    }
    return names;
  }

  std::string name() const {
    const json* name = find("name");
    if (name == nullptr) {
      return m_file.stem().string();
    }
    auto text = text_of(*name, "/name");
    if (!text || text->empty()) {
      fail_at("/name", "name: expected a non-empty name");
    }
    return *text;
  }

  void check_description() const {
    const json* description = find("description");
    if (description != nullptr && !text_of(*description, "/description")) {
      fail_at("/description", "description: expected text");
    }
  }

  TtlPolicy ttl() const {
    TtlPolicy policy;
    const json* ttl = find("ttl");
    if (ttl == nullptr) {
      policy.default_ttl = k_default_ttl;
    } else if (ttl->is_string() && ttl->get<std::string>() == "none") {
      policy.none = true;
    } else if (ttl->is_object()) {
      policy = ttl_map(*ttl);
    } else if (ttl->is_array()) {
      fail_at("/ttl", "ttl: expected none, a duration such as 30m, or {default: D, max: D}");
    } else {
      policy.default_ttl = ttl_at("/ttl", "ttl");
    }
    return policy;
  }

  // A lifetime: at least 1s, since a sandbox with a ttl of 0 is expired before it is made.
  Seconds ttl_at(const std::string& pointer, const std::string& field) const {
    Seconds ttl = duration_at(pointer, field);
    if (ttl < Seconds(1)) {
      fail_at(pointer, fmt::format("{}: a sandbox must live at least 1s", field));
    }
    return ttl;
  }

  std::optional<int> snapshots_keep() const {
    const json* snapshots = find("snapshots");
    if (snapshots == nullptr) {
      return std::nullopt;
    }
    if (!snapshots->is_object()) {
      fail_at("/snapshots", "snapshots: expected a map such as {keep: 5}");
    }
    check_keys(*snapshots, {"keep"}, "/snapshots", "snapshots");
    if (!snapshots->contains("keep") || (*snapshots)["keep"].is_null()) {
      return std::nullopt;
    }
    const json& keep = (*snapshots)["keep"];
    if (!keep.is_number_integer() || keep.get<long>() < 1 || keep.get<long>() > 10000) {
      fail_at("/snapshots/keep", "snapshots.keep: expected a whole number from 1 to 10000 (how "
                                 "many of a sandbox's newest snapshots to keep)");
    }
    return keep.get<int>();
  }

  TtlPolicy ttl_map(const json& ttl) const {
    check_keys(ttl, {"default", "max", "paused_max", "on_paused_max", "idle", "on_idle"}, "/ttl",
               "ttl");
    TtlPolicy policy;
    if (ttl.contains("max") && !ttl["max"].is_null()) {
      policy.max_ttl = ttl_at("/ttl/max", "ttl.max");
    }
    if (ttl.contains("default") && !ttl["default"].is_null()) {
      policy.default_ttl = ttl_at("/ttl/default", "ttl.default");
    } else {
      // Only a cap given: the usual default, unless the cap is shorter.
      policy.default_ttl =
          policy.max_ttl ? std::min(k_default_ttl, *policy.max_ttl) : k_default_ttl;
    }
    if (policy.max_ttl && *policy.default_ttl > *policy.max_ttl) {
      fail_at("/ttl/default",
              fmt::format("ttl.default {} is longer than ttl.max {}",
                          format_duration(*policy.default_ttl), format_duration(*policy.max_ttl)));
    }
    return policy;
  }

  void check_label_key(const std::string& key, const std::string& pointer) const {
    if (auto problem = label_key_problem(key)) {
      fail_at_key(pointer,
                  fmt::format("labels: invalid label key \"{}\" ({})", printable(key), *problem));
    }
    if (key.starts_with("sandboxer.")) {
      fail_at_key(pointer, fmt::format("labels.{}: the \"sandboxer.\" prefix is reserved for the "
                                       "labels sandboxer sets itself",
                                       key));
    }
  }

  void check_env_key(const std::string& key, const std::string& pointer) const {
    if (!is_variable_name(key)) {
      fail_at_key(pointer, fmt::format("env: invalid variable name \"{}\" (use letters, digits and "
                                       "\"_\", not starting with a digit)",
                                       key));
    }
    if (key == "SANDBOXER_ID") {
      fail_at_key(pointer, "env.SANDBOXER_ID: reserved: sandboxer sets it to the sandbox's id");
    }
  }

  // `labels` or `env`: a map of text to text. A null value removes what a parent set.
  std::map<std::string, std::string>
  string_map(const std::string& field,
             void (Checker::*check_key)(const std::string&, const std::string&) const) const {
    std::map<std::string, std::string> result;
    const json* map = find(field);
    if (map == nullptr) {
      return result;
    }
    if (!map->is_object()) {
      fail_at("/" + field, fmt::format("{}: expected a map of name: value", field));
    }
    for (const auto& [key, value] : map->items()) {
      std::string pointer = "/" + field + "/" + escape_token(key);
      (this->*check_key)(key, pointer);
      if (value.is_null()) {
        continue;
      }
      auto text = text_of(value, pointer);
      if (!text) {
        fail_at(pointer, fmt::format("{}.{}: expected a text value, not a {}", field, key,
                                     value.is_object() ? "map" : "list"));
      }
      if (field == "labels") {
        if (auto problem = label_value_problem(*text)) {
          fail_at(pointer, fmt::format("labels.{}: invalid value: {}", key, *problem));
        }
      }
      result[key] = *text;
    }
    return result;
  }

  std::map<std::string, SecretRef> secrets() const {
    std::map<std::string, SecretRef> result;
    const json* secrets = find("secrets");
    if (secrets == nullptr) {
      return result;
    }
    if (!secrets->is_object()) {
      fail_at("/secrets", "secrets: expected a map of name: {env: VAR} or {file: PATH}");
    }
    for (const auto& [name, ref] : secrets->items()) {
      if (!ref.is_null()) {
        result[name] = secret_ref("secrets." + name, ref, "/secrets/" + escape_token(name));
      }
    }
    return result;
  }

  json driver_spec(const std::string& driver) const {
    const json* section = find(driver);
    if (section == nullptr) {
      return json::object();
    }
    if (!section->is_object()) {
      fail_at("/" + escape_token(driver), fmt::format("section \"{}\" must be a map", driver));
    }
    return *section;
  }

  // The merged document in canonical form: what the hash covers and the ledger may keep.
  json resolved(const Profile& profile) const {
    json doc = json::object();
    for (const auto& [key, value] : m_root.items()) {
      if (!value.is_null() && key != "extends") {
        doc[key] = value;
      }
    }
    doc["name"] = profile.name;
    doc.erase("labels");
    doc.erase("env");
    doc.erase("secrets");
    if (!profile.labels.empty()) {
      doc["labels"] = profile.labels;
    }
    if (!profile.env.empty()) {
      doc["env"] = profile.env;
    }
    for (const auto& [name, ref] : profile.secrets) {
      doc["secrets"][name] = {{ref.kind == SecretRef::Kind::env ? "env" : "file", ref.source}};
    }
    return doc;
  }
};

Profile checked_profile(const fs::path& file, Document& doc, std::vector<fs::path> chain) {
  return Checker(file, doc).run(std::move(chain));
}

} // namespace sandboxer::profile_internal
