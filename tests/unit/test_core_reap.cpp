// reap, with an injected clock: the rules alone, then whole runs against the stub driver.
#include <fmt/format.h>
#include <fstream>
#include <gtest/gtest.h>
#include <unistd.h>

#include <sandboxer/error.hpp>

#include "core/errors.hpp"
#include "core/events/events.hpp"
#include "core/owner.hpp"
#include "core/reap/reap.hpp"
#include "support/catalog.hpp"
#include "support/fake_clock.hpp"
#include "support/recording_hook.hpp"
#include "support/temp_dir.hpp"

namespace sandboxer {
namespace {

using namespace std::chrono_literals;

using NullHook = testing::RecordingHook;

const TimePoint k_noon = *parse_time("2026-12-02T12:00:00Z");

SandboxRecord record_in(State state, std::optional<TimePoint> expires_at, TimePoint last,
                        std::string actor = "tester") {
  SandboxRecord r;
  r.id = "sbx-aaaaaaaaaaaa";
  r.state = state;
  r.expires_at = expires_at;
  r.history.push_back({last, std::nullopt, state, std::move(actor), "test", {}});
  return r;
}

TEST(ReapRules, DueOnlyAfterDeadlinePlusGracePlusSkew) {
  auto r = record_in(State::running, k_noon, k_noon);
  EXPECT_FALSE(is_due(r, k_noon - 1s, 0s, 0s));
  EXPECT_TRUE(is_due(r, k_noon, 0s, 0s));
  // The skew protects the user: a reaper whose clock is 29s fast does not reap early.
  EXPECT_FALSE(is_due(r, k_noon + 29s, 0s, 30s));
  EXPECT_TRUE(is_due(r, k_noon + 30s, 0s, 30s));
  EXPECT_FALSE(is_due(r, k_noon + 5min, 5min, 1s));
  EXPECT_TRUE(is_due(r, k_noon + 5min + 1s, 5min, 1s));
  r.state = State::expired;
  EXPECT_TRUE(is_due(r, k_noon, 0s, 0s));
  for (State s : {State::creating, State::destroying, State::snapshotting, State::destroyed,
                  State::failed, State::orphaned}) {
    r.state = s;
    EXPECT_FALSE(is_due(r, k_noon + 1h, 0s, 0s)) << to_string(s);
  }
  auto none = record_in(State::running, std::nullopt, k_noon);
  EXPECT_FALSE(is_due(none, k_noon + 1000h, 0s, 0s));
}

TEST(ReapRules, BackoffDoublesUpToTheCap) {
  EXPECT_EQ(backoff_after(1, 60s, 1h), 60s);
  EXPECT_EQ(backoff_after(2, 60s, 1h), 120s);
  EXPECT_EQ(backoff_after(3, 60s, 1h), 240s);
  EXPECT_EQ(backoff_after(6, 60s, 1h), 1920s);
  EXPECT_EQ(backoff_after(7, 60s, 1h), 1h);
  EXPECT_EQ(backoff_after(100, 60s, 1h), 1h);
}

TEST(ReapRules, AttemptsCountTheTrailingFailures) {
  auto r = record_in(State::running, k_noon, k_noon);
  EXPECT_EQ(failed_attempts(r), 0);
  EXPECT_FALSE(next_attempt_at(r));
  r.transition(EventKind::updated, State::expired, k_noon, "reaper", "ttl expired",
               {{"attempt", 1}});
  r.transition(EventKind::updated, State::expired, k_noon, "reaper", "destroy failed: x",
               {{"attempt", 1}, {"next_attempt_at", "2026-12-02T12:01:00Z"}});
  EXPECT_EQ(failed_attempts(r), 1);
  EXPECT_EQ(next_attempt_at(r), k_noon + 1min);
  r.transition(EventKind::updated, State::expired, k_noon, "reaper", "ttl expired",
               {{"attempt", 2}});
  r.transition(EventKind::updated, State::expired, k_noon, "reaper", "destroy failed: x",
               {{"attempt", 2}, {"next_attempt_at", "2026-12-02T12:03:00Z"}});
  EXPECT_EQ(failed_attempts(r), 2);
  // An extend makes it live again and starts the count over.
  r.transition(EventKind::updated, State::running, k_noon, "alice", "extended");
  EXPECT_EQ(failed_attempts(r), 0);
  EXPECT_FALSE(next_attempt_at(r));
}

TEST(ReapRules, StuckNeedsAgeAndAGoneProcess) {
  std::string host = current_owner().host;
  auto old = k_noon - 11min;
  EXPECT_TRUE(is_stuck(record_in(State::creating, k_noon, old), k_noon, 10min, host));
  EXPECT_FALSE(is_stuck(record_in(State::creating, k_noon, k_noon - 9min), k_noon, 10min, host));
  EXPECT_TRUE(is_stuck(record_in(State::destroying, k_noon, old), k_noon, 10min, host));
  EXPECT_TRUE(is_stuck(record_in(State::snapshotting, k_noon, old), k_noon, 10min, host));
  EXPECT_FALSE(is_stuck(record_in(State::running, k_noon, old), k_noon, 10min, host));
  EXPECT_FALSE(is_stuck(record_in(State::expired, k_noon, old), k_noon, 10min, host));

  // A live sandboxer process on this host (this test binary, sandboxer_unit) is still working
  // on it, however old the record...
  std::string me = fmt::format("alice@{} pid {}", host, ::getpid());
  EXPECT_FALSE(is_stuck(record_in(State::creating, k_noon, old, me), k_noon, 10min, host));
  // ...and a pid that no longer exists is gone; on another host only the age tells.
  std::string dead = fmt::format("reaper (alice@{} pid 999999999)", host);
  EXPECT_TRUE(is_stuck(record_in(State::destroying, k_noon, old, dead), k_noon, 10min, host));
  EXPECT_TRUE(is_stuck(record_in(State::creating, k_noon, old, "bob@elsewhere pid 1"), k_noon,
                       10min, host));
  // pid 1 on this host is alive (and not sandboxer): reused, so stuck.
  EXPECT_FALSE(owner_may_be_alive(
      record_in(State::creating, k_noon, old, fmt::format("x@{} pid 1", host)), host));
}

TEST(ReapMetrics, StatesAndTotalsCarriedOver) {
  ReapReport report;
  report.now = k_noon;
  report.destroyed = 3;
  report.failures = 1;
  report.states = {{"running", 2}, {"destroyed", 3}};
  std::string first = format_metrics(report, "");
  EXPECT_NE(first.find("sandboxer_sandboxes{state=\"running\"} 2\n"), std::string::npos);
  EXPECT_NE(first.find("sandboxer_sandboxes{state=\"creating\"} 0\n"), std::string::npos);
  EXPECT_NE(first.find("# TYPE sandboxer_reap_destroyed_total counter\n"), std::string::npos);
  EXPECT_NE(first.find("sandboxer_reap_destroyed_total 3\n"), std::string::npos);
  EXPECT_NE(first.find("sandboxer_reap_last_run_timestamp_seconds 1796212800\n"),
            std::string::npos);
  std::string second = format_metrics(report, first);
  EXPECT_NE(second.find("sandboxer_reap_destroyed_total 6\n"), std::string::npos);
  EXPECT_NE(second.find("sandboxer_reap_failures_total 2\n"), std::string::npos);
}

class Reap : public ::testing::Test {
protected:
  Reap()
      : clock(k_noon), ledger(dir / "state", Seconds(5)),
        engine(ledger, testing::builtin_catalog(), clock, hook, "tester"),
        reaper(engine, ledger, clock, "reaper") {}

