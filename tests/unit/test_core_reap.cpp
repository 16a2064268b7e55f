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

// Idle (docs/pause.md, "Idle"): the judgement comes from the history alone.
SandboxRecord idle_record(Seconds idle, const std::string& on_idle = "") {
  SandboxRecord r;
  r.id = "sbx-bbbbbbbbbbbb";
  r.state = State::running;
  r.created_at = k_noon;
  r.expires_at = k_noon + 24h;
  r.policy.idle = idle;
  r.policy.on_idle = on_idle;
  r.transition(EventKind::created, State::creating, k_noon, "tester", "create");
  r.transition(EventKind::ready, State::running, k_noon + 1min, "tester", "ready");
  return r;
}

TEST(ReapIdle, ActivityIsTheNewestUseInTheHistory) {
  const std::string host = current_owner().host;
  auto r = idle_record(2h);
  auto a = last_activity(r, k_noon + 3h, host);
  EXPECT_EQ(a.what, "start");
  EXPECT_EQ(a.last, k_noon + 1min);
  r.transition(EventKind::exec_started, State::running, k_noon + 10min, "tester", "exec sh");
  r.transition(EventKind::exec_finished, State::running, k_noon + 11min, "tester", "exited 0");
  // A snapshot, an extend or an expiring warning is not use.
  r.transition(EventKind::snapshotted, State::running, k_noon + 20min, "tester", "snap");
  r.transition(EventKind::extended, State::running, k_noon + 21min, "tester", "extend");
  a = last_activity(r, k_noon + 3h, host);
  EXPECT_EQ(a.what, "exec");
  EXPECT_EQ(a.last, k_noon + 11min);
  EXPECT_FALSE(a.busy);
  r.transition(EventKind::files_copied, State::running, k_noon + 30min, "tester", "cp");
  EXPECT_EQ(last_activity(r, k_noon + 3h, host).what, "cp");
  r.transition(EventKind::lease_ended, State::running, k_noon + 31min, "tester", "lease");
  EXPECT_EQ(last_activity(r, k_noon + 3h, host).what, "lease");
  r.transition(EventKind::resumed, State::running, k_noon + 32min, "tester", "resumed");
  EXPECT_EQ(last_activity(r, k_noon + 3h, host).what, "resume");

  // An exec still open by a live sandboxer here (this test binary) keeps it busy; by a pid that
  // is gone, not; by another host's process, for at most a day.
  auto open = r;
  open.transition(EventKind::exec_started, State::running, k_noon + 40min,
                  fmt::format("alice@{} pid {}", host, ::getpid()), "exec sleep");
  EXPECT_TRUE(last_activity(open, k_noon + 3h, host).busy);
  auto dead = r;
  dead.transition(EventKind::ports_forwarded, State::running, k_noon + 40min,
                  fmt::format("alice@{} pid 999999999", host), "forward");
  EXPECT_FALSE(last_activity(dead, k_noon + 3h, host).busy);
  EXPECT_EQ(last_activity(dead, k_noon + 3h, host).what, "forward");
  auto elsewhere = r;
  elsewhere.transition(EventKind::exec_started, State::running, k_noon + 40min,
                       "bob@elsewhere pid 7", "exec make");
  EXPECT_TRUE(last_activity(elsewhere, k_noon + 24h, host).busy);
  EXPECT_FALSE(last_activity(elsewhere, k_noon + 40min + 24h, host).busy);
  // Closed by the same process: not open any more.
  elsewhere.transition(EventKind::exec_finished, State::running, k_noon + 50min,
                       "bob@elsewhere pid 7", "exited 0");
  EXPECT_FALSE(last_activity(elsewhere, k_noon + 51min, host).busy);
}

TEST(ReapIdle, TheReasonNamesTheLastActivity) {
  const std::string host = current_owner().host;
  auto idle_reason = [](const SandboxRecord& record, TimePoint now, Seconds skew,
                        const std::string& this_host) -> std::optional<std::string> {
    auto idle = idle_of(record, now, skew, this_host);
    return idle ? std::optional<std::string>(idle->reason) : std::nullopt;
  };
  auto r = idle_record(2h);
  r.transition(EventKind::exec_finished, State::running, k_noon + 11min, "tester", "exited 0");
  EXPECT_FALSE(idle_reason(r, k_noon + 2h + 11min - 1s, 0s, host));
  EXPECT_FALSE(idle_reason(r, k_noon + 2h + 11min, 30s, host)); // the skew waits too
  EXPECT_EQ(idle_reason(r, k_noon + 2h + 11min, 0s, host).value_or(""),
            "idle since 2026-12-02T12:11:00Z (last exec at 2026-12-02T12:11:00Z); ttl.idle 2h");
  EXPECT_EQ(idle_reason(idle_record(1h), k_noon + 5h, 0s, host).value_or(""),
            "idle since 2026-12-02T12:01:00Z (no activity since it started); ttl.idle 1h");
  auto leased = r;
  leased.lease = sandboxer::Lease{};
  EXPECT_FALSE(idle_reason(leased, k_noon + 5h, 0s, host));
  auto paused = r;
  paused.state = State::paused;
  EXPECT_FALSE(idle_reason(paused, k_noon + 5h, 0s, host));
  auto no_rule = r;
  no_rule.policy.idle.reset();
  EXPECT_FALSE(idle_reason(no_rule, k_noon + 5h, 0s, host));
}

