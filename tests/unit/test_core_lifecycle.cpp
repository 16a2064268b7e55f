#include <fstream>
#include <gtest/gtest.h>

#include <sandboxer/error.hpp>

#include "core/errors.hpp"
#include "core/events/events.hpp"
#include "core/ledger/chain.hpp"
#include "core/lifecycle/lifecycle.hpp"
#include "support/catalog.hpp"
#include "support/fake_clock.hpp"
#include "support/recording_hook.hpp"
#include "support/temp_dir.hpp"

namespace sandboxer {
namespace {

using namespace std::chrono_literals;

using RecordingHook = testing::RecordingHook;

class CollectingIo : public ExecIo {
public:
  void out(std::string_view bytes) override { stdout_text += bytes; }
  void err(std::string_view bytes) override { stderr_text += bytes; }
  std::string stdout_text, stderr_text;
};

class Lifecycle : public ::testing::Test {
protected:
  Lifecycle()
      : clock(*parse_time("2026-12-02T12:00:00Z")), ledger(dir / "state", Seconds(5)),
        engine(ledger, testing::builtin_catalog(), clock, hook, "tester") {}

  Profile profile(const std::string& stub_section = "{}",
                  const std::string& ttl = "{ default: 30m, max: 2h }") {
    testing::write_file(dir / "p.yaml", "driver: stub\nttl: " + ttl +
                                            "\nlabels: { team: core }\nstub: " + stub_section +
                                            "\n");
    return load_profile(dir / "p.yaml", {});
  }
  std::filesystem::path backend(const std::string& id) {
    return dir / "state" / "drivers" / "stub" / "sandboxes" / id;
  }