  Profile profile(const std::string& stub_section = "{}") {
    testing::write_file(dir / "p.yaml", "driver: stub\nttl: { default: 30m, max: 2h }\nstub: " +
                                            stub_section + "\n");
    return load_profile(dir / "p.yaml", {});
  }
  std::string create(std::chrono::seconds ttl, const std::string& stub_section = "{}") {
    return engine.create(profile(stub_section), {.ttl = ttl}).record.id;
  }
  std::filesystem::path backend(const std::string& id) {
    return dir / "state" / "drivers" / "stub" / "sandboxes" / id;
  }
  ReapOptions options() {
    ReapOptions o;
    o.skew = 0s;
    o.expiring_window = 0s; // these tests count destroys; the warning has its own test
    return o;
  }
  const ReapItem* item(const ReapReport& report, const std::string& id, const std::string& action) {
    for (const auto& i : report.items) {
      if (i.id == id && i.action == action) {
        return &i;
      }
    }
    return nullptr;
  }
  // Edits a record in place, as a process killed mid-operation would have left it.
  void edit(const std::string& id, const std::function<void(SandboxRecord&)>& change) {
    auto tx = ledger.begin();
    change(*tx.data().find(id));
    tx.commit();
  }

  testing::TempDir dir;
  testing::FakeClock clock;
  Ledger ledger;
  NullHook hook;
  Engine engine;
  Reaper reaper;
};

TEST_F(Reap, DestroysOnlyTheExpiredAndRespectsTheSkew) {
  auto short_lived = create(10min);
  auto long_lived = create(1h);
  clock.advance(10min + 29s);
  ReapOptions o = options();
  o.skew = 30s;
  EXPECT_TRUE(reaper.run(o).items.empty());
  clock.advance(1s);
  auto report = reaper.run(o);
  ASSERT_EQ(report.items.size(), 1u);
  EXPECT_EQ(report.items[0].id, short_lived);
  EXPECT_EQ(report.items[0].outcome, "destroyed");
  EXPECT_EQ(report.destroyed, 1);
  auto r = engine.get(short_lived);
  EXPECT_EQ(r.state, State::destroyed);
  EXPECT_EQ(r.history[r.history.size() - 2].to, State::expired);
  EXPECT_EQ(r.history[r.history.size() - 2].reason, "ttl expired at 2026-12-02T12:10:00Z");
  EXPECT_FALSE(std::filesystem::exists(backend(short_lived)));
  EXPECT_EQ(engine.get(long_lived).state, State::running);
  EXPECT_EQ(report.states["running"], 1);
  EXPECT_EQ(report.states["destroyed"], 1);
  // The event hook saw the claim and the outcome.
  EXPECT_EQ(hook.seen.back(), short_lived + ":destroyed");
}

TEST_F(Reap, DryRunAndMaxDestroyChangeNothing) {
  auto a = create(1min), b = create(1min);
  clock.advance(2min);
  auto before = testing::read_file((ledger.state_dir() / "ledger.json"));
  ReapOptions dry = options();
  dry.dry_run = true;
  auto plan = reaper.run(dry);
  EXPECT_EQ(plan.items.size(), 2u);
  EXPECT_EQ(plan.items[0].outcome, "planned");
  EXPECT_EQ(testing::read_file((ledger.state_dir() / "ledger.json")), before);
  EXPECT_TRUE(std::filesystem::exists(backend(a)));

  ReapOptions capped = options();
  capped.max_destroy = 1;
  auto refused = reaper.run(capped);
  ASSERT_TRUE(refused.refused);
  EXPECT_NE(refused.refused->find("2 sandboxes would be destroyed, more than --max-destroy 1"),
            std::string::npos);
  EXPECT_EQ(refused.destroyed, 0);
  EXPECT_EQ(testing::read_file((ledger.state_dir() / "ledger.json")), before);
  capped.max_destroy = 2;
  EXPECT_EQ(reaper.run(capped).destroyed, 2);
  EXPECT_EQ(engine.get(b).state, State::destroyed);
}

TEST_F(Reap, AFailedDestroyStaysExpiredAndIsRetriedWithBackoff) {
  auto id = create(1min, "{ fail: { destroy: always } }");
  clock.advance(2min);
  auto first = reaper.run(options());
  EXPECT_EQ(first.failures, 1);
  auto r = engine.get(id);
  EXPECT_EQ(r.state, State::expired);
  EXPECT_EQ(r.error, "stub: injected failure of destroy (call #1)");
  EXPECT_EQ(r.history.back().details["attempt"], 1);
  EXPECT_EQ(r.history.back().details["next_attempt_at"], "2026-12-02T12:03:00Z");
  EXPECT_TRUE(std::filesystem::exists(backend(id)));

  // Before the backoff has passed, the next run waits and does not call the backend.
  clock.advance(30s);
  auto waiting = reaper.run(options());
  ASSERT_EQ(waiting.items.size(), 1u);
  EXPECT_EQ(waiting.items[0].action, "wait");
  EXPECT_EQ(waiting.failures, 0);
  EXPECT_EQ(engine.get(id).history.size(), r.history.size());

  clock.advance(30s);
  auto second = reaper.run(options());
  EXPECT_EQ(second.failures, 1);
  r = engine.get(id);
  EXPECT_EQ(r.history.back().details["attempt"], 2);
  EXPECT_EQ(r.error, "stub: injected failure of destroy (call #2)");
  // The second failure waits twice as long.
  EXPECT_EQ(r.history.back().details["next_attempt_at"], "2026-12-02T12:05:00Z");
  EXPECT_EQ(next_attempt_at(r), clock.now() + 2min);
}

TEST_F(Reap, RetrySucceedsOnTheNextRun) {
  auto id = create(1min, "{ fail: { destroy: 1 } }");
  clock.advance(2min);
  EXPECT_EQ(reaper.run(options()).failures, 1);
  clock.advance(1min);
  auto second = reaper.run(options());
  EXPECT_EQ(second.failures, 0);
  EXPECT_EQ(second.destroyed, 1);
  auto r = engine.get(id);
  EXPECT_EQ(r.state, State::destroyed);
  EXPECT_FALSE(r.error);
  EXPECT_EQ(r.history[r.history.size() - 2].details["attempt"], 2);
}

TEST_F(Reap, ExpiringIsRecordedOncePerDeadline) {
  auto soon = create(5min), later = create(1h);
  ReapOptions o = options();
  o.expiring_window = 10min;
  EXPECT_EQ(reaper.run(o).expiring, 1);
  EXPECT_EQ(reaper.run(o).expiring, 0);
  auto r = engine.get(soon);
  EXPECT_EQ(r.history.back().event, EventKind::expiring);
  EXPECT_EQ(r.history.back().details["expiring"]["window"], "10m");
  EXPECT_EQ(engine.get(later).history.back().event, EventKind::ready);
  EXPECT_EQ(r.state, State::running);
}

TEST_F(Reap, APlanRunsExactlyWhatItListed) {
  auto planned = create(1min), extended = create(1min), gone = create(1min);
  auto later = create(5min);
  clock.advance(2min);
  ReapOptions dry = options();
  dry.dry_run = true;
  nlohmann::json plan = to_json(reaper.run(dry));
  ASSERT_EQ(plan["items"].size(), 3u);
  // An item that is not a destroy is skipped with a reason.
  plan["items"].push_back({{"id", later}, {"action", "prune"}, {"history_size", 2}});

  engine.extend(extended, {.by = 1h});
  engine.destroy(gone, "by hand");
  clock.advance(10min); // `later` is now expired too, but not in the plan

  ReapOptions o = options();
  o.plan = plan;
  auto report = reaper.run(o);
  EXPECT_EQ(report.destroyed, 1);
  EXPECT_EQ(item(report, planned, "destroy")->outcome, "destroyed");
  EXPECT_EQ(item(report, extended, "destroy")->outcome, "skipped");
  EXPECT_NE(item(report, extended, "destroy")->reason.find("changed since the plan"),
            std::string::npos);
  EXPECT_EQ(item(report, gone, "destroy")->outcome, "skipped");
  EXPECT_EQ(item(report, later, "prune")->outcome, "skipped");
  EXPECT_NE(item(report, later, "prune")->reason.find("only the destroy items"), std::string::npos);
  EXPECT_EQ(engine.get(later).state, State::running);
  EXPECT_EQ(engine.get(extended).state, State::running);

  // A plan of another ledger, or a real run's report, is refused.
  plan["ledger_id"] = "ldg-aaaaaaaaaaaa";
  o.plan = plan;
  EXPECT_THROW(reaper.run(o), UsageError);
  plan["dry_run"] = false;
  EXPECT_THROW(plan_from_json(plan), UsageError);
}

TEST_F(Reap, StuckRecordsAreSettledFromTheBackend) {
  auto lost_create = create(1h);
  auto found_create = create(1h);
  auto half_destroyed = create(1h);
  auto gone_snapshot = create(1h);
  auto young = create(1h);
  auto set_stuck = [&](const std::string& id, State state, bool clear_backend) {
    edit(id, [&](SandboxRecord& r) {
      if (clear_backend) {
        r.backend_id.clear();
      }
      r.transition(EventKind::updated, state, clock.now(), "alice@elsewhere pid 42", "killed");
    });
  };
  set_stuck(lost_create, State::creating, true);
  std::filesystem::remove_all(backend(lost_create));
  set_stuck(found_create, State::creating, true);
  set_stuck(half_destroyed, State::destroying, false);
  set_stuck(gone_snapshot, State::snapshotting, false);
  std::filesystem::remove_all(backend(gone_snapshot));
  clock.advance(11min);
  set_stuck(young, State::destroying, false);

  auto report = reaper.run(options());
  EXPECT_EQ(report.repaired, 4);
  auto r = engine.get(lost_create);
  EXPECT_EQ(r.state, State::failed);
  EXPECT_EQ(r.history.back().reason,
            "interrupted create: the backend has no resource with its label");
  // Found but never confirmed ready: recorded with its backend id, then destroyed.
  r = engine.get(found_create);
  EXPECT_EQ(r.state, State::destroyed);
  EXPECT_EQ(r.backend_id, found_create);
  EXPECT_FALSE(std::filesystem::exists(backend(found_create)));
  EXPECT_TRUE(std::any_of(r.history.begin(), r.history.end(), [](const HistoryEntry& entry) {
    return entry.reason.find("interrupted create: the backend has") != std::string::npos &&
           entry.to == State::failed;
  }));
  r = engine.get(half_destroyed);
  EXPECT_EQ(r.state, State::running);
  EXPECT_NE(r.history.back().reason.find("destroy it again"), std::string::npos);
  r = engine.get(gone_snapshot);
  EXPECT_EQ(r.state, State::destroyed);
  EXPECT_EQ(r.history.back().actor, "reaper");
  EXPECT_EQ(engine.get(young).state, State::destroying);
}

// The run plans from the ledger it read once at its start: what repair settled must be part of
// that plan, not a stale copy of the record from before the repair.
TEST_F(Reap, ARepairedExpiredSandboxIsDestroyedInTheSameRun) {
  auto id = create(10min);
  clock.advance(11min);
  edit(id, [&](SandboxRecord& r) {
    r.transition(EventKind::updated, State::destroying, clock.now(), "alice@elsewhere pid 42",
                 "killed");
  });
  clock.advance(11min);
  auto report = reaper.run(options());
  EXPECT_EQ(report.repaired, 1);
  ASSERT_NE(item(report, id, "repair"), nullptr);
  ASSERT_NE(item(report, id, "destroy"), nullptr);
  EXPECT_EQ(item(report, id, "destroy")->outcome, "destroyed");
  EXPECT_EQ(engine.get(id).state, State::destroyed);
  EXPECT_FALSE(std::filesystem::exists(backend(id)));
  EXPECT_EQ(report.states["destroyed"], 1);
}

TEST_F(Reap, OrphansAreReportedThenDestroyedAndVanishedRecordsClosed) {
  auto orphan = create(1h);
  auto vanished = create(1h);
  auto kept = create(1h);
  auto ledger_id = ledger.read().ledger_id;
  {
    auto tx = ledger.begin();
    std::erase_if(tx.data().sandboxes, [&](const auto& r) { return r.id == orphan; });
    tx.commit();
  }
  std::filesystem::remove_all(backend(vanished));
  // A resource of another ledger and one without labels look alike to the backend, never to us.
  for (auto [name, labels] :
       {std::pair<std::string, std::string>{
            "sbx-other0000000",
            R"({"sandboxer.id": "sbx-other0000000", "sandboxer.ledger": "ldg-someoneelse"})"},
        {"plain", "{}"}}) {
    std::filesystem::create_directories(backend(name) / "fs");
    std::ofstream(backend(name) / "meta.json") << R"({"labels": )" << labels << "}";
  }

  ReapOptions o = options();
  o.orphans = OrphanMode::report;
  auto report = reaper.run(o);
  EXPECT_EQ(report.orphans, 1);
  ASSERT_TRUE(item(report, orphan, "orphan"));
  EXPECT_EQ(item(report, orphan, "orphan")->outcome, "reported");
  EXPECT_TRUE(std::filesystem::exists(backend(orphan)));
  EXPECT_EQ(report.vanished, 1);
  auto v = engine.get(vanished);
  EXPECT_EQ(v.state, State::destroyed);
  EXPECT_EQ(v.history.back().reason, "vanished");
  EXPECT_EQ(engine.get(kept).state, State::running);

  o.orphans = OrphanMode::destroy;
  report = reaper.run(o);
  EXPECT_EQ(report.orphans, 1);
  EXPECT_EQ(report.destroyed, 1);
  EXPECT_FALSE(std::filesystem::exists(backend(orphan)));
  auto o_record = engine.get(orphan);
  EXPECT_EQ(o_record.state, State::destroyed);
  EXPECT_EQ(o_record.history.front().to, State::orphaned);
  EXPECT_TRUE(std::filesystem::exists(backend("sbx-other0000000")));
  EXPECT_TRUE(std::filesystem::exists(backend("plain")));
  EXPECT_TRUE(std::filesystem::exists(backend(kept)));
  EXPECT_EQ(ledger.read().ledger_id, ledger_id);

  // Nothing left to reconcile.
  report = reaper.run(o);
  EXPECT_EQ(report.orphans, 0);
  EXPECT_EQ(report.vanished, 0);
}

// A labelled resource of this ledger in the stub root `root`, as a lost record would leave it.
void plant(const std::filesystem::path& root, const std::string& id, const std::string& ledger_id) {
  std::filesystem::create_directories(root / "sandboxes" / id / "fs");
  std::ofstream(root / "sandboxes" / id / "meta.json")
      << R"({"labels": {"sandboxer.id": ")" << id << R"(", "sandboxer.ledger": ")" << ledger_id
      << R"("}})";
}

