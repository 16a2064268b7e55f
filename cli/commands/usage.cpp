// `sandboxer usage`: where the hours went (docs/usage.md). Running and paused hours, counts and
// cost over a window, by profile, driver, owner or a label. Read-only: no history entry, no event.
#include "core/usage/usage.hpp"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <cmath>
#include <fmt/format.h>
#include <set>
#include <spdlog/spdlog.h>

#include "cli/commands/commands.hpp"
#include "core/errors.hpp"

namespace sandboxer::commands {
namespace {

// Without --since or --from: the default retention of closed records (reap --keep-history), so
// that the default report is whole.
constexpr Seconds k_default_window{7 * 86400};

struct UsageArgs {
  std::optional<std::string> since;
  std::optional<std::string> from;
  std::optional<std::string> to;
  std::optional<std::string> by;
};

UsageWindow window_of(const UsageArgs& args, TimePoint now) {
  UsageWindow window;
  window.to = args.to ? time_option("--to", *args.to) : now;
  if (args.from) {
    window.from = time_option("--from", *args.from);
  } else if (args.since) {
    window.from = since_option("--since", *args.since, now);
  } else {
    window.from = window.to - k_default_window;
  }
  if (window.from >= window.to) {
    throw UsageError(fmt::format("the window from {} to {} is empty: its start (--from or "
                                 "--since) must come before its end (--to, else now)",
                                 format_time(window.from), format_time(window.to)));
  }
  return window;
}

// Amounts to a millionth: sums of binary fractions print as 0.3, not 0.30000000000000004.
double rounded(double amount) {
  return std::round(amount * 1e6) / 1e6;
}

nlohmann::json row_json(const UsageRow& row) {
  nlohmann::json cost = nlohmann::json::object();
  for (const auto& [currency, amount] : row.cost) {
    cost[currency] = rounded(amount);
  }
  return {{"count", row.count},
          {"running_seconds", row.time.running.count()},
          {"paused_seconds", row.time.paused.count()},
          {"total_seconds", row.time.total().count()},
          {"uncosted", row.uncosted},
          {"cost", cost}};
}

nlohmann::json report_json(const UsageReport& report) {
  nlohmann::json groups = nlohmann::json::array();
  for (const auto& row : report.rows) {
    nlohmann::json item = row_json(row);
    item["key"] = row.key ? nlohmann::json(*row.key) : nlohmann::json(nullptr);
    groups.push_back(std::move(item));
  }
  const std::string by = report.by.text();
  return {{"from", format_time(report.window.from)},
          {"to", format_time(report.window.to)},
          {"now", format_time(report.now)},
          {"by", by.empty() ? nlohmann::json(nullptr) : nlohmann::json(by)},
          {"groups", std::move(groups)},
          {"total", row_json(report.total)},
          {"pruned_before", report.pruned_before
                                ? nlohmann::json(format_time(*report.pruned_before))
                                : nlohmann::json(nullptr)},
          {"warnings", report.warnings}};
}

// The table in hours: two decimals for people, four in CSV (for a spreadsheet's sums). CSV
// has a cost column per currency, the table one column for all.
Table report_table(const UsageReport& report, bool csv) {
  const int places = csv ? 4 : 2;
  auto hours = [&](Seconds time) {
    return fmt::format("{:.{}f}", static_cast<double>(time.count()) / 3600.0, places);
  };
  std::set<std::string> currencies;
  for (const auto& [currency, amount] : report.total.cost) {
    currencies.insert(currency);
  }
  Table table;
  if (csv) {
    table.headers = {"key", "count", "running_hours", "paused_hours", "total_hours", "uncosted"};
    for (const auto& currency : currencies) {
      table.headers.push_back("cost_" + currency);
    }
  } else {
    std::string key = report.by.text();
    std::transform(key.begin(), key.end(), key.begin(), ::toupper);
    table.headers = {key.empty() ? "GROUP" : key,
                     "SANDBOXES",
                     "RUNNING (h)",
                     "PAUSED (h)",
                     "TOTAL (h)",
                     "UNCOSTED",
                     "COST"};
  }
  auto add = [&](const std::string& key, const UsageRow& row) {
    std::vector<std::string> cells = {key,
                                      std::to_string(row.count),
                                      hours(row.time.running),
                                      hours(row.time.paused),
                                      hours(row.time.total()),
                                      std::to_string(row.uncosted)};
    std::string costs;
    for (const auto& currency : currencies) {
      auto at = row.cost.find(currency);
      const double amount = at == row.cost.end() ? 0.0 : at->second;
      if (csv) {
        cells.push_back(fmt::format("{:.{}f}", amount, places));
      } else if (at != row.cost.end()) {
        costs += fmt::format("{}{:.2f} {}", costs.empty() ? "" : " + ", amount, currency);
      }
    }
    if (!csv) {
      cells.push_back(costs.empty() ? "-" : costs);
    }
    table.rows.push_back(std::move(cells));
  };
  for (const auto& row : report.rows) {
    add(row.key.value_or(csv ? "" : "-"), row);
  }
  add("TOTAL", report.total);
  return table;
}

ExitCode run_usage(Context& context, const UsageArgs& args) {
  const TimePoint now = context.clock().now();
  const UsageWindow window = window_of(args, now);
  const UsageBy by = args.by ? UsageBy::parse(*args.by) : UsageBy{};
  const UsageReport report = usage(context.ledger(), window, by, now);
  for (const auto& warning : report.warnings) {
    spdlog::warn("{}", warning);
  }
  context.out().note(fmt::format("from {} to {}", format_time(window.from),
                                 format_time(std::min(window.to, now))));
  const bool csv = context.out().format() == Format::csv;
  context.out().print(report_json(report), [&] { return report_table(report, csv); });
  return ExitCode::ok;
}

} // namespace

void setup_usage(CLI::App& app, Runner& runner) {
  auto args = std::make_shared<UsageArgs>();
  auto* since = app.add_option("--since", args->since,
                               "The window starts a duration ago (30d) or at a time (RFC 3339); "
                               "default 7d");
  auto* from = app.add_option("--from", args->from, "The window starts at this RFC 3339 time");
  from->excludes(since);
  app.add_option("--to", args->to, "The window ends at this RFC 3339 time (default now)");
  app.add_option("--by", args->by, "Group by profile, driver, owner (its user) or label:KEY");
  app.footer("Computed from the ledger's histories, live and closed (docs/usage.md): paused time "
             "counts as paused, every other live state as running. Cost from each profile's "
             "`cost: {per_hour, paused_per_hour, currency}` as it was at create. -o json in "
             "seconds, the table in hours, -o csv for spreadsheets. Read-only: no history entry, "
             "no event.");
  runner = [args](Context& context) { return run_usage(context, *args); };
}

} // namespace sandboxer::commands
