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

#include "src/json/utf8.hpp"
#include "src/names.hpp"
#include "src/owner.hpp"
#include "src/profile/internal.hpp"
#include "src/profile/profile.hpp"
#include "src/sha256.hpp"

namespace sandboxer::profile_internal {

// Checks the common fields of a merged document and fills a Profile from it.
class Checker {
public:
  Checker(const fs::path& file, Document& doc) : m_file(file), m_doc(doc), m_root(doc.value) {}

  Config config() const { return config_of_file(); }

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
    profile.events = events();
    profile.driver_spec = driver_spec(profile.driver);
    profile.resolved = resolved(profile);
    profile.hash = sha256_digest(profile.resolved.dump());
    for (const auto& [pointer, info] : m_doc.info) {
      profile.locations[pointer] = info.location;
    }
    return profile;
  }

private:
  // The location of `pointer` (its value, or with `key` its key), or of its nearest ancestor
  // that has one.
  std::string where(std::string pointer, bool key = false) const {
    while (!pointer.empty()) {
      if (auto it = m_doc.info.find(pointer); it != m_doc.info.end()) {
        return key ? it->second.entry_location : it->second.location;
      }
      pointer.resize(pointer.rfind('/'));
    }
    return m_file.string() + ":1:1";
  }

  // An error about the value at `pointer`.
  [[noreturn]] void fail_at(const std::string& pointer, const std::string& message) const {
    fail(where(pointer), message);
  }

  // An error about the key at `pointer` (unknown, reserved, misplaced).
  [[noreturn]] void fail_at_key(const std::string& pointer, const std::string& message) const {
    fail(where(pointer, true), message);
  }

  // The text of a scalar value as written (after expansion); nullopt for null, maps and lists.
  std::optional<std::string> text_of(const json& value, const std::string& pointer) const {
    if (value.is_string()) {
      return value.get<std::string>();
    }
    if (value.is_null() || value.is_structured()) {
      return std::nullopt;
    }
    if (auto it = m_doc.info.find(pointer); it != m_doc.info.end() && it->second.text) {
      return it->second.text;
    }
    return value.dump();
  }

  const json* find(const std::string& key) const {
    auto it = m_root.find(key);
    return it == m_root.end() || it->is_null() ? nullptr : &*it;
  }

  void check_keys(const json& map, const std::vector<std::string>& allowed,
                  const std::string& pointer, const std::string& field) const {
    for (const auto& [key, value] : map.items()) {
      if (!contains(allowed, key)) {
        fail_at_key(pointer + "/" + escape_token(key),
                    fmt::format("{}: unknown key \"{}\"{}", field, key,
                                suggestion(key, allowed, "known keys")));
      }
    }
  }

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

