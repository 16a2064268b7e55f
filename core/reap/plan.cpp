// What a reap would destroy, its JSON (the dry-run output is also the file `reap --plan` reads),
// and the checks that keep `reap --plan` to exactly what was reviewed.
#include <fmt/format.h>

#include <sandboxer/error.hpp>

#include "core/errors.hpp"
#include "core/owner.hpp"
#include "core/reap/internal.hpp"
#include "core/reap/reap.hpp"

namespace sandboxer {
namespace {

nlohmann::json time_or_null(const std::optional<TimePoint>& t) {
  return t ? nlohmann::json(format_time(*t)) : nlohmann::json(nullptr);
}

// Reads a field of plan item `index`, or throws naming it.
template <typename T>
T plan_field(const nlohmann::json& item, size_t index, const char* key, const char* type) {
  auto it = item.find(key);
  if (it == item.end()) {
    throw UsageError(fmt::format("--plan: items[{}] has no \"{}\"; pass the unmodified output of "
                                 "'sandboxer reap --dry-run -o json'",
                                 index, key));
  }
  try {
    return it->get<T>();
  } catch (const nlohmann::json::exception&) {
    throw UsageError(fmt::format("--plan: items[{}].{} is not {}", index, key, type));
  }
}

// One record's place in the plan, if it has one.
void plan_destroy(const SandboxRecord& record, TimePoint now, const ReapOptions& options,
                  const std::string& this_host, std::vector<ReapItem>& items) {
  auto decision = decide(record, now, options, this_host);
  if (!decision) {
    return;
  }
  auto next = next_attempt_at(record);
  if (next && now < *next) {
    ReapItem item = reap::item_of(record, "wait");
    item.outcome = "waiting";
    item.reason = fmt::format("destroy failed {} time(s); next attempt at {}", item.attempt,
                              format_time(*next));
    items.push_back(std::move(item));
    return;
  }
  ReapItem item = reap::item_of(record, decision->action);
  item.outcome = "planned";
  item.reason = decision->reason;
  items.push_back(std::move(item));
}

} // namespace

ReapItem reap::item_of(const SandboxRecord& record, std::string action) {
  ReapItem item;
  item.id = record.id;
  item.name = record.name;
  item.driver = record.driver;
  item.state = to_string(record.state);
  item.expires_at = record.expires_at;
  item.action = std::move(action);
  item.history_size = record.history.size();
  item.backend_id = record.backend_id;
  item.attempt = failed_attempts(record);
  item.next_attempt_at = next_attempt_at(record);
  return item;
}

std::vector<ReapItem> plan_destroys(const LedgerData& data, TimePoint now,
                                    const ReapOptions& options) {
  std::vector<ReapItem> items;
  const std::string this_host = host_name();
  for (const auto& record : data.sandboxes) {
    try {
      plan_destroy(record, now, options, this_host, items);
    } catch (const std::exception& e) {
      // One odd record is reported (exit 6) and the others are still planned.
      ReapItem item = reap::item_of(record, "check");
      item.outcome = "failed";
      item.reason = e.what();
      items.push_back(std::move(item));
    }
  }
  return items;
}

nlohmann::json to_json(const ReapItem& item) {
  return {{"id", item.id},
          {"name", item.name},
          {"driver", item.driver},
          {"state", item.state},
          {"expires_at", time_or_null(item.expires_at)},
          {"action", item.action},
          {"outcome", item.outcome},
          {"reason", item.reason},
          {"history_size", item.history_size},
          {"backend_id", item.backend_id},
          {"attempt", item.attempt},
          {"next_attempt_at", time_or_null(item.next_attempt_at)}};
}

nlohmann::json to_json(const ReapReport& report) {
  nlohmann::json items = nlohmann::json::array();
  for (const auto& item : report.items) {
    items.push_back(to_json(item));
  }
  return {{"plan_version", 1},
          {"ledger_id", report.ledger_id},
          {"now", format_time(report.now)},
          {"dry_run", report.dry_run},
          {"skew", report.skew ? nlohmann::json(format_duration(*report.skew)) : nullptr},
          {"grace", report.grace ? nlohmann::json(format_duration(*report.grace)) : nullptr},
          {"items", std::move(items)},
          {"destroyed", report.destroyed},
          {"paused", report.paused},
          {"snapshotted", report.snapshotted},
          {"filled", report.filled},
          {"failures", report.failures},
          {"repaired", report.repaired},
          {"orphans", report.orphans},
          {"vanished", report.vanished},
          {"pruned", report.pruned},
          {"duration_seconds", report.duration_seconds},
          {"refused", report.refused ? nlohmann::json(*report.refused) : nlohmann::json(nullptr)}};
}

ReapReport plan_from_json(const nlohmann::json& plan) {
  if (!plan.is_object() || !plan.contains("items") || !plan["items"].is_array()) {
    throw UsageError("--plan: expected the JSON object printed by 'sandboxer reap --dry-run -o "
                     "json' (with \"items\": [...])");
  }
  if (plan.value("plan_version", 0) != 1) {
    throw UsageError("--plan: unknown plan_version (expected 1); make the plan again with this "
                     "version of sandboxer");
  }
  if (!plan.value("dry_run", false)) {
    throw UsageError("--plan: this is the report of a real run, not a dry run; make a plan with "
                     "'sandboxer reap --dry-run -o json > plan.json'");
  }
  ReapReport report;
  report.ledger_id = plan.value("ledger_id", "");
  for (auto [key, field] : {std::pair{"skew", &report.skew}, std::pair{"grace", &report.grace}}) {
    if (plan.contains(key) && plan[key].is_string()) {
      *field = parse_duration(plan[key].get<std::string>());
      if (!*field) {
        throw UsageError(
            fmt::format("--plan: {} \"{}\" is not a duration", key, plan[key].get<std::string>()));
      }
    }
  }
  const auto& items = plan["items"];
  for (size_t i = 0; i < items.size(); ++i) {
    const auto& j = items[i];
    if (!j.is_object()) {
      throw UsageError(fmt::format("--plan: items[{}] is not an object", i));
    }
    ReapItem item;
    item.id = plan_field<std::string>(j, i, "id", "a string");
    item.action = plan_field<std::string>(j, i, "action", "a string");
    item.history_size = plan_field<size_t>(j, i, "history_size", "a number");
    item.name = j.value("name", "");
    item.driver = j.value("driver", "");
    item.state = j.value("state", "");
    item.backend_id = j.value("backend_id", "");
    item.reason = j.value("reason", "");
    if (j.contains("expires_at") && j["expires_at"].is_string()) {
      item.expires_at = parse_time(j["expires_at"].get<std::string>());
      if (!item.expires_at) {
        throw UsageError(fmt::format("--plan: items[{}].expires_at is not an RFC 3339 time", i));
      }
    }
    report.items.push_back(std::move(item));
  }
  return report;
}

std::optional<std::string> plan_item_blocker(const ReapItem& item, const SandboxRecord* record,
                                             TimePoint now, const ReapOptions& options) {
  if (!reap::executes(item.action)) {
    return fmt::format("only the destroy, pause and snapshot+destroy items of a plan are executed "
                       "(this one is \"{}\")",
                       item.action);
  }
  if (!record) {
    return std::string("no longer in the ledger");
  }
  if (record->history.size() != item.history_size || record->expires_at != item.expires_at) {
    return fmt::format("changed since the plan (now {}, {} history entries; the plan saw {})",
                       to_string(record->state), record->history.size(), item.history_size);
  }
  auto decision = decide(*record, now, options, host_name());
  if (!decision) {
    return std::string("neither expired nor idle any more");
  }
  if (decision->action != item.action) {
    return fmt::format("now due for {}, not {}", decision->action, item.action);
  }
  if (auto next = next_attempt_at(*record); next && now < *next) {
    return "next attempt not before " + format_time(*next);
  }
  return std::nullopt;
}

} // namespace sandboxer