TEST_F(Reap, OnlyBackendsTheLedgerUsedOrNamedAreAsked) {
  create(1h);
  auto ledger_id = ledger.read().ledger_id;
  auto unused = dir / "unused-root";
  plant(unused, "sbx-lost00000000", ledger_id);

  ReapOptions o = options();
  o.orphans = OrphanMode::report;
  auto report = reaper.run(o);
  EXPECT_EQ(report.orphans, 0) << "a backend no record uses was asked";

  o.profiles.push_back(profile("{root: " + unused.string() + "}"));
  report = reaper.run(o);
  EXPECT_EQ(report.orphans, 1);
  EXPECT_TRUE(item(report, "sbx-lost00000000", "orphan"));
}

TEST_F(Reap, AClosedRecordsBackendIsStillAsked) {
  auto other = dir / "other-root";
  auto id = create(1h, "{root: " + other.string() + "}");
  engine.destroy(id, "done");
  create(1h); // a live record in the default root: the other root is used by the closed one only
  auto ledger_id = ledger.read().ledger_id;
  plant(other, "sbx-left00000000", ledger_id);

  ReapOptions o = options();
  o.orphans = OrphanMode::report;
  auto report = reaper.run(o);
  EXPECT_EQ(report.orphans, 1);
  EXPECT_TRUE(item(report, "sbx-left00000000", "orphan"));
  EXPECT_EQ(report.failures, 0);
}