TEST(ReapIdle, TheDecisionFollowsOnIdleAndOnPausedMax) {
  const std::string host = current_owner().host;
  ReapOptions o;
  o.skew = 0s;
  auto destroy = decide(idle_record(1h), k_noon + 2h, o, host);
  ASSERT_TRUE(destroy);
  EXPECT_EQ(destroy->action, "destroy");
  EXPECT_EQ(destroy->ended_by, "idle");
  EXPECT_EQ(destroy->details["idle"]["since"], "2026-12-02T12:01:00Z");
  EXPECT_EQ(destroy->details["idle"]["on_idle"], "destroy");
  EXPECT_EQ(decide(idle_record(1h, "pause"), k_noon + 2h, o, host)->action, "pause");
  auto snap = decide(idle_record(1h, "snapshot"), k_noon + 2h, o, host);
  EXPECT_EQ(snap->action, "snapshot+destroy");
  EXPECT_EQ(snap->snapshot_name, "reap-idle");
  EXPECT_FALSE(decide(idle_record(1h), k_noon + 1h, o, host));

  // Paused past ttl.paused_max: destroyed, or snapshotted first.
  SandboxRecord p = idle_record(1h);
  p.policy.idle.reset();
  p.state = State::paused;
  p.policy.paused_max = 1h;
  p.policy.on_paused_max = "snapshot";
  p.pause = PauseState{};
  p.pause->at = k_noon + 2h;
  p.expires_at = k_noon + 3h;
  EXPECT_FALSE(decide(p, k_noon + 3h - 1s, o, host));
  auto parked = decide(p, k_noon + 3h, o, host);
  ASSERT_TRUE(parked);
  EXPECT_EQ(parked->action, "snapshot+destroy");
  EXPECT_EQ(parked->snapshot_name, "reap-paused-max");
  EXPECT_EQ(parked->reason, "paused since 2026-12-02T14:00:00Z; ttl.paused_max 1h ran out at "
                            "2026-12-02T15:00:00Z");
  EXPECT_EQ(parked->ended_by, "ttl.paused_max 1h ran out");
  // ttl.max came first: that is the TTL's end, not paused_max's, and no snapshot is taken.
  p.expires_at = k_noon + 2h + 30min;
  auto capped = decide(p, k_noon + 3h, o, host);
  EXPECT_EQ(capped->action, "destroy");
  EXPECT_EQ(capped->reason, "ttl expired at 2026-12-02T14:30:00Z while paused");

  // A claimed one whose destroy failed is retried for the reason it was claimed, whatever its
  // deadline.
  auto claimed = idle_record(1h);
  claimed.transition(EventKind::expired, State::expired, k_noon + 2h, "reaper",
                     "idle since 2026-12-02T12:01:00Z (no activity since it started); ttl.idle 1h "
                     "(attempt 2)",
                     {{"attempt", 2}, {"ended_by", "idle"}});
  auto retry = decide(claimed, k_noon + 2h, o, host);
  ASSERT_TRUE(retry);
  EXPECT_EQ(retry->action, "destroy");
  EXPECT_EQ(retry->ended_by, "idle");
  EXPECT_EQ(retry->reason,
            "idle since 2026-12-02T12:01:00Z (no activity since it started); ttl.idle 1h");
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
  // A sandbox of a profile whose ttl mapping is `ttl` (the pause and idle rules).
  std::string create_with(const std::string& ttl, const std::string& stub_section = "{}") {
    testing::write_file(dir / "q.yaml",
                        "driver: stub\nttl: " + ttl + "\nstub: " + stub_section + "\n");
    return engine.create(load_profile(dir / "q.yaml", {}), {}).record.id;
  }
  std::vector<EventKind> kinds(const std::string& id) {
    std::vector<EventKind> out;
    for (const auto& entry : engine.get(id).history) {
      out.push_back(entry.event);
    }
    return out;
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
  EXPECT_NE(item(report, later, "prune")
                ->reason.find("only the destroy, pause and snapshot+destroy items"),
            std::string::npos);
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

TEST_F(Reap, AnIdleSandboxIsPausedDestroyedOrSnapshottedAsItsProfileSays) {
  auto paused = create_with("{ default: 8h, max: 1d, idle: 1h, on_idle: pause }");
  auto destroyed = create_with("{ default: 8h, max: 1d, idle: 1h }");
  auto snapshotted = create_with("{ default: 8h, max: 1d, idle: 1h, on_idle: snapshot }");
  auto used = create_with("{ default: 8h, max: 1d, idle: 1h, on_idle: pause }");
  auto no_rule = create(8h);
  clock.advance(50min);
  edit(used, [&](SandboxRecord& r) {
    r.transition(EventKind::exec_finished, r.state, clock.now(), "tester", "exec true exited 0");
  });
  clock.advance(10min);

  ReapOptions dry = options();
  dry.dry_run = true;
  auto plan = reaper.run(dry);
  ASSERT_EQ(plan.items.size(), 3u);
  EXPECT_EQ(item(plan, paused, "pause")->reason,
            "idle since 2026-12-02T12:00:00Z (no activity since it started); ttl.idle 1h");
  EXPECT_TRUE(item(plan, destroyed, "destroy"));
  EXPECT_TRUE(item(plan, snapshotted, "snapshot+destroy"));
  EXPECT_EQ(engine.get(paused).state, State::running);

  auto report = reaper.run(options());
  EXPECT_EQ(report.paused, 1);
  EXPECT_EQ(report.destroyed, 2);
  EXPECT_EQ(report.snapshotted, 1);
  EXPECT_EQ(report.failures, 0);
  auto p = engine.get(paused);
  EXPECT_EQ(p.state, State::paused);
  ASSERT_TRUE(p.pause);
  EXPECT_EQ(p.pause->cause, "idle");
  const HistoryEntry* pausing = nullptr;
  for (const auto& e : p.history) {
    pausing = e.event == EventKind::pausing ? &e : pausing;
  }
  ASSERT_TRUE(pausing);
  EXPECT_EQ(pausing->actor, "reaper");
  EXPECT_EQ(pausing->details["idle"]["last"], "start");
  auto d = engine.get(destroyed);
  EXPECT_EQ(d.state, State::destroyed);
  EXPECT_EQ(d.history.back().reason, "idle");
  EXPECT_EQ(d.history[d.history.size() - 2].reason,
            "idle since 2026-12-02T12:00:00Z (no activity since it started); ttl.idle 1h");
  EXPECT_EQ(d.history[d.history.size() - 2].details["ended_by"], "idle");
  auto s = engine.get(snapshotted);
  EXPECT_EQ(s.state, State::destroyed);
  ASSERT_EQ(s.snapshots.size(), 1u);
  EXPECT_EQ(s.snapshots[0].name, "reap-idle");
  EXPECT_TRUE(std::filesystem::exists(dir / "state" / "drivers" / "stub" / "snapshots" /
                                      s.snapshots[0].backend_ref));
  EXPECT_EQ(engine.get(used).state, State::running);
  EXPECT_EQ(engine.get(no_rule).state, State::running);

  // The one used 10 minutes in goes an hour after that use; the paused one is not judged again.
  clock.advance(50min);
  auto later = reaper.run(options());
  EXPECT_EQ(later.paused, 1);
  EXPECT_EQ(engine.get(used).state, State::paused);
  EXPECT_EQ(engine.get(paused).history.size(), p.history.size());
}

TEST_F(Reap, PausedMaxSnapshotsFirstResumingForADriverThatCannotSnapshotPaused) {
  const std::string ttl = "{ default: 8h, max: 1d, paused_max: 1h, on_paused_max: snapshot }";
  auto frozen = create_with(ttl, "{ snapshot_paused: false }");
  auto plain = create_with(ttl);
  engine.pause(frozen);
  engine.pause(plain);
  clock.advance(1h);
  auto report = reaper.run(options());
  EXPECT_EQ(report.failures, 0);
  EXPECT_EQ(report.destroyed, 2);
  EXPECT_EQ(report.snapshotted, 2);
  for (const auto& id : {frozen, plain}) {
    auto r = engine.get(id);
    EXPECT_EQ(r.state, State::destroyed);
    ASSERT_EQ(r.snapshots.size(), 1u) << id;
    EXPECT_EQ(r.snapshots[0].name, "reap-paused-max");
    EXPECT_EQ(r.history.back().reason, "ttl.paused_max 1h ran out");
  }
  auto resumed_for_it = kinds(frozen);
  for (EventKind k : {EventKind::snapshot_failed, EventKind::resumed, EventKind::snapshotted}) {
    EXPECT_NE(std::find(resumed_for_it.begin(), resumed_for_it.end(), k), resumed_for_it.end())
        << to_string(k);
  }
  auto as_it_was = kinds(plain);
  EXPECT_EQ(std::find(as_it_was.begin(), as_it_was.end(), EventKind::resumed), as_it_was.end());
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