  Seconds duration_at(const std::string& pointer, const std::string& field) const {
    const json& value = m_root.at(json::json_pointer(pointer));
    std::string text = text_of(value, pointer).value_or(value.dump());
    auto duration = parse_duration(text);
    if (!duration) {
      fail_at(pointer,
              fmt::format("{}: invalid duration \"{}\" {}", field, text, duration_problem(text)));
    }
    return *duration;
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
    check_keys(ttl, {"default", "max"}, "/ttl", "ttl");
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

  // `field` names it in errors: "secrets.NAME", "events[0].token".
  SecretRef secret_ref(const std::string& field, const json& ref,
                       const std::string& pointer) const {
    if (!ref.is_object()) {
      fail_at(pointer, field + ": secrets are references only: write {env: VAR} or {file: PATH}");
    }
    check_keys(ref, {"env", "file"}, pointer, field);
    if (ref.size() != 1) {
      fail_at(pointer, field + ": write exactly one of {env: VAR} or {file: PATH}");
    }
    SecretRef result;
    result.kind = ref.contains("env") ? SecretRef::Kind::env : SecretRef::Kind::file;
    std::string key = result.kind == SecretRef::Kind::env ? "env" : "file";
    auto text = text_of(ref[key], pointer + "/" + key);
    if (result.kind == SecretRef::Kind::env && !(text && is_variable_name(*text))) {
      fail_at(pointer + "/env", field + ".env: expected an environment variable name");
    }
    if (result.kind == SecretRef::Kind::file && !(text && !text->empty())) {
      fail_at(pointer + "/file", field + ".file: expected a file path");
    }
    result.source = result.kind == SecretRef::Kind::file ? expand_home(*text) : *text;
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

  // The sinks of `events`, checked and normalized for the outbox: paths absolute with ~
  // expanded, durations as written, a token as a reference.
  json events() const {
    const json* events = find("events");
    if (events == nullptr) {
      return json::array();
    }
    if (!events->is_array()) {
      fail_at("/events", "events: expected a list of sinks, such as - {type: jsonl, path: FILE}");
    }
    json sinks = json::array();
    for (size_t i = 0; i < events->size(); ++i) {
      sinks.push_back(
          sink((*events)[i], "/events/" + std::to_string(i), fmt::format("events[{}]", i)));
    }
    return sinks;
  }

  json sink(const json& sink, const std::string& pointer, const std::string& field) const {
    if (!sink.is_object()) {
      fail_at(pointer, field + ": expected a map with a \"type\"");
    }
    if (!sink.contains("type")) {
      fail_at(pointer, fmt::format("{}: missing \"type\" (one of {})", field,
                                   fmt::join(k_sink_types, ", ")));
    }
    std::string type = text_of(sink["type"], pointer + "/type").value_or(sink["type"].dump());
    if (type == "stdout") {
      // `ID=$(sandboxer create -o json | jq -r .id)` must get the record alone.
      fail_at(pointer + "/type", field + ".type: stdout carries only the command's data; write "
                                         "events to stderr ({type: stderr}) or to a descriptor "
                                         "you open ({type: fd, fd: 3} with 3>FILE)");
    }
    if (!contains(k_sink_types, type)) {
      fail_at(pointer + "/type", fmt::format("{}.type: unknown sink type \"{}\"{}", field, type,
                                             suggestion(type, k_sink_types, "one of")));
    }
    static const std::map<std::string, std::vector<std::string>> k_keys = {
        {"jsonl", {"type", "path"}},
        {"http", {"type", "url", "headers", "token", "timeout", "retries"}},
        {"stderr", {"type"}},
        {"fd", {"type", "fd"}},
        {"exec", {"type", "command", "timeout"}}};
    check_keys(sink, k_keys.at(type), pointer, field);
    json out = {{"type", type}};
    auto required_text = [&](const char* key, const char* what) {
      auto text = sink.contains(key) ? text_of(sink[key], pointer + "/" + key) : std::nullopt;
      if (!text || text->empty()) {
        fail_at(sink.contains(key) ? pointer + "/" + key : pointer,
                fmt::format("{}: a {} sink needs \"{}\" ({})", field, type, key, what));
      }
      return *text;
    };
    if (type == "jsonl") {
      std::string path = expand_home(required_text("path", "the file to append events to"));
      if (!fs::path(path).is_absolute()) {
        fail_at(pointer + "/path", field + ".path: expected an absolute path (or ~/...), since "
                                           "commands run from any directory");
      }
      out["path"] = path;
    }
    if (type == "http") {
      std::string url = required_text("url", "where events are POSTed");
      if (!url.starts_with("http://") && !url.starts_with("https://")) {
        fail_at(pointer + "/url", field + ".url: expected an http:// or https:// URL");
      }
      out["url"] = url;
      if (sink.contains("headers")) {
        const json& headers = sink["headers"];
        if (!headers.is_object()) {
          fail_at(pointer + "/headers", field + ".headers: expected a map of header: value");
        }
        for (const auto& [name, value] : headers.items()) {
          auto text = text_of(value, pointer + "/headers/" + escape_token(name));
          std::string lower = name;
          std::transform(lower.begin(), lower.end(), lower.begin(), ::tolower);
          if (lower == "authorization") {
            fail_at_key(pointer + "/headers/" + escape_token(name),
                        field + ".headers: no Authorization header inline; use token: {env: VAR} "
                                "or {file: PATH}, which is sent as a bearer token");
          }
          if (!text) {
            fail_at(pointer + "/headers/" + escape_token(name),
                    fmt::format("{}.headers.{}: expected text", field, name));
          }
          out["headers"][name] = *text;
        }
      }
      if (sink.contains("token")) {
        SecretRef ref = secret_ref(field + ".token", sink["token"], pointer + "/token");
        out["token"] = {{ref.kind == SecretRef::Kind::env ? "env" : "file", ref.source}};
      }
      if (sink.contains("retries")) {
        const json& retries = sink["retries"];
        if (!retries.is_number_integer() || retries.get<long>() < 0 || retries.get<long>() > 100) {
          fail_at(pointer + "/retries", field + ".retries: expected a whole number from 0 to 100");
        }
        out["retries"] = retries;
      }
    }
    if (type == "fd") {
      const json* fd = sink.contains("fd") ? &sink["fd"] : nullptr;
      if (fd == nullptr || !fd->is_number_integer() || fd->get<long>() < 2 ||
          fd->get<long>() > 1023) {
        fail_at(fd ? pointer + "/fd" : pointer,
                field + ": an fd sink needs \"fd\": a descriptor number from 2 to 1023 (0 and 1 "
                        "are the command's stdin and stdout)");
      }
      out["fd"] = *fd;
    }
    if (type == "exec") {
      const json* command = sink.contains("command") ? &sink["command"] : nullptr;
      if (command == nullptr || !command->is_array() || command->empty()) {
        fail_at(command ? pointer + "/command" : pointer,
                field + ": an exec sink needs \"command\": a list such as [/usr/local/bin/hook, "
                        "--flag] (argv, no shell)");
      }
      for (size_t i = 0; i < command->size(); ++i) {
        auto text = text_of((*command)[i], fmt::format("{}/command/{}", pointer, i));
        if (!text || text->empty()) {
          fail_at(fmt::format("{}/command/{}", pointer, i),
                  fmt::format("{}.command[{}]: expected text", field, i));
        }
        out["command"].push_back(*text);
      }
    }
    if (sink.contains("timeout")) {
      std::string text = text_of(sink["timeout"], pointer + "/timeout").value_or("");
      auto parsed = parse_duration_ms(text);
      if (!parsed || parsed->count() <= 0) {
        fail_at(pointer + "/timeout", fmt::format("{}.timeout: invalid duration \"{}\" (use "
                                                  "500ms, 5s, 1m)",
                                                  field, text));
      }
      out["timeout"] = text;
    }
    return out;
  }

  // The global config file (config.yaml): `events`, `delivery.wait`, `expiring.window`,
  // `ledger`.
  Config config_of_file() const {
    for (const auto& [key, value] : m_root.items()) {
      if (!contains({"events", "delivery", "expiring", "ledger"}, key)) {
        fail_at_key("/" + escape_token(key),
                    fmt::format("unknown key \"{}\"{}", key,
                                suggestion(key, {"events", "delivery", "expiring", "ledger"},
                                           "known keys")));
      }
    }
    Config config;
    config.path = m_file;
    config.events = events();
    auto duration_in = [&](const char* section, const char* key) -> std::optional<json> {
      const json* map = find(section);
      if (map == nullptr) {
        return std::nullopt;
      }
      if (!map->is_object()) {
        fail_at(std::string("/") + section,
                fmt::format("{}: expected a map with \"{}\"", section, key));
      }
      check_keys(*map, {key}, std::string("/") + section, section);
      return map->contains(key) ? std::optional((*map)[key]) : std::nullopt;
    };
    if (auto wait = duration_in("delivery", "wait")) {
      std::string text = text_of(*wait, "/delivery/wait").value_or("");
      auto parsed = parse_duration_ms(text);
      if (!parsed) {
        fail_at("/delivery/wait", fmt::format("delivery.wait: invalid duration \"{}\" (use 500ms, "
                                              "2s)",
                                              text));
      }
      config.delivery_wait = *parsed;
    }
    if (duration_in("expiring", "window")) {
      config.expiring_window = duration_at("/expiring/window", "expiring.window");
    }
    ledger_of_file(config);
    return config;
  }

  void ledger_of_file(Config& config) const {
    const json* ledger = find("ledger");
    if (ledger == nullptr || ledger->is_null()) {
      return;
    }
    config.ledger_where = where("/ledger");
    if (ledger->is_string()) {
      config.ledger_url = ledger->get<std::string>();
      return;
    }
    if (!ledger->is_object()) {
      fail_at("/ledger", "ledger: expected a postgresql:// URI or a map with \"url\" and "
                         "\"password\"");
    }
    check_keys(*ledger, {"url", "password", "keep_connections"}, "/ledger", "ledger");
    if (ledger->contains("keep_connections")) {
      const json& keep = (*ledger)["keep_connections"];
      config.ledger_keep = keep == 0 || keep == "0"
                               ? Seconds(0)
                               : duration_at("/ledger/keep_connections", "ledger.keep_connections");
    }
    config.ledger_url =
        ledger->contains("url") ? text_of((*ledger)["url"], "/ledger/url") : std::nullopt;
    // keep_connections alone tunes a ledger named elsewhere ($SANDBOXER_LEDGER, --ledger).
    if (!config.ledger_url && (!config.ledger_keep || ledger->contains("password"))) {
      fail_at("/ledger", "ledger: \"url\" (a postgresql:// URI) is missing");
    }
    if (ledger->contains("password")) {
      const json& ref = (*ledger)["password"];
      bool one_source = ref.is_object() && ref.size() == 1 &&
                        (ref.contains("env") || ref.contains("file")) && ref.begin()->is_string();
      if (!one_source) {
        fail_at("/ledger/password", "ledger.password: expected {env: VARIABLE} or {file: PATH}; "
                                    "a password is never written in config.yaml itself");
      }
      config.ledger_password = ref;
    }
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

  const fs::path& m_file;
  Document& m_doc;
  const json& m_root;
};

Config config_of(const fs::path& file, Document& doc) {
  return Checker(file, doc).config();
}

Profile checked_profile(const fs::path& file, Document& doc, std::vector<fs::path> chain) {
  return Checker(file, doc).run(std::move(chain));
}

} // namespace sandboxer::profile_internal
