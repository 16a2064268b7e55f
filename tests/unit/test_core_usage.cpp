// `sandboxer usage` (core/usage): the time each record spent running and paused within a window,
// from hand-built histories whose intervals are known; counts, costs by currency, groups, the
// pruned_before warning; and the local store's window scan, which must not open the journal
// segments of days before the window.
#include <chrono>
#include <filesystem>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <set>

#include "core/errors.hpp"
#include "core/usage/usage.hpp"
#include "support/temp_dir.hpp"

namespace sandboxer {
namespace {

using namespace std::chrono_literals;
using testing::TempDir;
namespace fs = std::filesystem;

const TimePoint k_t0 = *parse_time("2026-12-02T10:00:00Z");

TimePoint at(std::chrono::minutes offset) {
  return k_t0 + offset;
}

// A record created at `start` that goes through `steps` ({minutes after T0, event, state}).
struct Step {
  int minutes;
  EventKind event;
  State to;
};
SandboxRecord made(std::vector<Step> steps, int start = 0) {
  SandboxRecord r;
  r.id = new_sandbox_id();
  r.name = r.id;
  r.driver = "stub";
  r.profile.name = "dev";
  r.owner.user = "alice";
  r.created_at = at(std::chrono::minutes(start));
  r.transition(EventKind::created, State::creating, r.created_at, "t", "create");
  r.transition(EventKind::ready, State::running, r.created_at, "t", "created");
  for (const auto& step : steps) {
    r.transition(step.event, step.to, at(std::chrono::minutes(step.minutes)), "t", "");
  }
  return r;
}

// Created at T0, paused from +1h to +3h, destroyed at +4h (the plan's known intervals).
SandboxRecord paused_two_hours() {
  return made({{60, EventKind::pausing, State::pausing},
               {60, EventKind::paused, State::paused},
               {180, EventKind::resuming, State::resuming},
               {180, EventKind::resumed, State::running},
               {240, EventKind::destroying, State::destroying},
               {240, EventKind::destroyed, State::destroyed}});
}

const UsageWindow k_whole_day{at(-24h), at(24h)};

TEST(Usage, PausedTimeIsPausedAndTheRestRunning) {
  const StateTime time = time_in_window(paused_two_hours(), k_whole_day, at(10h));
  EXPECT_EQ(time.running, 7200s);
  EXPECT_EQ(time.paused, 7200s);
  EXPECT_EQ(time.total(), 14400s);
}

TEST(Usage, PausingAndResumingCountAsRunning) {
  const auto r = made({{60, EventKind::pausing, State::pausing},
                       {70, EventKind::paused, State::paused},
                       {120, EventKind::resuming, State::resuming},
                       {125, EventKind::resumed, State::running},
                       {130, EventKind::destroyed, State::destroyed}});
  const StateTime time = time_in_window(r, k_whole_day, at(10h));
  EXPECT_EQ(time.running, 60min + 10min + 5min + 5min);
  EXPECT_EQ(time.paused, 50min);
}

TEST(Usage, IntervalsAreClippedToTheWindow) {
  const StateTime time = time_in_window(paused_two_hours(), {at(30min), at(210min)}, at(10h));
  EXPECT_EQ(time.running, 30min + 30min);
  EXPECT_EQ(time.paused, 120min);
  const StateTime inside_pause =
      time_in_window(paused_two_hours(), {at(90min), at(100min)}, at(10h));
  EXPECT_EQ(inside_pause.running, 0s);
  EXPECT_EQ(inside_pause.paused, 10min);
  const StateTime after = time_in_window(paused_two_hours(), {at(5h), at(6h)}, at(10h));
  EXPECT_EQ(after.total(), 0s);
}

TEST(Usage, AnOpenIntervalEndsNow) {
  const auto running = made({});
  EXPECT_EQ(time_in_window(running, k_whole_day, at(2h)).running, 2h);
  EXPECT_EQ(time_in_window(running, {at(-1h), at(1h)}, at(2h)).running, 1h)
      << "the window ends first";
  const auto paused = made({{60, EventKind::paused, State::paused}});
  const StateTime time = time_in_window(paused, k_whole_day, at(150min));
  EXPECT_EQ(time.running, 1h);
  EXPECT_EQ(time.paused, 90min);
}

TEST(Usage, ExpiredAndOrphanedCountAsRunningUntilClosed) {
  const auto r = made({{60, EventKind::expired, State::expired},
                       {90, EventKind::orphan_found, State::orphaned},
                       {100, EventKind::destroyed, State::destroyed}});
  EXPECT_EQ(time_in_window(r, k_whole_day, at(10h)).running, 100min);
}

TEST(Usage, CountsEverySandboxThatLivedInTheWindowEvenAnInstant) {
  const auto failed_at_once = made({{0, EventKind::failed, State::failed}});
  const auto before = made({{10, EventKind::destroyed, State::destroyed}});
  UsageTally tally({at(10min), at(1h)}, {}, at(2h));
  tally.add(failed_at_once); // created and failed at T0, before the window
  tally.add(before);         // destroyed exactly when the window starts
  tally.add(made({}, 59));   // created a minute before the window ends
  tally.add(made({{60, EventKind::failed, State::failed}}, 60)); // at the window's end: out
  const UsageReport report = tally.report(std::nullopt);
  EXPECT_EQ(report.total.count, 1u);
  EXPECT_EQ(report.total.time.running, 1min);

  UsageTally instant({at(0min), at(1h)}, {}, at(2h));
  instant.add(failed_at_once);
  EXPECT_EQ(instant.report(std::nullopt).total.count, 1u);
  EXPECT_EQ(instant.report(std::nullopt).total.time.total(), 0s);
}

TEST(Usage, CostIsRunningTimesPerHourPlusPausedTimesPausedPerHourByCurrency) {
  auto a = paused_two_hours(); // 2h running, 2h paused
  a.policy.cost = {{"per_hour", 0.5}, {"paused_per_hour", 0.1}, {"currency", "USD"}};
  auto b =
      made({{60, EventKind::paused, State::paused}, {120, EventKind::destroyed, State::destroyed}});
  b.policy.cost = {{"per_hour", 2.0}, {"currency", "EUR"}};      // paused_per_hour left out: 0
  auto c = made({{60, EventKind::destroyed, State::destroyed}}); // no cost
  auto d = made({{30, EventKind::destroyed, State::destroyed}});
  d.policy.cost = {{"per_hour", 0.5}, {"currency", "USD"}};
  UsageTally tally(k_whole_day, {}, at(10h));
  for (const auto* r : {&a, &b, &c, &d}) {
    tally.add(*r);
  }
  const UsageReport report = tally.report(std::nullopt);
  EXPECT_EQ(report.total.count, 4u);
  EXPECT_EQ(report.total.uncosted, 1u);
  ASSERT_EQ(report.total.cost.size(), 2u);
  EXPECT_DOUBLE_EQ(report.total.cost.at("USD"), 2 * 0.5 + 2 * 0.1 + 0.5 * 0.5);
  EXPECT_DOUBLE_EQ(report.total.cost.at("EUR"), 2.0);
  EXPECT_EQ(report.total.time.running, 2h + 1h + 1h + 30min);
  EXPECT_EQ(report.total.time.paused, 2h + 1h);
  EXPECT_TRUE(report.rows.empty()) << "no --by: the total alone";
}

TEST(Usage, CostOfOnlyTheTimeInTheWindow) {
  auto a = paused_two_hours();
  a.policy.cost = {{"per_hour", 1.0}, {"paused_per_hour", 0.25}, {"currency", "USD"}};
  UsageTally tally({at(90min), at(4h)}, {}, at(10h)); // 1h30 paused, then 1h running
  tally.add(a);
  EXPECT_DOUBLE_EQ(tally.report(std::nullopt).total.cost.at("USD"), 1.0 + 1.5 * 0.25);
}

TEST(Usage, GroupsByLabelWithTheUnlabelledLast) {
  auto infra = paused_two_hours();
  infra.labels["team"] = "infra";
  auto web = made({{60, EventKind::destroyed, State::destroyed}});
  web.labels["team"] = "web";
  auto web2 = made({{30, EventKind::destroyed, State::destroyed}});
  web2.labels["team"] = "web";
  auto none = made({{15, EventKind::destroyed, State::destroyed}});
  UsageTally tally(k_whole_day, UsageBy::parse("label:team"), at(10h));
  for (const auto* r : {&none, &web, &infra, &web2}) {
    tally.add(*r);
  }
  const UsageReport report = tally.report(std::nullopt);
  ASSERT_EQ(report.rows.size(), 3u);
  EXPECT_EQ(report.rows[0].key, "infra");
  EXPECT_EQ(report.rows[0].time.running, 2h);
  EXPECT_EQ(report.rows[0].time.paused, 2h);
  EXPECT_EQ(report.rows[1].key, "web");
  EXPECT_EQ(report.rows[1].count, 2u);
  EXPECT_EQ(report.rows[1].time.running, 90min);
  EXPECT_EQ(report.rows[2].key, std::nullopt);
  EXPECT_EQ(report.rows[2].time.running, 15min);
  EXPECT_EQ(report.total.count, 4u);
  EXPECT_EQ(report.total.time.running, 2h + 90min + 15min);
}

TEST(Usage, GroupsByProfileDriverAndOwner) {
  auto r = made({});
  r.profile.name = "ci";
  r.driver = "docker";
  r.owner.user = "bob";
  EXPECT_EQ(UsageBy::parse("profile").key_of(r), "ci");
  EXPECT_EQ(UsageBy::parse("driver").key_of(r), "docker");
  EXPECT_EQ(UsageBy::parse("owner").key_of(r), "bob");
  EXPECT_EQ(UsageBy::parse("label:team").key_of(r), std::nullopt);
  EXPECT_EQ(UsageBy::parse("label:team").text(), "label:team");
}

TEST(Usage, AnUnknownGroupIsAUsageError) {
  for (const char* bad : {"", "label:", "labels:team", "profiles", "user"}) {
    try {
      UsageBy::parse(bad);
      ADD_FAILURE() << bad << " was taken";
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find("expected profile, driver, owner or label:KEY"),
                std::string::npos)
          << e.what();
    }
  }
  try {
    UsageBy::parse("profiles");
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("did you mean profile?"), std::string::npos) << e.what();
  }
}

