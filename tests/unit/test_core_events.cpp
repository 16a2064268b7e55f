#include <gtest/gtest.h>

#include <sandboxer/error.hpp>

#include "core/events/events.hpp"
#include "core/ledger/document.hpp"
#include "core/lifecycle/lifecycle.hpp"
#include "core/profile/profile.hpp"
#include "sdk/files.hpp"
#include "support/catalog.hpp"
#include "support/fake_clock.hpp"
#include "support/temp_dir.hpp"

namespace sandboxer {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

// The real Publisher with one jsonl sink, against the stub driver.
class Events : public ::testing::Test {
protected:
  Events()
      : clock(*parse_time("2026-12-02T12:00:00Z")), ledger(dir / "state", Seconds(5)),
        publisher(ledger, {{{"type", "jsonl"}, {"path", (dir / "events.jsonl").string()}}}, {}),
        engine(ledger, testing::builtin_catalog(), clock, publisher, "tester") {
    testing::write_file(dir / "p.yaml", "driver: stub\nttl: { default: 30m, max: 2h }\nstub: {}\n");
  }
  Profile profile() { return load_profile(dir / "p.yaml", {}); }
  std::vector<nlohmann::json> delivered() {
    std::vector<nlohmann::json> events;
    std::string text = read_file_if_exists(dir / "events.jsonl").value_or("");
    for (size_t start = 0, end; (end = text.find('\n', start)) != std::string::npos;
         start = end + 1) {
      events.push_back(nlohmann::json::parse(text.substr(start, end - start)));
    }
    return events;
  }
  std::vector<std::string> outbox_files() {
    std::vector<std::string> names;
    for (const auto& entry : fs::directory_iterator(dir / "state" / "outbox")) {
      if (entry.is_regular_file()) {
        names.push_back(entry.path().extension().string());
      }
    }
    return names;
  }

  testing::TempDir dir;
  testing::FakeClock clock;
  Ledger ledger;
  events::Publisher publisher;
  Engine engine;
};

TEST_F(Events, EachTransitionIsOneEventWithTheLedgersId) {
  auto r = engine.create(profile(), {}).record;
  engine.snapshot(r.id, "base");
  engine.extend(r.id, {.by = 10min});
  engine.destroy(r.id, "done");
  auto stored = engine.get(r.id);
  auto events = delivered();
  ASSERT_EQ(events.size(), stored.history.size());
  std::vector<std::string> types;
  for (size_t i = 0; i < events.size(); ++i) {
    EXPECT_EQ(events[i]["id"], stored.history[i].event_id);
    EXPECT_EQ(events[i]["subject"], r.id);
    EXPECT_EQ(events[i]["specversion"], "1.0");
    types.push_back(events[i]["type"]);
  }
  EXPECT_EQ(types, (std::vector<std::string>{
                       "dev.sandboxer.sandbox.created", "dev.sandboxer.sandbox.ready",
                       "dev.sandboxer.sandbox.snapshotting", "dev.sandboxer.sandbox.snapshotted",
                       "dev.sandboxer.sandbox.extended", "dev.sandboxer.sandbox.destroying",
                       "dev.sandboxer.sandbox.destroyed"}));
  EXPECT_EQ(events[1]["data"]["sandbox"]["state"], "running");
  EXPECT_EQ(events[1]["data"]["from"], "creating");
  EXPECT_TRUE(events[1]["data"]["duration_ms"].is_number());
  EXPECT_TRUE(events[0]["data"]["duration_ms"].is_null()); // an intent has no duration
  EXPECT_TRUE(outbox_files().empty());
}

TEST_F(Events, AFailedCreateIsAFailedEvent) {
  testing::write_file(dir / "p.yaml", "driver: stub\nstub: { fail: { create: 1 } }\n");
  EXPECT_THROW(engine.create(profile(), {}), DriverError);
  auto events = delivered();
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[1]["type"], "dev.sandboxer.sandbox.failed");
  EXPECT_EQ(events[1]["data"]["sandbox"]["state"], "failed");
}

// A .prepared file is what a process killed between the outbox write and the ledger commit
// leaves: kept when the ledger has its id, dropped when not.
TEST_F(Events, LeftoversAreSettledAgainstTheLedger) {
  auto r = engine.create(profile(), {}).record;
  const fs::path outbox = dir / "state" / "outbox";
  std::string committed_id = engine.get(r.id).history[1].event_id;
  testing::write_file(outbox / ("00000000000000000001-" + committed_id + ".prepared"),
                      R"({"sequence": 1, "sinks": {}, "event": {"id": ")" + committed_id +
                          R"("}})"
                          "\n");
  testing::write_file(outbox / "00000000000000000099-evt-nevercommitted.prepared",
                      R"({"sequence": 99, "sinks": {}, "event": {"id": "evt-nevercommitted"}})"
                      "\n");
  events::Outbox box(dir / "state");
  auto tx = ledger.begin();
  box.settle_leftovers(tx.store());
  EXPECT_TRUE(fs::exists(outbox / ("00000000000000000001-" + committed_id + ".json")));
  EXPECT_FALSE(fs::exists(outbox / "00000000000000000099-evt-nevercommitted.prepared"));
}

