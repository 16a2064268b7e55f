#include "core/usage/usage.hpp"

#include <algorithm>
#include <fmt/format.h>

#include <sandboxer/driver.hpp>

#include "core/errors.hpp"

namespace sandboxer {
namespace {

enum class CountedAs { running, paused, neither };

CountedAs counted_as(State state) {
  if (state == State::paused) {
    return CountedAs::paused;
  }
  return is_live(state) ? CountedAs::running : CountedAs::neither;
}

// [start, end) within the window, and not past `now`.
Seconds clipped(TimePoint start, TimePoint end, const UsageWindow& window, TimePoint now) {
  const TimePoint low = std::max(start, window.from);
  const TimePoint high = std::min({end, window.to, now});
  return high > low ? high - low : Seconds(0);
}

double hours(Seconds time) {
  return static_cast<double>(time.count()) / 3600.0;
}

// The number at `key` of the profile's cost, or `otherwise` when it is not one (a ledger written
// by hand may hold anything there).
double number_at(const nlohmann::json& cost, const char* key, double otherwise) {
  auto at = cost.find(key);
  return at != cost.end() && at->is_number() ? at->get<double>() : otherwise;
}

// What `time` cost by the record's `cost`, as {currency, amount}; none when its profile declared
// no cost. An hour paused costs paused_per_hour, nothing when the profile left it out.
std::optional<std::pair<std::string, double>> cost_of(const SandboxRecord& record,
                                                      const StateTime& time) {
  const nlohmann::json& cost = record.policy.cost;
  if (!cost.is_object() || !cost.contains("per_hour") || !cost["per_hour"].is_number()) {
    return std::nullopt;
  }
  auto currency = cost.find("currency");
  return std::pair{currency != cost.end() && currency->is_string() ? currency->get<std::string>()
                                                                   : std::string("USD"),
                   hours(time.running) * number_at(cost, "per_hour", 0) +
                       hours(time.paused) * number_at(cost, "paused_per_hour", 0)};
}

void add_to(UsageRow& row, const StateTime& time,
            const std::optional<std::pair<std::string, double>>& cost) {
  row.time.running += time.running;
  row.time.paused += time.paused;
  ++row.count;
  if (cost) {
    row.cost[cost->first] += cost->second;
  } else {
    ++row.uncosted;
  }
}

} // namespace

StateTime time_in_window(const SandboxRecord& record, const UsageWindow& window, TimePoint now) {
  StateTime time;
  auto add = [&](State state, TimePoint start, TimePoint end) {
    const Seconds spent = clipped(start, end, window, now);
    switch (counted_as(state)) {
    case CountedAs::running:
      time.running += spent;
      break;
    case CountedAs::paused:
      time.paused += spent;
      break;
    case CountedAs::neither:
      break;
    }
  };
  const auto& history = record.history;
  if (history.empty()) {
    add(record.state, record.created_at, now);
    return time;
  }
  for (size_t i = 0; i < history.size(); ++i) {
    add(history[i].to, history[i].time, i + 1 < history.size() ? history[i + 1].time : now);
  }
  return time;
}

bool lived_in_window(const SandboxRecord& record, const UsageWindow& window, TimePoint now) {
  const TimePoint start = record.history.empty() ? record.created_at : record.history.front().time;
  const TimePoint end = is_live(record.state) ? now : last_entry_time(record);
  return start < window.to && (end > window.from || start >= window.from);
}

UsageBy UsageBy::parse(const std::string& text) {
  static const std::vector<std::string> k_words = {"profile", "driver", "owner", "label:KEY"};
  if (text == "profile") {
    return {Kind::profile, ""};
  }
  if (text == "driver") {
    return {Kind::driver, ""};
  }
  if (text == "owner") {
    return {Kind::owner, ""};
  }
  if (text.starts_with("label:") && text.size() > 6) {
    return {Kind::label, text.substr(6)};
  }
  auto guess = closest_match(text, k_words);
  throw UsageError(fmt::format("--by \"{}\": expected profile, driver, owner or label:KEY{}", text,
                               guess ? fmt::format("; did you mean {}?", *guess) : ""));
}

std::string UsageBy::text() const {
  switch (kind) {
  case Kind::none:
    return "";
  case Kind::profile:
    return "profile";
  case Kind::driver:
    return "driver";
  case Kind::owner:
    return "owner";
  case Kind::label:
    return "label:" + label;
  }
  return "";
}

std::optional<std::string> UsageBy::key_of(const SandboxRecord& record) const {
  switch (kind) {
  case Kind::none:
    return std::nullopt;
  case Kind::profile:
    return record.profile.name;
  case Kind::driver:
    return record.driver;
  case Kind::owner:
    return record.owner.user;
  case Kind::label: {
    auto at = record.labels.find(label);
    return at == record.labels.end() ? std::nullopt : std::optional(at->second);
  }
  }
  return std::nullopt;
}

UsageTally::UsageTally(const UsageWindow& window, UsageBy by, TimePoint now)
    : m_window(window), m_by(std::move(by)), m_now(now) {}

void UsageTally::add(const SandboxRecord& record) {
  if (!lived_in_window(record, m_window, m_now)) {
    return;
  }
  const StateTime time = time_in_window(record, m_window, m_now);
  const auto cost = cost_of(record, time);
  add_to(m_total, time, cost);
  if (m_by.kind != UsageBy::Kind::none) {
    const auto key = m_by.key_of(record);
    auto [row, added] = m_rows.try_emplace(key);
    if (added) {
      row->second.key = key;
    }
    add_to(row->second, time, cost);
  }
}

UsageReport UsageTally::report(std::optional<TimePoint> pruned_before) const {
  UsageReport report{m_window, m_now, m_by, {}, m_total, pruned_before, {}};
  // By key; the records without one (no such label) last.
  for (const auto& [key, row] : m_rows) {
    if (key) {
      report.rows.push_back(row);
    }
  }
  if (auto none = m_rows.find(std::nullopt); none != m_rows.end()) {
    report.rows.push_back(none->second);
  }
  if (pruned_before && m_window.from < *pruned_before) {
    report.warnings.push_back(fmt::format(
        "records closed up to {} were pruned from the ledger (reap --keep-history): the window "
        "from {} may miss sandboxes that lived in it",
        format_time(*pruned_before), format_time(m_window.from)));
  }
  return report;
}

UsageReport usage(const Ledger& ledger, const UsageWindow& window, const UsageBy& by,
                  TimePoint now) {
  UsageTally tally(window, by, now);
  const auto pruned_before =
      ledger.store().scan_window(window.from, window.to, [&](SandboxRecord& record) {
        tally.add(record);
        return true;
      });
  return tally.report(pruned_before);
}

} // namespace sandboxer