TEST(Usage, AWindowStartingBeforeWhatWasPrunedWarns) {
  UsageTally tally({at(0min), at(1h)}, {}, at(2h));
  EXPECT_TRUE(tally.report(at(0min)).warnings.empty()) << "nothing before the window was lost";
  const UsageReport report = tally.report(at(30min));
  ASSERT_EQ(report.warnings.size(), 1u);
  EXPECT_NE(report.warnings[0].find("records closed up to 2026-12-02T10:30:00Z were pruned"),
            std::string::npos)
      << report.warnings[0];
  EXPECT_EQ(report.pruned_before, at(30min));
}

TimePoint day(int n, int hour = 12) {
  return *parse_time("2026-11-01T00:00:00Z") + std::chrono::hours(24 * n + hour);
}

// One record closed on each of days 0..9, one segment a day, and one running since day 0.
struct TenDays {
  TempDir dir;
  Ledger ledger{dir / "state", 1s};
  std::vector<std::string> closed; // by day
  std::string live;
  TenDays() {
    for (int n = 0; n < 10; ++n) {
      auto tx = ledger.begin();
      SandboxRecord r = made({});
      r.created_at = day(n, 10);
      r.history.clear();
      r.transition(EventKind::created, State::creating, day(n, 10), "t", "create");
      r.transition(EventKind::ready, State::running, day(n, 10), "t", "created");
      r.transition(EventKind::destroyed, State::destroyed, day(n, 12), "t", "closed");
      closed.push_back(r.id);
      tx.data().sandboxes.push_back(r);
      if (n == 0) {
        SandboxRecord l = made({});
        l.created_at = day(0, 0);
        l.history.clear();
        l.transition(EventKind::created, State::creating, day(0, 0), "t", "create");
        l.transition(EventKind::ready, State::running, day(0, 0), "t", "created");
        live = l.id;
        tx.data().sandboxes.push_back(l);
      }
      tx.commit();
    }
  }
  std::set<std::string> window_ids(TimePoint from, TimePoint to) const {
    std::set<std::string> ids;
    ledger.store().scan_window(from, to, [&](SandboxRecord& r) {
      EXPECT_FALSE(r.history.empty()) << "whole records";
      ids.insert(r.id);
      return true;
    });
    return ids;
  }
};