TEST_F(Events, ASinkThatFailsKeepsItsEventsAndTheOthersGoOn) {
  // Under a regular file, so that the sink cannot make its directory (a missing one it makes).
  testing::write_file(dir / "not-a-dir", "");
  const std::string broken = (dir / "not-a-dir" / "e.jsonl").string();
  const std::string good = (dir / "good.jsonl").string();
  events::Publisher two(
      ledger, {{{"type", "jsonl"}, {"path", broken}}, {{"type", "jsonl"}, {"path", good}}}, {});
  Engine with_two(ledger, testing::builtin_catalog(), clock, two, "tester");
  auto r = with_two.create(profile(), {}).record;
  EXPECT_EQ(read_file_if_exists(good).value_or("").size() > 0, true);
  auto pending = two.outbox().entries();
  ASSERT_EQ(pending.size(), 2u); // created and ready wait for the broken sink
  EXPECT_EQ(pending[0].pending_sinks.size(), 1u);
  fs::remove(dir / "not-a-dir");
  fs::create_directories(dir / "not-a-dir");
  events::Publisher later(ledger, {}, {});
  EXPECT_EQ(later.flush().pending, 0u);
  EXPECT_NE(read_file_if_exists(broken).value_or("").find(engine.get(r.id).history[1].event_id),
            std::string::npos);
}

// Schema 1 entries written before events had no kind: the migration gives the one the events
// code of that time did.
TEST(EventKinds, OfSchema1EntriesAreToldFromTheTransitionAndItsDetails) {
  SandboxRecord r;
  auto at = *parse_time("2026-12-02T12:00:00Z");
  r.transition(EventKind::updated, State::creating, at, "t", "create");
  r.transition(EventKind::updated, State::running, at, "t", "created");
  r.transition(EventKind::updated, State::running, at, "t", "exec sh",
               {{"exec", {{"argv", {"sh"}}}}});
  r.transition(EventKind::updated, State::running, at, "t", "exec sh exited 0",
               {{"exec", {{"exit_code", 0}}}});
  r.transition(EventKind::updated, State::expired, at, "reaper", "ttl expired");
  r.transition(EventKind::updated, State::expired, at, "reaper", "destroy failed: x");
  r.transition(EventKind::updated, State::running, at, "t", "extended",
               {{"from", "a"}, {"to", "b"}});
  r.transition(EventKind::updated, State::creating, at, "t", "restore in place");
  r.transition(EventKind::updated, State::running, at, "t", "restored", {{"snapshot", "snp-x"}});
  r.transition(EventKind::updated, State::destroying, at, "t", "x");
  r.transition(EventKind::updated, State::running, at, "t", "destroy failed: y");
  r.transition(EventKind::updated, State::destroyed, at, "reaper", "vanished");
  ledger_format::upgrade_record_from_v1(r);
  std::vector<std::string> kinds;
  for (const auto& entry : r.history) {
    kinds.push_back(to_string(entry.event));
  }
  EXPECT_EQ(kinds,
            (std::vector<std::string>{"created", "ready", "exec.started", "exec.finished",
                                      "expired", "destroy.failed", "extended", "restoring",
                                      "restored", "destroying", "destroy.failed", "destroyed"}));
}

TEST(Sinks, OnlyHttpReachesTheSamePlaceFromEveryMachine) {
  EXPECT_TRUE(events::reachable_from_any_machine({{"type", "http"}, {"url", "https://hub/e"}}));
  for (const char* type : {"jsonl", "exec", "stderr", "fd"}) {
    EXPECT_FALSE(events::reachable_from_any_machine({{"type", type}})) << type;
  }
}

TEST(Sinks, ABoundSinkSaysWhichMachineSendsIt) {
  nlohmann::json sink = {{"type", "jsonl"}, {"path", "/var/log/e.jsonl"}};
  EXPECT_EQ(events::describe_sink(sink), "jsonl /var/log/e.jsonl");
  sink["host"] = "runner-7";
  EXPECT_EQ(events::describe_sink(sink), "jsonl /var/log/e.jsonl on runner-7");
}

// A receiver's Retry-After is a number of seconds, clamped to a day: LONG_MAX once overflowed into
// an immediate retry.
TEST(Sinks, RetryAfterIsClampedToADay) {
  using std::chrono::milliseconds;
  http::Response response;
  EXPECT_EQ(events::retry_after_of(response), std::nullopt);
  response.headers["retry-after"] = "120";
  EXPECT_EQ(events::retry_after_of(response), milliseconds(120'000));
  response.headers["retry-after"] = "9223372036854775807";
  EXPECT_EQ(events::retry_after_of(response), milliseconds(86'400'000));
  response.headers["retry-after"] = "99999999999999999999999999999";
  EXPECT_EQ(events::retry_after_of(response), milliseconds(86'400'000));
  response.headers["retry-after"] = "-5";
  EXPECT_EQ(events::retry_after_of(response), std::nullopt);
  response.headers["retry-after"] = "Wed, 21 Oct 2015 07:28:00 GMT";
  EXPECT_EQ(events::retry_after_of(response), std::nullopt);
  response.headers = {{"ratelimit-reset", "7"}};
  EXPECT_EQ(events::retry_after_of(response), milliseconds(7'000));
}

} // namespace
} // namespace sandboxer