TEST_F(Reap, DestroyedRecordsArePrunedAfterKeepHistory) {
  auto old_one = create(1h), recent = create(1h);
  engine.destroy(old_one, "test");
  clock.advance(6 * 24h);
  engine.destroy(recent, "test");
  clock.advance(1 * 24h + 1s);
  auto live = create(1h);
  auto report = reaper.run(options());
  EXPECT_EQ(report.pruned, 1);
  EXPECT_EQ(item(report, old_one, "prune")->outcome, "pruned");
  EXPECT_EQ(ledger.find(old_one), std::nullopt);
  EXPECT_NE(ledger.find(recent), std::nullopt);
  EXPECT_NE(ledger.find(live), std::nullopt);
  EXPECT_EQ(ledger.read().closed_counts["destroyed"], 1u);
}

TEST_F(Reap, InParallelEachIsDestroyedOnce) {
  std::vector<std::string> ids;
  for (int i = 0; i < 12; ++i) {
    ids.push_back(create(1min, "{ latency: { destroy: 20ms } }"));
  }
  clock.advance(5min);
  ReapOptions o = options();
  o.parallel = 4;
  auto report = reaper.run(o);
  EXPECT_EQ(report.destroyed, 12);
  EXPECT_EQ(report.failures, 0);
  for (const auto& id : ids) {
    auto r = engine.get(id);
    EXPECT_EQ(r.state, State::destroyed);
    EXPECT_EQ(std::count_if(r.history.begin(), r.history.end(),
                            [](const auto& e) { return e.to == State::destroyed; }),
              1);
  }
}

} // namespace
} // namespace sandboxer