TEST(UsageScan, TheLocalStoreVisitsWhatMayHaveLivedInTheWindowOnce) {
  TenDays ledger;
  EXPECT_EQ(ledger.window_ids(day(8, 0), day(10, 0)),
            (std::set<std::string>{ledger.closed[8], ledger.closed[9], ledger.live}));
  EXPECT_EQ(
      ledger.window_ids(day(3, 11), day(5, 11)),
      (std::set<std::string>{ledger.closed[3], ledger.closed[4], ledger.closed[5], ledger.live}));
  EXPECT_EQ(ledger.window_ids(day(-2, 0), day(-1, 0)), std::set<std::string>{})
      << "before anything was created";
}

TEST(UsageScan, TheLocalStoreNeverOpensTheSegmentsOfDaysBeforeTheWindow) {
  TenDays ledger;
  const fs::path journal = ledger.dir / "state" / "journal";
  // Days 0..6 become symbolic links, which the journal refuses to open (even as root): a scan
  // that opened any of them would throw. Day 7, the newest before day 8, is read as a margin.
  for (int segment = 1; segment <= 7; ++segment) {
    const fs::path path = journal / fmt::format("segment-{:06}.jsonl", segment);
    ASSERT_TRUE(fs::exists(path)) << path;
    fs::rename(path, ledger.dir / fmt::format("moved-{}", segment));
    fs::create_symlink(ledger.dir / fmt::format("moved-{}", segment), path);
  }
  EXPECT_EQ(ledger.window_ids(day(8, 0), day(10, 0)),
            (std::set<std::string>{ledger.closed[8], ledger.closed[9], ledger.live}));
  EXPECT_THROW(ledger.window_ids(day(6, 0), day(10, 0)), Error) << "the test bites";

  const UsageReport report =
      usage(ledger.ledger, {day(8, 0), day(10, 0)}, UsageBy::parse("driver"), day(10, 0));
  EXPECT_EQ(report.total.count, 3u);
  // The live one ran the whole 48 hours; each closed one 2 hours.
  EXPECT_EQ(report.total.time.running, 48h + 2h + 2h);
  ASSERT_EQ(report.rows.size(), 1u);
  EXPECT_EQ(report.rows[0].key, "stub");
}

} // namespace
} // namespace sandboxer
