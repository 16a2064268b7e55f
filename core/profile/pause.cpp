// A profile's pause and idle rules (docs/pause.md): `ttl.paused_max`, `ttl.on_paused_max`,
// `ttl.idle`, `ttl.on_idle`, `pause: {memory}`, `resume: {on_exec}` and `cost`.
#include <fmt/format.h>

#include "core/profile/document_reader.hpp"

namespace sandboxer::profile_internal {
namespace {

class PauseChecker : public DocumentReader {
public:
  using DocumentReader::DocumentReader;

  PausePolicy policy() const {
    PausePolicy policy;
    if (const json* ttl = find("ttl"); ttl && ttl->is_object()) {
      if (auto d = duration_of(*ttl, "paused_max", "/ttl/paused_max", "ttl.paused_max")) {
        policy.paused_max = *d;
      }
      policy.on_paused_max =
          word_of(*ttl, "on_paused_max", "/ttl/on_paused_max", {"destroy", "snapshot"});
      if (auto d = duration_of(*ttl, "idle", "/ttl/idle", "ttl.idle")) {
        policy.idle = *d;
      }
      policy.on_idle = word_of(*ttl, "on_idle", "/ttl/on_idle", {"destroy", "pause", "snapshot"});
      if (!policy.on_paused_max.empty() && !policy.paused_max) {
        fail_at("/ttl/on_paused_max", "ttl.on_paused_max: set ttl.paused_max too (how long a "
                                      "sandbox may stay paused)");
      }
      if (!policy.on_idle.empty() && !policy.idle) {
        fail_at("/ttl/on_idle", "ttl.on_idle: set ttl.idle too (how long without activity)");
      }
    }
    if (const json* pause = map_of("pause", "pause: expected a map such as {memory: true}")) {
      check_keys(*pause, {"memory"}, "/pause", "pause");
      policy.memory = flag_of(*pause, "memory", "/pause/memory", "pause.memory");
    }
    if (const json* resume = map_of("resume", "resume: expected a map such as {on_exec: true}")) {
      check_keys(*resume, {"on_exec"}, "/resume", "resume");
      policy.resume_on_exec =
          flag_of(*resume, "on_exec", "/resume/on_exec", "resume.on_exec").value_or(false);
    }
    if (const json* cost =
            map_of("cost", "cost: expected a map such as {per_hour: 0.12, currency: USD}")) {
      policy.cost = cost_of(*cost);
    }
    return policy;
  }

private:
  const json* map_of(const std::string& key, const std::string& shape) const {
    const json* value = find(key);
    if (value == nullptr || value->is_null()) {
      return nullptr;
    }
    if (!value->is_object()) {
      fail_at("/" + key, shape);
    }
    return value;
  }

  std::optional<Seconds> duration_of(const json& map, const std::string& key,
                                     const std::string& pointer, const std::string& field) const {
    if (!map.contains(key) || map[key].is_null()) {
      return std::nullopt;
    }
    Seconds value = duration_at(pointer, field);
    if (value < Seconds(1)) {
      fail_at(pointer, fmt::format("{}: at least 1s", field));
    }
    return value;
  }

  std::string word_of(const json& map, const std::string& key, const std::string& pointer,
                      const std::vector<std::string>& allowed) const {
    if (!map.contains(key) || map[key].is_null()) {
      return "";
    }
    auto text = text_of(map[key], pointer);
    if (!text || std::find(allowed.begin(), allowed.end(), *text) == allowed.end()) {
      fail_at(pointer, fmt::format("ttl.{}: expected one of {}", key, fmt::join(allowed, ", ")));
    }
    return *text;
  }

  std::optional<bool> flag_of(const json& map, const std::string& key, const std::string& pointer,
                              const std::string& field) const {
    if (!map.contains(key) || map[key].is_null()) {
      return std::nullopt;
    }
    if (!map[key].is_boolean()) {
      fail_at(pointer, fmt::format("{}: expected true or false", field));
    }
    return map[key].get<bool>();
  }

  json cost_of(const json& cost) const {
    check_keys(cost, {"per_hour", "paused_per_hour", "currency"}, "/cost", "cost");
    json out = json::object();
    for (const char* key : {"per_hour", "paused_per_hour"}) {
      if (!cost.contains(key) || cost[key].is_null()) {
        continue;
      }
      const std::string pointer = std::string("/cost/") + key;
      auto text = text_of(cost[key], pointer);
      char* end = nullptr;
      const double value = text ? std::strtod(text->c_str(), &end) : -1;
      if (!text || end == text->c_str() || *end != '\0' || !(value >= 0) || value > 1e9) {
        fail_at(pointer,
                fmt::format("cost.{}: expected a number of at least 0, such as 0.12", key));
      }
      out[key] = value;
    }
    if (!out.contains("per_hour")) {
      fail_at("/cost", "cost: missing per_hour (what an hour running costs)");
    }
    std::string currency = "USD";
    if (cost.contains("currency") && !cost["currency"].is_null()) {
      auto text = text_of(cost["currency"], "/cost/currency");
      if (!text || text->empty() || text->size() > 8) {
        fail_at("/cost/currency", "cost.currency: expected a short code such as USD or EUR");
      }
      currency = *text;
    }
    out["currency"] = currency;
    return out;
  }
};

} // namespace

PausePolicy pause_policy_of(const fs::path& file, Document& doc) {
  return PauseChecker(file, doc).policy();
}

} // namespace sandboxer::profile_internal
