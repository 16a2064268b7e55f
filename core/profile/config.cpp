// config.yaml, the global configuration: its event sinks, delivery and expiry windows, and the
// ledger to use (docs/configuration.md).
#include <algorithm>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <sandboxer/error.hpp>

#include "core/profile/document_reader.hpp"

namespace sandboxer::profile_internal {
namespace {

class ConfigChecker : public DocumentReader {
public:
  using DocumentReader::DocumentReader;

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
    config.events = sinks_of(m_file, m_doc);
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
};

} // namespace

Config config_of(const fs::path& file, Document& doc) {
  return ConfigChecker(file, doc).config_of_file();
}

} // namespace sandboxer::profile_internal
