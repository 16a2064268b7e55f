#pragma once
// Where the hours went (`sandboxer usage`, docs/usage.md): the time each sandbox spent running and
// paused within a window, read from the histories in the ledger, and what it cost by the profile's
// `cost`. Read-only: it writes no history entry and emits no event.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <sandboxer/clock.hpp>
#include <sandboxer/duration.hpp>

#include "core/ledger/ledger.hpp"

namespace sandboxer {

// [from, to): the instant `to` is out.
struct UsageWindow {
  TimePoint from;
  TimePoint to;
};

struct StateTime {
  Seconds running{0};
  Seconds paused{0};
  Seconds total() const { return running + paused; }
};

// The time `record` spent within `window`. Each history entry starts an interval in the state it
// entered, which the next entry ends (the last one: `now`, unless it closed the record): `paused`
// counts as paused, every other live state (creating ... resuming, expired, orphaned) as running,
// destroyed and failed as neither.
StateTime time_in_window(const SandboxRecord& record, const UsageWindow& window, TimePoint now);

// Whether any part of the record's life, even an instant (a create that failed at once), lies in
// `window`: what `count` counts.
bool lived_in_window(const SandboxRecord& record, const UsageWindow& window, TimePoint now);

// What the records are grouped by: `--by profile|driver|owner|label:KEY`; none: one total.
struct UsageBy {
  enum class Kind { none, profile, driver, owner, label };
  Kind kind = Kind::none;
  std::string label; // KEY of label:KEY

  // "profile", "driver", "owner", "label:KEY"; throws UsageError for anything else.
  static UsageBy parse(const std::string& text);
  // What parse() read: "label:team"; empty for none.
  std::string text() const;
  // The record's group; none when the record has no such label.
  std::optional<std::string> key_of(const SandboxRecord& record) const;
};

struct UsageRow {
  std::optional<std::string> key; // the group; none: records without the label (and the total)
  StateTime time;
  std::uint64_t count = 0;            // sandboxes that lived in the window
  std::uint64_t uncosted = 0;         // of them, those whose profile declared no `cost`
  std::map<std::string, double> cost; // by currency
};

struct UsageReport {
  UsageWindow window;
  TimePoint now;
  UsageBy by;
  std::vector<UsageRow> rows; // by key, the row without one last; empty without --by
  UsageRow total;
  std::optional<TimePoint> pruned_before; // the ledger's (LedgerData::pruned_before)
  std::vector<std::string> warnings;
};

// Sums records one at a time, keeping only the rows: the report over a ledger of any size.
class UsageTally {
public:
  UsageTally(const UsageWindow& window, UsageBy by, TimePoint now);
  void add(const SandboxRecord& record);
  // The rows, the total, and a warning when the window starts before `pruned_before`.
  UsageReport report(std::optional<TimePoint> pruned_before) const;

private:
  UsageWindow m_window;
  UsageBy m_by;
  TimePoint m_now;
  std::map<std::optional<std::string>, UsageRow> m_rows;
  UsageRow m_total;
};

// The report over every record of `ledger` that may have lived in `window`
// (LedgerStore::scan_window). `window.to` after `now` counts nothing past `now`.
UsageReport usage(const Ledger& ledger, const UsageWindow& window, const UsageBy& by,
                  TimePoint now);

} // namespace sandboxer