  testing::TempDir dir;
  testing::FakeClock clock;
  Ledger ledger;
  RecordingHook hook;
  Engine engine;
};

TEST_F(Lifecycle, CreateRecordsIntentThenOutcome) {
  auto outcome = engine.create(profile(), {});
  const auto& r = outcome.record;
  EXPECT_EQ(r.state, State::running);
  EXPECT_EQ(r.backend_id, r.id);
  EXPECT_EQ(r.name, r.id);
  ASSERT_EQ(r.history.size(), 2u);
  EXPECT_EQ(r.history[0].to, State::creating);
  EXPECT_FALSE(r.history[0].from.has_value());
  EXPECT_EQ(r.history[1].from, State::creating);
  EXPECT_EQ(r.history[1].to, State::running);
  EXPECT_EQ(r.history[1].actor, "tester");
  EXPECT_EQ(r.expires_at, clock.now() + 30min);
  EXPECT_EQ(r.max_expires_at, clock.now() + 2h);
  EXPECT_EQ(r.labels.at("team"), "core");
  EXPECT_GT(r.owner.pid, 0);
  EXPECT_EQ(hook.seen, (std::vector<std::string>{r.id + ":creating", r.id + ":running"}));

  // The ledger holds the same, and the backend carries the ownership labels.
  auto stored = ledger.read();
  ASSERT_EQ(stored.sandboxes.size(), 1u);
  EXPECT_EQ(stored.sandboxes[0].state, State::running);
  auto meta = nlohmann::json::parse(testing::read_file(backend(r.id) / "meta.json"));
  EXPECT_EQ(meta["labels"]["sandboxer.id"], r.id);
  EXPECT_EQ(meta["labels"]["sandboxer.ledger"], stored.ledger_id);
  EXPECT_EQ(meta["labels"]["sandboxer.expires_at"], "2026-12-02T12:30:00Z");
  // The sandbox is told its own id; the ledger keeps only the profile's environment.
  EXPECT_EQ(meta["env"]["SANDBOXER_ID"], r.id);
  EXPECT_FALSE(stored.sandboxes[0].env.contains("SANDBOXER_ID"));
}

TEST_F(Lifecycle, TtlIsCappedAndTheCapReported) {
  auto outcome = engine.create(profile(), {.ttl = 8h});
  EXPECT_EQ(outcome.record.expires_at, clock.now() + 2h);
  ASSERT_EQ(outcome.notices.size(), 1u);
  EXPECT_EQ(outcome.notices[0], "ttl 8h capped to 2h (ttl.max of profile p)");
  const CreationPolicy& policy = outcome.record.policy;
  EXPECT_EQ(policy.ttl, std::chrono::hours(2));
  EXPECT_EQ(policy.ttl_max, std::chrono::hours(2));
  EXPECT_EQ(policy.ttl_requested, std::chrono::hours(8));
  EXPECT_EQ(policy.capped, outcome.notices[0]);
}

TEST_F(Lifecycle, AProfileWithoutTtlStillGetsADeadline) {
  testing::write_file(dir / "q.yaml", "driver: stub\nstub: {}\n");
  auto outcome = engine.create(load_profile(dir / "q.yaml", {}), {});
  EXPECT_EQ(outcome.record.expires_at, clock.now() + 1h);
  EXPECT_FALSE(outcome.record.max_expires_at.has_value());
}

TEST_F(Lifecycle, TtlNoneOnlyWhenTheProfileSaysSo) {
  auto outcome = engine.create(profile("{}", "none"), {});
  EXPECT_FALSE(outcome.record.expires_at.has_value());
  EXPECT_THROW(engine.extend(outcome.record.id, {.by = 1h}), PolicyError);
}

TEST_F(Lifecycle, IdempotencyKeyReturnsTheLiveSandbox) {
  auto first = engine.create(profile(), {.idempotency_key = "job-1"});
  auto second = engine.create(profile(), {.idempotency_key = "job-1"});
  EXPECT_FALSE(first.reused);
  EXPECT_TRUE(second.reused);
  EXPECT_EQ(first.record.id, second.record.id);
  EXPECT_EQ(ledger.read().sandboxes.size(), 1u);
  // Once destroyed, the key makes a new one.
  engine.destroy(first.record.id, "test");
  auto third = engine.create(profile(), {.idempotency_key = "job-1"});
  EXPECT_NE(third.record.id, first.record.id);
}

// The code an engine call fails with (ok when it does not fail).
template <typename F> ExitCode code_of(F&& call) {
  try {
    call();
  } catch (const Error& e) {
    return e.code();
  }
  return ExitCode::ok;
}

TEST_F(Lifecycle, NamesAreUniqueAmongLiveSandboxes) {
  engine.create(profile(), {.name = "web"});
  // A conflict (issue 35), not a bad command line.
  EXPECT_EQ(code_of([&] { engine.create(profile(), {.name = "web"}); }), ExitCode::conflict);
  engine.destroy("web", "test");
  EXPECT_NO_THROW(engine.create(profile(), {.name = "web"}));
}

TEST_F(Lifecycle, ReservedLabelPrefixIsRefused) {
  EXPECT_THROW(engine.create(profile(), {.labels = {{"sandboxer.id", "x"}}}), UsageError);
  EXPECT_TRUE(ledger.read().sandboxes.empty());
}

TEST_F(Lifecycle, FailedCreateIsRecordedWithTheBackendMessage) {
  try {
    engine.create(profile("{ fail: { create: 1 } }"), {});
    FAIL();
  } catch (const DriverError& e) {
    EXPECT_EQ(e.code(), ExitCode::backend);
  }
  EXPECT_TRUE(ledger.read().sandboxes.empty()) << "a failed record is closed history";
  std::vector<SandboxRecord> closed;
  ledger.scan(Records::closed, ReadScope::whole, [&](SandboxRecord& r) {
    closed.push_back(r);
    return true;
  });
  ASSERT_EQ(closed.size(), 1u);
  EXPECT_EQ(closed[0].state, State::failed);
  EXPECT_EQ(closed[0].error, "stub: injected failure of create (call #1)");
  EXPECT_EQ(closed[0].history.back().reason, *closed[0].error);
}

TEST_F(Lifecycle, DestroyCountsAVanishedBackendAsDestroyed) {
  auto id = engine.create(profile(), {}).record.id;
  std::filesystem::remove_all(backend(id));
  EXPECT_EQ(engine.destroy(id, "test").state, State::destroyed);
}

// The record says where a sandbox lives: a ledger read from another state dir (a fleet ledger, an
// imported one) reaches its sandboxes at their recorded root, not at today's.
TEST_F(Lifecycle, ASandboxIsReachedWhereItsRecordSaysItLives) {
  auto id = engine.create(profile(), {}).record.id;
  EXPECT_EQ(engine.get(id).info.value("root", ""), (dir / "state" / "drivers" / "stub").string());
  auto elsewhere = dir / "elsewhere";
  std::filesystem::create_directories(elsewhere / "sandboxes");
  std::filesystem::rename(backend(id), elsewhere / "sandboxes" / id);
  {
    auto tx = ledger.begin();
    tx.data().find(id)->info["root"] = elsewhere.string();
    tx.commit();
  }
  EXPECT_EQ(engine.status(id).state, BackendStatus::State::running);
  EXPECT_EQ(engine.destroy(id, "test").state, State::destroyed);
  EXPECT_FALSE(std::filesystem::exists(elsewhere / "sandboxes" / id));
}

TEST_F(Lifecycle, FailedDestroyGoesBackWithTheError) {
  auto id = engine.create(profile("{ fail: { destroy: always } }"), {}).record.id;
  EXPECT_THROW(engine.destroy(id, "test"), DriverError);
  auto r = engine.get(id);
  EXPECT_EQ(r.state, State::running);
  EXPECT_EQ(r.history.back().from, State::destroying);
  EXPECT_EQ(r.history.back().reason, "destroy failed: stub: injected failure of destroy (call #1)");
  EXPECT_TRUE(std::filesystem::exists(backend(id)));
}

TEST_F(Lifecycle, DestroyUnknownIsNotFound) {
  EXPECT_THROW(engine.destroy("sbx-aaaaaaaaaaaa", "test"), NotFoundError);
}

TEST_F(Lifecycle, ExecRunsInTheSandboxDirectory) {
  auto id = engine.create(profile(), {}).record.id;
  CollectingIo io;
  int status =
      engine.exec(id, {.argv = {"sh", "-c", "echo hi > f; cat f; echo e >&2; exit 4"}}, io);
  EXPECT_EQ(status, 4);
  EXPECT_EQ(io.stdout_text, "hi\n");
  EXPECT_EQ(io.stderr_text, "e\n");
  EXPECT_TRUE(std::filesystem::exists(backend(id) / "fs" / "f"));
}

// Issue 35: exec of a sandbox that is not running is a conflict (10), told from the command's
// own failure; exec -u on a driver without exec_user is refused before anything is recorded.
TEST_F(Lifecycle, ExecNeedsARunningSandboxAndAUserTheDriverHonours) {
  EXPECT_THROW(engine.create(profile("{ fail: { create: 1 } }"), {.name = "f"}), DriverError);
  CollectingIo io;
  EXPECT_EQ(code_of([&] { engine.exec("f", {.argv = {"true"}}, io); }), ExitCode::conflict);
  auto id = engine.create(profile(), {}).record.id;
  const size_t entries = engine.get(id).history.size();
  try {
    engine.exec(id, {.argv = {"id", "-u"}, .user = "65534"}, io);
    ADD_FAILURE() << "exec -u ran on the stub";
  } catch (const DriverError& e) {
    EXPECT_EQ(e.kind(), DriverError::Kind::unsupported);
    EXPECT_STREQ(e.what(), "exec -u 65534 is not supported by driver stub");
  }
  EXPECT_EQ(engine.get(id).history.size(), entries);
}

// Issue 35: --force (no grace) and --forget (close the record whatever the backend says) apart.
TEST_F(Lifecycle, ForceIsNoGraceAndForgetClosesTheRecord) {
  auto id = engine.create(profile("{ fail: { destroy: always } }"), {}).record.id;
  EXPECT_THROW(engine.destroy(id, "test", {.force = true}), DriverError);
  EXPECT_EQ(engine.get(id).state, State::running);
  auto closed = engine.destroy(id, "test", {.forget = true});
  EXPECT_EQ(closed.state, State::destroyed);
  EXPECT_EQ(closed.history.back().details.value("forgotten", false), true);
}

TEST_F(Lifecycle, SnapshotAndRestoreKeepTheFiles) {
  auto id = engine.create(profile(), {.name = "a"}).record.id;
  CollectingIo io;
  engine.exec(id, {.argv = {"sh", "-c", "echo before > f"}}, io);
  auto snapped = engine.snapshot(id, std::string("s1"));
  ASSERT_EQ(snapped.snapshots.size(), 1u);
  EXPECT_EQ(snapped.state, State::running);
  EXPECT_EQ(snapped.snapshots[0].size_bytes, 7u);
  EXPECT_THROW(engine.snapshot(id, std::string("s1")), UsageError);
  engine.exec(id, {.argv = {"sh", "-c", "echo after > f"}}, io);

  auto restored = engine.restore("a:s1", {});
  EXPECT_EQ(restored.record.restored_from, snapped.snapshots[0].id);
  EXPECT_EQ(restored.record.expires_at, clock.now() + 30min);
  CollectingIo read;
  engine.exec(restored.record.id, {.argv = {"cat", "f"}}, read);
  EXPECT_EQ(read.stdout_text, "before\n");
  EXPECT_THROW(engine.restore("a:nope", {}), NotFoundError);

  engine.delete_snapshot(snapped.snapshots[0].id);
  EXPECT_TRUE(engine.get(id).snapshots.empty());
}

TEST_F(Lifecycle, ExtendIsCappedByTheMaximum) {
  auto id = engine.create(profile(), {}).record.id;
  auto extended = engine.extend(id, {.by = 30min});
  EXPECT_EQ(extended.record.expires_at, clock.now() + 1h);
  EXPECT_TRUE(extended.notices.empty());
  auto capped = engine.extend(id, {.by = 5h});
  EXPECT_EQ(capped.record.expires_at, clock.now() + 2h);
  ASSERT_EQ(capped.notices.size(), 1u);
  EXPECT_EQ(capped.record.history.back().details["capped"], capped.notices[0]);
  EXPECT_EQ(capped.record.history.back().details["requested"], "2026-12-02T18:00:00Z");
  EXPECT_THROW(engine.extend(id, {.by = 1min}), PolicyError);
  EXPECT_THROW(engine.extend(id, {.to = clock.now() - 1min}), UsageError);
}

} // namespace
} // namespace sandboxer

