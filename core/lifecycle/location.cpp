#include "core/lifecycle/location.hpp"

#include <fmt/format.h>
#include <mutex>
#include <set>
#include <spdlog/spdlog.h>

namespace sandboxer {

Location location_of(const DriverFactory& factory, const SandboxRecord& record,
                     const DriverContext& context) {
  Location location;
  location.now = factory.location(record.spec, context);
  location.used = location.now;
  if (record.info.is_object()) {
    for (auto& [key, value] : location.used.items()) {
      if (auto recorded = record.info.find(key); recorded != record.info.end()) {
        value = *recorded;
      }
    }
  }
  return location;
}

namespace {

std::string words(const nlohmann::json& location) {
  std::string text;
  for (const auto& [key, value] : location.items()) {
    text += fmt::format("{}{} {}", text.empty() ? "" : ", ", key,
                        value.is_string() ? value.get<std::string>() : value.dump());
  }
  return text;
}

} // namespace

void warn_if_moved(const SandboxRecord& record, const Location& location) {
  if (!location.moved()) {
    return;
  }
  static std::mutex mutex;
  static std::set<std::string> warned;
  {
    std::lock_guard lock(mutex);
    if (!warned.insert(record.driver + "\n" + location.used.dump() + "\n" + location.now.dump())
             .second) {
      return;
    }
  }
  std::string who = record.id.empty() ? "a sandbox of this ledger" : record.id;
  spdlog::warn("{} lives at {} ({} driver), where it was made; this environment points to {}: "
               "the recorded place is used",
               who, words(location.used), record.driver, words(location.now));
}

} // namespace sandboxer