namespace sandboxer {
namespace {

TEST(ReapRules, ExpiringWarnsOncePerDeadlineInsideTheWindow) {
  SandboxRecord r = record_in(State::running, k_noon + std::chrono::minutes(8), k_noon);
  EXPECT_TRUE(needs_expiring_warning(r, k_noon, Seconds(600)));
  EXPECT_FALSE(needs_expiring_warning(r, k_noon, Seconds(300))); // not yet in the window
  EXPECT_FALSE(needs_expiring_warning(r, k_noon, Seconds(0)));   // turned off
  EXPECT_FALSE(needs_expiring_warning(r, k_noon + std::chrono::minutes(9), Seconds(600))); // past
  r.transition(EventKind::updated, State::running, k_noon, "reaper", "expires in 8m",
               {{"expiring", {{"expires_at", format_time(*r.expires_at)}, {"window", "10m"}}}});
  EXPECT_FALSE(needs_expiring_warning(r, k_noon + std::chrono::minutes(1), Seconds(600)));
  // Extended: the new deadline is warned about in its turn.
  r.expires_at = *r.expires_at + std::chrono::minutes(5);
  EXPECT_TRUE(needs_expiring_warning(r, k_noon + std::chrono::minutes(4), Seconds(600)));
  r.state = State::expired;
  EXPECT_FALSE(needs_expiring_warning(r, k_noon + std::chrono::minutes(4), Seconds(600)));
}

} // namespace
} // namespace sandboxer