namespace sandboxer {
namespace {

using namespace std::chrono_literals;

// `sandboxer run`'s lease (docs/run.md).
class Lease : public ::testing::Test {
protected:
  Lease()
      : clock(*parse_time("2026-12-02T12:00:00Z")), ledger(dir / "state", Seconds(5)),
        engine(ledger, testing::builtin_catalog(), clock, hook, "run tester pid 1"),
        other(ledger, testing::builtin_catalog(), clock, hook, "run retried pid 2") {
    testing::write_file(dir / "p.yaml", "driver: stub\nttl: { default: 30m, max: 2h }\nstub: {}\n");
  }
  std::string leased() {
    return engine.create(load_profile(dir / "p.yaml", {}), {.lease = 2min}).record.id;
  }

  testing::TempDir dir;
  testing::FakeClock clock;
  Ledger ledger;
  testing::RecordingHook hook;
  Engine engine;
  Engine other;
};

TEST_F(Lease, TheDeadlineIsTheLeaseAndTheBackendIsToldTheTtl) {
  const TimePoint start = clock.now();
  auto record = engine.get(leased());
  EXPECT_EQ(record.expires_at, start + 2min);
  ASSERT_TRUE(record.lease);
  EXPECT_EQ(record.lease->holder, "run tester pid 1");
  EXPECT_EQ(record.lease->ttl_expires_at, start + 30min);
  EXPECT_EQ(record.history.front().details["lease"]["duration"], "2m");
  auto meta = nlohmann::json::parse(testing::read_file(dir / "state" / "drivers" / "stub" /
                                                       "sandboxes" / record.id / "meta.json"));
  EXPECT_EQ(meta["labels"]["sandboxer.expires_at"], "2026-12-02T12:30:00Z");
}

TEST_F(Lease, ARenewalMovesTheDeadlineAndWritesNoEntry) {
  auto id = leased();
  const size_t entries = engine.get(id).history.size();
  const size_t events = hook.seen.size();
  clock.advance(40s);
  EXPECT_EQ(engine.renew_lease(id), clock.now() + 2min);
  auto record = engine.get(id);
  EXPECT_EQ(record.expires_at, clock.now() + 2min);
  EXPECT_EQ(record.lease->renewals, 1);
  EXPECT_EQ(record.history.size(), entries);
  EXPECT_EQ(hook.seen.size(), events);
  EXPECT_FALSE(chain::verify(record).has_value());
  // Never past the TTL.
  clock.advance(29min);
  EXPECT_EQ(engine.renew_lease(id), *parse_time("2026-12-02T12:30:00Z"));
}

TEST_F(Lease, ReleasingEndsItInOneEntryAndGivesTheTtlBack) {
  auto id = leased();
  engine.renew_lease(id);
  engine.renew_lease(id);
  auto record = engine.release_lease(id, "released");
  EXPECT_FALSE(record.lease);
  EXPECT_EQ(record.expires_at, *parse_time("2026-12-02T12:30:00Z"));
  const auto& last = record.history.back();
  EXPECT_EQ(last.event, EventKind::lease_ended);
  EXPECT_EQ(last.details["lease"]["renewals"], 2);
  EXPECT_EQ(last.details["lease"]["how"], "released");
  EXPECT_THROW(engine.renew_lease(id), ConflictError);
}

TEST_F(Lease, AnotherProcessTakesItOverAndTheFormerHolderIsTold) {
  auto id = leased();
  EXPECT_THROW(other.renew_lease(id), ConflictError);
  auto taken = other.take_lease(id, 1min);
  EXPECT_EQ(taken.lease->holder, "run retried pid 2");
  EXPECT_EQ(taken.expires_at, clock.now() + 1min);
  EXPECT_EQ(taken.history.back().details["lease"]["how"], "taken over");
  EXPECT_THROW(engine.renew_lease(id), ConflictError);
  EXPECT_NO_THROW(other.renew_lease(id));
}

TEST_F(Lease, ExtendMovesTheCapNotTheLease) {
  auto id = leased();
  auto extended = engine.extend(id, {.by = 30min});
  EXPECT_EQ(extended.record.expires_at, clock.now() + 2min);
  EXPECT_EQ(extended.record.lease->ttl_expires_at, clock.now() + 1h);
  ASSERT_EQ(extended.notices.size(), 1u);
  EXPECT_NE(extended.notices[0].find("held by a 2m lease of run tester pid 1"), std::string::npos);
  EXPECT_EQ(engine.renew_lease(id), clock.now() + 2min);
}

TEST_F(Lease, ALapsedLeaseIsCollectedWithItsStory) {
  auto id = leased();
  engine.renew_lease(id);
  clock.advance(3min);
  auto outcome = other.destroy_expired(
      id,
      [](const SandboxRecord& r) {
        return EndVerdict{std::nullopt, deadline_reason(r), "lease lapsed"};
      },
      {}, "reaper");
  EXPECT_EQ(outcome.outcome, ExpiredDestroy::Outcome::destroyed);
  auto record = engine.get(id);
  EXPECT_EQ(record.state, State::destroyed);
  bool lapsed = false;
  for (const auto& entry : record.history) {
    if (entry.event == EventKind::lease_ended) {
      lapsed = entry.details["lease"]["how"] == "lapsed" && entry.details["lease"]["renewals"] == 1;
      EXPECT_NE(entry.reason.find("lease of run tester pid 1 lapsed at 2026-12-02T12:02:00Z"),
                std::string::npos)
          << entry.reason;
    }
  }
  EXPECT_TRUE(lapsed);
  EXPECT_FALSE(chain::verify(record).has_value());
}

TEST_F(Lease, ALeaseUnderASecondIsRefused) {
  EXPECT_THROW(engine.create(load_profile(dir / "p.yaml", {}), {.lease = 0s}), UsageError);
}

// Pause and resume (docs/pause.md), on the stub: states, entries, events, deadlines.
TEST_F(Lifecycle, PauseAndResumeRecordEachStepAndKeepTheTtlRunningWithoutPausedMax) {
  auto created = engine.create(profile(), {}).record;
  hook.seen.clear();
  clock.advance(10min);
  PauseOutcome paused = engine.pause(created.id);
  EXPECT_FALSE(paused.already);
  EXPECT_EQ(paused.record.state, State::paused);
  ASSERT_TRUE(paused.record.pause.has_value());
  EXPECT_EQ(paused.record.pause->how, "sigstop");
  EXPECT_TRUE(paused.record.pause->memory);
  EXPECT_TRUE(paused.record.pause->id.starts_with("pse-"));
  EXPECT_EQ(paused.record.pause->at, clock.now());
  EXPECT_FALSE(paused.record.pause->ttl_left.has_value());
  EXPECT_EQ(paused.record.expires_at, created.expires_at); // the TTL runs on
  EXPECT_EQ(hook.seen, (std::vector<std::string>{created.id + ":pausing", created.id + ":paused"}));
  EXPECT_TRUE(std::filesystem::exists(backend(created.id) / "paused.json"));
  // Again: nothing written.
  PauseOutcome again = engine.pause(created.id);
  EXPECT_TRUE(again.already);
  EXPECT_EQ(again.record.history.size(), paused.record.history.size());
  // exec refuses with the way out.
  CollectingIo io;
  try {
    engine.exec(created.id, {.argv = {"true"}}, io);
    FAIL() << "exec of a paused sandbox ran";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::conflict);
    EXPECT_NE(std::string(e.what()).find("sandboxer resume " + created.id), std::string::npos);
  }
  clock.advance(5min);
  SandboxRecord resumed = engine.resume(created.id);
  EXPECT_EQ(resumed.state, State::running);
  EXPECT_FALSE(resumed.pause.has_value());
  EXPECT_EQ(resumed.history.back().event, EventKind::resumed);
  EXPECT_EQ(resumed.history.back().details.value("paused_for", ""), "5m");
  EXPECT_FALSE(std::filesystem::exists(backend(created.id) / "paused.json"));
  EXPECT_EQ(engine.resume(created.id).history.size(), resumed.history.size());
}

TEST_F(Lifecycle, PausedMaxFreezesTheRunningTtlAndResumeGivesItBack) {
  testing::write_file(dir / "p.yaml", "driver: stub\nttl: { default: 1h, max: 3h, paused_max: 2h "
                                      "}\npause: { memory: false }\nstub: {}\n");
  auto created = engine.create(load_profile(dir / "p.yaml", {}), {}).record;
  EXPECT_EQ(created.policy.paused_max, std::chrono::hours(2));
  clock.advance(20min);
  auto paused = engine.pause(created.id).record;
  EXPECT_EQ(paused.pause->ttl_left, std::chrono::minutes(40));
  EXPECT_FALSE(paused.pause->memory); // pause: {memory: false}
  EXPECT_EQ(paused.expires_at, clock.now() + 2h);
  clock.advance(2h);
  // Never past ttl.max: 3h after the create.
  auto again = engine.resume(created.id);
  EXPECT_EQ(again.expires_at, created.max_expires_at);
}

TEST_F(Lifecycle, PauseIsRefusedWhenNotRunningOrLeasedAndResumeWhenNotPaused) {
  auto created = engine.create(profile(), {.lease = Seconds(60)}).record;
  EXPECT_THROW(engine.pause(created.id), ConflictError);
  engine.release_lease(created.id, "released");
  EXPECT_THROW(engine.resume("nosuch"), NotFoundError);
  engine.destroy(created.id, "test");
  EXPECT_THROW(engine.pause(created.id), ConflictError);
}

TEST_F(Lifecycle, AResumeOfAVanishedBackendIsNotFoundAndTheRecordStaysPaused) {
  auto created = engine.create(profile(), {}).record;
  engine.pause(created.id);
  std::filesystem::remove_all(backend(created.id));
  try {
    engine.resume(created.id);
    FAIL() << "resumed a sandbox whose backend is gone";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::not_found);
    EXPECT_NE(std::string(e.what()).find("vanished while it was paused"), std::string::npos);
  }
  auto record = engine.get(created.id);
  EXPECT_EQ(record.state, State::paused);
  EXPECT_EQ(record.history.back().event, EventKind::resume_failed);
}

TEST_F(Lifecycle, AFailedPauseLeavesItRunning) {
  auto created = engine.create(profile("{fail: {pause: always}}"), {}).record;
  EXPECT_THROW(engine.pause(created.id), DriverError);
  auto record = engine.get(created.id);
  EXPECT_EQ(record.state, State::running);
  EXPECT_FALSE(record.pause.has_value());
  EXPECT_EQ(record.history.back().event, EventKind::pause_failed);
}

} // namespace
} // namespace sandboxer
