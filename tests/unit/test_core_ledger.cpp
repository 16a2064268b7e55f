#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <grp.h>
#include <gtest/gtest.h>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <regex>
#include <set>
#include <sys/stat.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

#include <sandboxer/clock.hpp>
#include <sandboxer/duration.hpp>
#include <sandboxer/error.hpp>

#include "core/errors.hpp"
#include "core/ledger/chain.hpp"
#include "core/ledger/ledger.hpp"
#include "core/owner.hpp"
#include "sdk/testing.hpp"
#include "support/temp_dir.hpp"

namespace sandboxer {
namespace {

using namespace std::chrono_literals;
using json = nlohmann::json;
using testing::read_file;
using testing::TempDir;
using testing::write_file;

TimePoint at(const char* text) {
  auto t = parse_time(text);
  EXPECT_TRUE(t.has_value()) << text;
  return t.value_or(TimePoint{});
}

// Sets (or, with nullptr, unsets) environment variables for one test and restores them after.
class ScopedEnv {
public:
  ScopedEnv() = default;
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;
  ~ScopedEnv() {
    for (auto it = m_saved.rbegin(); it != m_saved.rend(); ++it) {
      if (it->second) {
        ::setenv(it->first.c_str(), it->second->c_str(), 1);
      } else {
        ::unsetenv(it->first.c_str());
      }
    }
  }
  void set(const std::string& name, const char* value) {
    const char* old = std::getenv(name.c_str());
    m_saved.emplace_back(name, old ? std::optional<std::string>(old) : std::nullopt);
    if (value) {
      ::setenv(name.c_str(), value, 1);
    } else {
      ::unsetenv(name.c_str());
    }
  }

private:
  std::vector<std::pair<std::string, std::optional<std::string>>> m_saved;
};

// Every field set, with text that needs escaping and non-ASCII text, so that the golden file
// pins the whole format.
SandboxRecord full_record() {
  SandboxRecord r;
  r.id = "sbx-abcdefgh2345";
  r.name = "web-1";
  r.profile = {"ci-small", "/home/alice/profiles/ci-small.yaml",
               "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"};
  r.driver = "docker";
  r.spec = {{"image", "debian:12"}, {"command", {"sleep", "infinity"}},
            {"cpus", 1.5},          {"memory", 536870912},
            {"read_only", false},   {"network", nullptr}};
  r.backend_id = "4f9a0c2b1d3e";
  r.info = {{"container_name", "sandboxer-sbx-abcdefgh2345"}, {"ports", json::array({8080})}};
  r.created_at = at("2026-12-02T11:51:32Z");
  r.expires_at = at("2026-12-02T12:36:32Z");
  r.max_expires_at = at("2026-12-02T15:51:32Z");
  r.labels = {{"team", "infra"}, {"sandboxer.id", "sbx-abcdefgh2345"}};
  r.env = {{"GREETING", "h\u00e9llo \"w\u00f6rld\"\n\ttab"}};
  r.secret_refs = {{"api_key", {{"env", "E2B_API_KEY"}}}};
  r.owner = {"alice", "build-7", 4242, {{"CI", "true"}, {"GITHUB_RUN_ID", "42"}}};
  r.transition(EventKind::created, State::creating, at("2026-12-02T11:51:32Z"),
               "alice@build-7 pid 4242", "create");
  r.transition(EventKind::ready, State::running, at("2026-12-02T11:51:35Z"),
               "alice@build-7 pid 4242", "created", {{"duration_ms", 2875}});
  r.transition(EventKind::snapshotting, State::snapshotting, at("2026-12-02T12:00:00Z"),
               "alice@build-7 pid 4242", "snapshot before-tests");
  r.transition(EventKind::snapshotted, State::running, at("2026-12-02T12:00:09Z"),
               "alice@build-7 pid 4242", "snapshot taken");
  r.snapshots.push_back({"snp-qrstuvwx6734", "before-tests", "sandboxer/sbx-abcdefgh2345:before",
                         123456789, at("2026-12-02T12:00:09Z")});
  r.snapshots.push_back(
      {"snp-zyxwvuts7654", "no-size", "ref-2", std::nullopt, at("2026-12-02T12:05:00Z")});
  r.idempotency_key = "job-1234";
  r.restored_from = "snp-aaaaaaaaaaaa";
  r.error = "backend said: \u2603 \x01 done";
  return r;
}

// The policy a full record was created with, as a profile of schema 2's time would give it.
SandboxRecord with_v2_policy(SandboxRecord r) {
  r.policy.ttl = std::chrono::minutes(45);
  r.policy.ttl_max = std::chrono::hours(4);
  r.policy.snapshots_keep = 3;
  r.policy.events = json::array({{{"type", "jsonl"}, {"path", "/var/log/sandboxer.jsonl"}}});
  return r;
}

// And with what schema 3 added: pause, idle, cost.
SandboxRecord with_policy(SandboxRecord r) {
  r = with_v2_policy(std::move(r));
  r.policy.paused_max = std::chrono::hours(24);
  r.policy.on_paused_max = "destroy";
  r.policy.idle = std::chrono::minutes(20);
  r.policy.on_idle = "snapshot";
  r.policy.pause_memory = false;
  r.policy.resume_on_exec = true;
  r.policy.cost = {{"per_hour", 0.5}, {"paused_per_hour", 0.02}, {"currency", "USD"}};
  return r;
}

std::filesystem::path ledger_file(const Ledger& ledger) {
  return ledger.state_dir() / "ledger.json";
}

// A minimal valid record, for tests that only care about a few fields.
SandboxRecord small_record(const std::string& id, const std::string& name, State state) {
  SandboxRecord r;
  r.id = id;
  r.name = name;
  r.driver = "stub";
  r.created_at = at("2026-12-02T11:51:32Z");
  r.transition(EventKind::updated, state, r.created_at, "test", "made by the test");
  return r;
}

json as_json(const SandboxRecord& r) {
  return json(r);
}

std::filesystem::perms mode_of(const std::filesystem::path& path) {
  return std::filesystem::status(path).permissions();
}

std::string error_of(const std::function<void()>& run) {
  try {
    run();
  } catch (const LedgerError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no LedgerError was thrown";
  return "";
}

std::filesystem::path golden_path(const char* name = "ledger_v4.json") {
  return std::filesystem::path(SANDBOXER_TEST_DATA) / "golden" / name;
}

bool accept_golden() {
  const char* accept = std::getenv("SANDBOXER_TEST_ACCEPT");
  return accept && std::string(accept) == "1";
}

// ---------------------------------------------------------------------------------------------
// Ids, states, records

TEST(LedgerIds, HaveTheDocumentedFormat) {
  const std::regex sandbox("sbx-[a-z2-7]{12}");
  const std::regex snapshot("snp-[a-z2-7]{12}");
  for (int i = 0; i < 100; ++i) {
    EXPECT_TRUE(std::regex_match(new_sandbox_id(), sandbox));
    EXPECT_TRUE(std::regex_match(new_snapshot_id(), snapshot));
  }
}

TEST(LedgerIds, TenThousandAreUnique) {
  std::set<std::string> sandboxes;
  std::set<std::string> snapshots;
  for (int i = 0; i < 10000; ++i) {
    sandboxes.insert(new_sandbox_id());
    snapshots.insert(new_snapshot_id());
  }
  EXPECT_EQ(sandboxes.size(), 10000u);
  EXPECT_EQ(snapshots.size(), 10000u);
}

TEST(LedgerStates, NamesRoundTrip) {
  const std::vector<std::pair<State, std::string>> states = {
      {State::creating, "creating"},
      {State::running, "running"},
      {State::snapshotting, "snapshotting"},
      {State::destroying, "destroying"},
      {State::destroyed, "destroyed"},
      {State::failed, "failed"},
      {State::expired, "expired"},
      {State::orphaned, "orphaned"},
      {State::paused, "paused"},
      {State::pausing, "pausing"},
      {State::resuming, "resuming"},
  };
  for (const auto& [state, name] : states) {
    EXPECT_EQ(to_string(state), name);
    EXPECT_EQ(state_from_string(name), state);
  }
  EXPECT_EQ(state_from_string("Running"), std::nullopt);
  EXPECT_EQ(state_from_string(""), std::nullopt);
}

TEST(LedgerStates, TransitionalAndLive) {
  std::set<State> transitional;
  std::set<State> live;
  for (int i = 0; i <= static_cast<int>(State::resuming); ++i) {
    const auto state = static_cast<State>(i);
    if (is_transitional(state)) {
      transitional.insert(state);
    }
    if (is_live(state)) {
      live.insert(state);
    }
  }
  EXPECT_EQ(transitional, (std::set<State>{State::creating, State::snapshotting, State::destroying,
                                           State::expired, State::pausing, State::resuming}));
  EXPECT_EQ(live, (std::set<State>{State::creating, State::running, State::snapshotting,
                                   State::destroying, State::expired, State::orphaned,
                                   State::paused, State::pausing, State::resuming}));
}

TEST(LedgerRecord, TransitionAppendsHistory) {
  SandboxRecord r;
  r.transition(EventKind::updated, State::creating, at("2026-12-02T11:00:00Z"), "alice@h pid 1",
               "create");
  r.transition(EventKind::updated, State::running, at("2026-12-02T11:00:05Z"), "alice@h pid 1",
               "created", {{"duration_ms", 5000}});
  r.transition(EventKind::updated, State::destroying, at("2026-12-02T12:00:00Z"), "reaper",
               "ttl expired");

  ASSERT_EQ(r.history.size(), 3u);
  EXPECT_EQ(r.state, State::destroying);
  EXPECT_EQ(r.history[0].from, std::nullopt);
  EXPECT_EQ(r.history[0].to, State::creating);
  EXPECT_EQ(r.history[0].details, json::object());
  EXPECT_EQ(r.history[1].from, State::creating);
  EXPECT_EQ(r.history[1].to, State::running);
  EXPECT_EQ(r.history[1].details, json({{"duration_ms", 5000}}));
  EXPECT_EQ(r.history[2].from, State::running);
  EXPECT_EQ(r.history[2].time, at("2026-12-02T12:00:00Z"));
  EXPECT_EQ(r.history[2].actor, "reaper");
  EXPECT_EQ(r.history[2].reason, "ttl expired");
}

TEST(LedgerRecord, FindByIdThenByLiveName) {
  LedgerData data;
  data.sandboxes.push_back(small_record("sbx-aaaaaaaaaaaa", "web", State::destroyed));
  data.sandboxes.push_back(small_record("sbx-bbbbbbbbbbbb", "web", State::running));
  data.sandboxes.push_back(small_record("sbx-cccccccccccc", "db", State::failed));
  data.sandboxes.push_back(small_record("sbx-dddddddddddd", "sbx-cccccccccccc", State::running));

  ASSERT_NE(data.find("web"), nullptr);
  EXPECT_EQ(data.find("web")->id, "sbx-bbbbbbbbbbbb");
  // An id finds its record whatever the state, and wins over a name.
  ASSERT_NE(data.find("sbx-aaaaaaaaaaaa"), nullptr);
  EXPECT_EQ(data.find("sbx-aaaaaaaaaaaa")->name, "web");
  EXPECT_EQ(data.find("sbx-cccccccccccc")->name, "db");
  // A name no live record bears answers with its newest record (history, a second destroy).
  ASSERT_NE(data.find("db"), nullptr);
  EXPECT_EQ(data.find("db")->id, "sbx-cccccccccccc");
  EXPECT_EQ(data.find("nope"), nullptr);

  const LedgerData& constant = data;
  EXPECT_EQ(constant.find("web"), data.find("web"));
  data.find("web")->backend_id = "changed";
  EXPECT_EQ(data.sandboxes[1].backend_id, "changed");
}

TEST(LedgerRecord, JsonRoundTrip) {
  const SandboxRecord original = full_record();
  const json j = original;
  const auto back = j.get<SandboxRecord>();
  EXPECT_EQ(as_json(back), j);
  EXPECT_EQ(back.id, original.id);
  EXPECT_EQ(back.env, original.env);
  EXPECT_EQ(back.expires_at, original.expires_at);
  EXPECT_EQ(back.snapshots[1].size_bytes, std::nullopt);
  EXPECT_EQ(back.history[0].from, std::nullopt);
  EXPECT_EQ(back.history[1].from, State::creating);
  EXPECT_EQ(back.error, original.error);
}

TEST(LedgerRecord, NullsForAbsentOptionals) {
  const json j = small_record("sbx-aaaaaaaaaaaa", "a", State::running);
  EXPECT_TRUE(j.at("expires_at").is_null());
  EXPECT_TRUE(j.at("max_expires_at").is_null());
  EXPECT_TRUE(j.at("idempotency_key").is_null());
  EXPECT_TRUE(j.at("restored_from").is_null());
  EXPECT_TRUE(j.at("error").is_null());
  EXPECT_TRUE(j.at("history").at(0).at("from").is_null());
}

TEST(LedgerRecord, WriteJsonIsWhatToJsonBuilds) {
  const SandboxRecord r = full_record();
  std::string text = "prefix:";
  write_json(text, r);
  ASSERT_TRUE(text.starts_with("prefix:{\"id\":\"sbx-abcdefgh2345\""));
  EXPECT_EQ(json::parse(text.substr(7)), as_json(r));
}

TEST(LedgerRecord, InvalidUtf8IsReplacedNotRefused) {
  SandboxRecord r = small_record("sbx-aaaaaaaaaaaa", "a", State::failed);
  r.error = "bad \xff\xfe bytes";
  std::string text;
  write_json(text, r);
  EXPECT_EQ(json::parse(text).at("error"), "bad \ufffd\ufffd bytes");
}

TEST(LedgerRecord, WrongFieldTypeNamesRecordAndField) {
  json j = full_record();
  j["owner"]["pid"] = "4242";
  EXPECT_EQ(
      error_of([&] { j.get<SandboxRecord>(); }),
      "sandbox record sbx-abcdefgh2345: field \"owner.pid\" is a string, expected an integer");

  j = full_record();
  j["history"][2]["to"] = "hibernating";
  EXPECT_EQ(error_of([&] { j.get<SandboxRecord>(); }),
            "sandbox record sbx-abcdefgh2345: field \"history[2].to\" is \"hibernating\", "
            "expected one of creating, running, snapshotting, destroying, destroyed, failed, "
            "expired, orphaned, paused, pausing, resuming");

  j = full_record();
  j["labels"]["team"] = 7;
  EXPECT_EQ(
      error_of([&] { j.get<SandboxRecord>(); }),
      "sandbox record sbx-abcdefgh2345: field \"labels.team\" is a number, expected a string");

  j = full_record();
  j["expires_at"] = "tomorrow";
  EXPECT_EQ(
      error_of([&] { j.get<SandboxRecord>(); }),
      "sandbox record sbx-abcdefgh2345: field \"expires_at\" is \"tomorrow\", expected an RFC "
      "3339 time such as \"2026-12-02T11:51:32Z\"");

  j = full_record();
  j["snapshots"][1]["size_bytes"] = -1;
  EXPECT_EQ(error_of([&] { j.get<SandboxRecord>(); }),
            "sandbox record sbx-abcdefgh2345: field \"snapshots[1].size_bytes\" is -1, expected a "
            "non-negative integer or null");

  j = full_record();
  j.erase("created_at");
  EXPECT_EQ(error_of([&] { j.get<SandboxRecord>(); }),
            "sandbox record sbx-abcdefgh2345: field \"created_at\" is missing");

  EXPECT_EQ(error_of([&] { json(42).get<SandboxRecord>(); }),
            "sandbox record without an id: is a number, expected an object");

  // The policy's durations are durations (issue 36): text that is none is named, not kept.
  j = full_record();
  j["policy"]["ttl"] = "soon";
  EXPECT_EQ(error_of([&] { j.get<SandboxRecord>(); }),
            "sandbox record sbx-abcdefgh2345: field \"policy.ttl\" is \"soon\", expected a "
            "duration (use 90s, 15m, 2h, 1d, 1h30m)");
}

// A policy's durations are read as durations and written back in format_duration's text.
TEST(LedgerRecord, PolicyDurationsRoundTripAsDurations) {
  json j = full_record();
  j["policy"]["ttl"] = "1h30m";
  j["policy"]["ttl_max"] = "2d";
  j["policy"]["ttl_requested"] = nullptr;
  const auto record = j.get<SandboxRecord>();
  EXPECT_EQ(record.policy.ttl, std::chrono::minutes(90));
  EXPECT_EQ(record.policy.ttl_max, std::chrono::hours(48));
  EXPECT_FALSE(record.policy.ttl_requested);
  const json back = as_json(record);
  EXPECT_EQ(back["policy"]["ttl"], "1h30m");
  EXPECT_EQ(back["policy"]["ttl_max"], "2d");
  EXPECT_TRUE(back["policy"]["ttl_requested"].is_null());
}

// A paused record: every field of its pause set.
// A warm pool member, waiting in its pool (docs/pools.md).
SandboxRecord pooled_record() {
  SandboxRecord r = small_record("sbx-wwwwwwwwwwww", "sbx-wwwwwwwwwwww", State::creating);
  r.transition(EventKind::pooled, State::pooled, at("2026-12-02T12:00:02Z"), "reaper", "pooled",
               {{"pool", "ci@build-7"}});
  r.pool = PoolMembership{"ci@build-7", "sha256:" + std::string(64, 'a'),
                          at("2026-12-02T12:00:02Z"), std::nullopt, ""};
  r.expires_at = at("2026-12-02T13:00:00Z");
  return r;
}

SandboxRecord paused_record() {
  SandboxRecord r = small_record("sbx-pppppppppppp", "paused-one", State::running);
  r.transition(EventKind::pausing, State::pausing, at("2026-12-02T12:10:00Z"), "reaper",
               "idle since 2026-12-02T11:51:32Z");
  r.transition(EventKind::paused, State::paused, at("2026-12-02T12:10:03Z"), "reaper", "paused",
               {{"pause_id", "pse-abcdefgh2345"}, {"memory", true}, {"how", "checkpoint"}});
  r.pause = PauseState{"pse-abcdefgh2345",
                       "idle",
                       "checkpoint",
                       at("2026-12-02T12:10:00Z"),
                       at("2026-12-02T12:10:03Z"),
                       std::chrono::minutes(35),
                       true,
                       true,
                       987654321};
  r.expires_at = at("2026-12-09T12:10:03Z");
  r.policy.paused_max = std::chrono::hours(24 * 7);
  r.policy.on_paused_max = "snapshot";
  r.policy.idle = std::chrono::minutes(30);
  r.policy.on_idle = "pause";
  r.policy.pause_memory = true;
  r.policy.resume_on_exec = true;
  r.policy.cost = {{"per_hour", 0.12}, {"paused_per_hour", 0.01}, {"currency", "EUR"}};
  return r;
}

TEST(LedgerRecord, PausedRecordsRoundTripInEveryState) {
  for (State state : {State::pausing, State::paused, State::resuming}) {
    SandboxRecord r = paused_record();
    r.state = state;
    if (state == State::pausing) {
      r.pause->at.reset(); // not paused yet
      r.pause->how.clear();
      r.pause->held_bytes.reset();
      r.pause->ttl_left.reset();
      r.pause->emulated = false;
    }
    SCOPED_TRACE(to_string(state));
    const json j = r;
    EXPECT_EQ(j.at("state"), to_string(state));
    const auto back = j.get<SandboxRecord>();
    EXPECT_EQ(as_json(back), j);
    std::string text;
    write_json(text, back);
    EXPECT_EQ(json::parse(text), j);
    ASSERT_TRUE(back.pause);
    EXPECT_EQ(back.pause->id, r.pause->id);
    EXPECT_EQ(back.pause->cause, "idle");
    EXPECT_EQ(back.pause->how, r.pause->how);
    EXPECT_EQ(back.pause->requested_at, r.pause->requested_at);
    EXPECT_EQ(back.pause->at, r.pause->at);
    EXPECT_EQ(back.pause->ttl_left, r.pause->ttl_left);
    EXPECT_EQ(back.pause->memory, true);
    EXPECT_EQ(back.pause->emulated, r.pause->emulated);
    EXPECT_EQ(back.pause->held_bytes, r.pause->held_bytes);
    EXPECT_EQ(back.policy.paused_max, std::chrono::hours(24 * 7));
    EXPECT_EQ(back.policy.on_paused_max, "snapshot");
    EXPECT_EQ(back.policy.idle, std::chrono::minutes(30));
    EXPECT_EQ(back.policy.on_idle, "pause");
    EXPECT_EQ(back.policy.pause_memory, true);
    EXPECT_TRUE(back.policy.resume_on_exec);
    EXPECT_EQ(back.policy.cost.at("currency"), "EUR");
    EXPECT_EQ(back.history.back().event, EventKind::paused);
  }
  const json j = paused_record();
  EXPECT_EQ(j.at("pause").at("ttl_left"), "35m");
  EXPECT_EQ(j.at("policy").at("paused_max"), "7d");
  EXPECT_EQ(j.at("history").back().at("event"), "paused");
  // The record's own order: the pause follows the lease's place, before the ports.
  std::string text;
  write_json(text, paused_record());
  EXPECT_LT(text.find("\"max_expires_at\""), text.find("\"pause\""));
  EXPECT_LT(text.find("\"pause\""), text.find("\"labels\""));
}

TEST(LedgerRecord, PauseEventKindsRoundTrip) {
  for (auto [kind, name] : {std::pair{EventKind::pausing, "pausing"},
                            {EventKind::paused, "paused"},
                            {EventKind::pause_failed, "pause.failed"},
                            {EventKind::resuming, "resuming"},
                            {EventKind::resumed, "resumed"},
                            {EventKind::resume_failed, "resume.failed"}}) {
    EXPECT_STREQ(to_string(kind), name);
    EXPECT_EQ(event_kind_from_string(name), kind);
    SandboxRecord r = small_record("sbx-aaaaaaaaaaaa", "a", State::running);
    r.transition(kind, State::running, r.created_at, "t", name);
    EXPECT_EQ(json(r).get<SandboxRecord>().history.back().event, kind);
  }
}

// What schema 2 never had is left out when unset: a record without a pause or the new policy
// fields is written exactly as schema 2 wrote it.
TEST(LedgerRecord, UnsetPauseAndPolicyFieldsAreLeftOut) {
  const json j = with_v2_policy(full_record());
  EXPECT_FALSE(j.contains("pause"));
  for (const char* key : {"paused_max", "on_paused_max", "idle", "on_idle", "pause_memory",
                          "resume_on_exec", "cost"}) {
    EXPECT_FALSE(j.at("policy").contains(key)) << key;
  }
  SandboxRecord r = paused_record();
  r.policy.resume_on_exec = false;
  r.policy.pause_memory = false; // said, not the default: kept
  r.pause->emulated = false;
  const json k = r;
  EXPECT_FALSE(k.at("policy").contains("resume_on_exec"));
  EXPECT_EQ(k.at("policy").at("pause_memory"), false);
  EXPECT_FALSE(k.at("pause").contains("emulated"));
  EXPECT_EQ(k.at("pause").at("memory"), true);
  r.pause->memory = false;
  EXPECT_EQ(json(r).at("pause").at("memory"), false) << "memory is always said";
}

TEST(LedgerRecord, BadPauseAndPolicyValuesNameTheField) {
  auto refused = [](const std::function<void(json&)>& change) {
    json j = paused_record();
    change(j);
    return error_of([&] { j.get<SandboxRecord>(); });
  };
  const std::string prefix = "sandbox record sbx-pppppppppppp: field ";
  EXPECT_EQ(refused([](json& j) { j["pause"]["cause"] = "boredom"; }),
            prefix + "\"pause.cause\" is \"boredom\", expected one of user, idle");
  EXPECT_EQ(refused([](json& j) { j["pause"].erase("id"); }), prefix + "\"pause.id\" is missing");
  EXPECT_EQ(refused([](json& j) { j["pause"].erase("requested_at"); }),
            prefix + "\"pause.requested_at\" is missing");
  EXPECT_EQ(refused([](json& j) { j["pause"]["memory"] = "yes"; }),
            prefix + "\"pause.memory\" is a string, expected true or false");
  EXPECT_EQ(refused([](json& j) { j["pause"]["ttl_left"] = "a while"; }),
            prefix + "\"pause.ttl_left\" is \"a while\", expected a duration (use 90s, 15m, 2h, "
                     "1d, 1h30m)");
  EXPECT_EQ(refused([](json& j) { j["pause"]["held_bytes"] = -5; }),
            prefix + "\"pause.held_bytes\" is -5, expected a non-negative integer or null");
  EXPECT_EQ(refused([](json& j) { j["pause"] = 3; }),
            prefix + "\"pause\" is a number, expected an object");
  EXPECT_EQ(refused([](json& j) { j["policy"]["on_idle"] = "hibernate"; }),
            prefix +
                "\"policy.on_idle\" is \"hibernate\", expected one of destroy, pause, snapshot");
  EXPECT_EQ(refused([](json& j) { j["policy"]["on_paused_max"] = "pause"; }),
            prefix + "\"policy.on_paused_max\" is \"pause\", expected one of destroy, snapshot");
  EXPECT_EQ(refused([](json& j) { j["policy"]["resume_on_exec"] = 1; }),
            prefix + "\"policy.resume_on_exec\" is a number, expected true or false");
  EXPECT_EQ(refused([](json& j) { j["policy"]["pause_memory"] = "no"; }),
            prefix + "\"policy.pause_memory\" is a string, expected true, false or null");
  EXPECT_EQ(refused([](json& j) { j["policy"]["cost"] = json::array({1}); }),
            prefix + "\"policy.cost\" is an array, expected an object or null");
  EXPECT_EQ(refused([](json& j) { j["policy"]["idle"] = "soon"; }),
            prefix + "\"policy.idle\" is \"soon\", expected a duration (use 90s, 15m, 2h, 1d, "
                     "1h30m)");
  // null reads as absent.
  json j = paused_record();
  j["pause"] = nullptr;
  j["policy"]["cost"] = nullptr;
  j["policy"]["pause_memory"] = nullptr;
  const auto back = j.get<SandboxRecord>();
  EXPECT_FALSE(back.pause);
  EXPECT_TRUE(back.policy.cost.is_null());
  EXPECT_FALSE(back.policy.pause_memory);
}

TEST(LedgerRecord, UnknownFieldsAreIgnored) {
  json j = full_record();
  j["added_by_a_later_release"] = {{"x", 1}};
  j["owner"]["tty"] = "/dev/pts/1";
  EXPECT_EQ(as_json(j.get<SandboxRecord>()), json(full_record()));
}

// ---------------------------------------------------------------------------------------------
// The golden file

void check_golden(const std::string& written, const char* name) {
  if (accept_golden()) {
    // Pretty-printed in the file's own key order, so that it also documents the format.
    write_file(golden_path(name), nlohmann::ordered_json::parse(written).dump(2) + "\n");
  }
  ASSERT_TRUE(std::filesystem::exists(golden_path(name)))
      << golden_path(name) << " is missing: run with SANDBOXER_TEST_ACCEPT=1 to create it";
  const json golden = json::parse(read_file(golden_path(name)));
  const json document = json::parse(written);
  EXPECT_EQ(document, golden) << "differences (golden -> now): "
                              << json::diff(golden, document).dump(2)
                              << "\nif the change is intended, rerun with SANDBOXER_TEST_ACCEPT=1";
}

// The live document keeps the running record; the destroyed one went to the journal, whose
// segment is golden too (its header line, then the record).
TEST(LedgerGolden, FilesMatchGolden) {
  TempDir dir;
  Ledger ledger(dir / "state", 1s);
  {
    auto transaction = ledger.begin();
    transaction.data().ledger_id = "ldg-goldenfile23";
    transaction.data().sandboxes.push_back(with_policy(full_record()));
    transaction.data().sandboxes.push_back(paused_record());
    transaction.data().sandboxes.push_back(pooled_record());
    transaction.data().sandboxes.push_back(
        small_record("sbx-mmmmmmmmmmmm", "minimal", State::destroyed));
    transaction.commit();
  }
  const std::string written = read_file(ledger_file(ledger));
  // Compact: one line, ended by a newline.
  ASSERT_FALSE(written.empty());
  EXPECT_EQ(written.find('\n'), written.size() - 1);
  EXPECT_TRUE(written.starts_with("{\"schema_version\":4,\"ledger_id\":\"ldg-goldenfile23\","));
  // As long as nlohmann's compact form (which orders keys differently): no white space.
  EXPECT_EQ(written.size(), json::parse(written).dump().size() + 1);
  check_golden(written, "ledger_v4.json");

  const std::string segment = read_file(dir / "state" / "journal" / "segment-000001.jsonl");
  const auto newline = segment.find('\n');
  ASSERT_NE(newline, std::string::npos);
  EXPECT_EQ(
      segment.substr(0, newline),
      R"({"sandboxer_journal":4,"ledger_id":"ldg-goldenfile23","segment":1,"day":"2026-12-02",)"
      // The chain's start: the hash of {"journal":"ldg-goldenfile23"}, no line before.
      R"("prev":"sha256:26a22a071755b6b648a3f425759eb49e4183739273a44c0203654abf2a484e53","lines":0})");
  check_golden(segment.substr(newline + 1), "journal_record_v4.json");
}

TEST(LedgerGolden, GoldenReadsBackIntoTheSameRecords) {
  TempDir dir;
  write_file(dir / "state" / "ledger.json", read_file(golden_path()));
  const LedgerData data = Ledger(dir / "state", 1s).read();
  EXPECT_EQ(data.ledger_id, "ldg-goldenfile23");
  ASSERT_EQ(data.sandboxes.size(), 3u);
  SandboxRecord expected = with_policy(full_record());
  chain::seal(expected);
  EXPECT_EQ(as_json(data.sandboxes[0]), as_json(expected));
  EXPECT_EQ(data.sandboxes[0].env.at("GREETING"), "h\u00e9llo \"w\u00f6rld\"\n\ttab");
  EXPECT_EQ(data.sandboxes[0].spec.at("cpus"), 1.5);
  EXPECT_EQ(data.closed_counts.at("destroyed"), 1u);
  EXPECT_FALSE(chain::verify(data.sandboxes[0]));
  SandboxRecord paused = paused_record();
  chain::seal(paused);
  EXPECT_EQ(as_json(data.sandboxes[1]), as_json(paused));
  EXPECT_EQ(data.sandboxes[1].state, State::paused);
  EXPECT_FALSE(chain::verify(data.sandboxes[1]));
  SandboxRecord pooled = pooled_record();
  chain::seal(pooled);
  EXPECT_EQ(as_json(data.sandboxes[2]), as_json(pooled));
  EXPECT_EQ(data.sandboxes[2].pool->key, "ci@build-7");
}

// Schema 3 (tests/data/golden/ledger_v3.json, written by the previous version: no pools) is read
// as it is, and the first change moves only its version, keeping it as ledger.v3.json.
TEST(LedgerGolden, Schema3GoldenIsStillReadAndMigrates) {
  TempDir dir;
  const std::string v3 = read_file(golden_path("ledger_v3.json"));
  write_file(dir / "state" / "ledger.json", v3);
  Ledger ledger(dir / "state", 1s);
  ASSERT_EQ(ledger.read().sandboxes.size(), 2u);
  EXPECT_EQ(ledger.read().sandboxes[1].state, State::paused);
  EXPECT_EQ(read_file(ledger_file(ledger)), v3) << "reading never writes";
  ledger.begin().commit();
  EXPECT_EQ(read_file(dir / "state" / "ledger.v3.json"), v3);
  const json migrated = json::parse(read_file(ledger_file(ledger)));
  EXPECT_EQ(migrated["schema_version"], 4);
  EXPECT_EQ(migrated["sandboxes"], json::parse(v3)["sandboxes"]) << "no record changes";
}

// Schema 2 (tests/data/golden/ledger_v2.json, written by the previous version) reads into the
// same records, byte for byte when written again; the first change migrates it, keeping it as
// ledger.v2.json.
TEST(LedgerGolden, Schema2GoldenIsStillReadAndMigrates) {
  TempDir dir;
  const std::string v2 = read_file(golden_path("ledger_v2.json"));
  write_file(dir / "state" / "ledger.json", v2);
  Ledger ledger(dir / "state", 1s);
  const LedgerData data = ledger.read();
  ASSERT_EQ(data.sandboxes.size(), 1u);
  SandboxRecord expected = with_v2_policy(full_record());
  chain::seal(expected);
  EXPECT_EQ(as_json(data.sandboxes[0]), as_json(expected));
  EXPECT_EQ(as_json(data.sandboxes[0]), json::parse(v2)["sandboxes"][0]);
  EXPECT_EQ(read_file(ledger_file(ledger)), v2) << "reading never writes";
  ledger.begin().commit();
  EXPECT_EQ(read_file(dir / "state" / "ledger.v2.json"), v2);
  const json migrated = json::parse(read_file(ledger_file(ledger)));
  EXPECT_EQ(migrated["schema_version"], LedgerData::k_schema_version);
  EXPECT_EQ(migrated["sandboxes"], json::parse(v2)["sandboxes"]) << "no record changes";
  EXPECT_EQ(ledger.read().closed_counts.at("destroyed"), 1u);
}

// Another writer (jq, an editor, nlohmann's dump) may sort the keys, which puts schema_version
// after the records.
TEST(LedgerGolden, SortedKeysReadTheSame) {
  TempDir dir;
  const json golden = json::parse(read_file(golden_path()));
  const std::string sorted = golden.dump();
  ASSERT_LT(sorted.find("\"sandboxes\""), sorted.find("\"schema_version\""));
  write_file(dir / "state" / "ledger.json", sorted);
  const LedgerData data = Ledger(dir / "state", 1s).read();
  ASSERT_EQ(data.sandboxes.size(), 3u);
  EXPECT_EQ(data.sandboxes[0].id, full_record().id);
  EXPECT_EQ(data.sandboxes[1].pause->id, "pse-abcdefgh2345");
}

// Schema 1 (tests/data/golden/ledger_v1.json, written by the previous version) is still read,
// each record upgraded in memory: the creation policy from the first entry's details.
TEST(LedgerGolden, Schema1GoldenIsStillRead) {
  TempDir dir;
  write_file(dir / "state" / "ledger.json", read_file(golden_path("ledger_v1.json")));
  Ledger ledger(dir / "state", 1s);
  const LedgerData data = ledger.read();
  ASSERT_EQ(data.sandboxes.size(), 1u) << "the destroyed record is not resident";
  EXPECT_EQ(data.sandboxes[0].id, "sbx-abcdefgh2345");
  EXPECT_EQ(data.sandboxes[0].history[0].event, EventKind::created);
  EXPECT_EQ(data.sandboxes[0].history[1].event, EventKind::ready);
  ASSERT_TRUE(ledger.find("sbx-mmmmmmmmmmmm"));
  EXPECT_EQ(ledger.find("minimal")->state, State::destroyed);
  EXPECT_EQ(read_file(ledger_file(ledger)), read_file(golden_path("ledger_v1.json")))
      << "reading never writes";
}

// ---------------------------------------------------------------------------------------------
// The file

TEST(LedgerFile, MissingFileReadsEmptyAndCreatesNothing) {
  TempDir dir;
  Ledger ledger(dir / "state", 1s);
  const LedgerData data = ledger.read();
  EXPECT_TRUE(data.sandboxes.empty());
  EXPECT_TRUE(data.ledger_id.empty());
  EXPECT_FALSE(std::filesystem::exists(dir / "state"));
}

TEST(LedgerFile, PermissionsWhateverTheUmask) {
  TempDir dir;
  const mode_t old_umask = ::umask(0);
  Ledger ledger(dir / "a" / "b" / "state", 1s);
  for (int i = 0; i < 2; ++i) {
    auto transaction = ledger.begin();
    transaction.data().sandboxes.push_back(
        small_record(new_sandbox_id(), "n" + std::to_string(i), State::running));
    transaction.commit();
  }
  ::umask(old_umask);
  using std::filesystem::perms;
  EXPECT_EQ(mode_of(dir / "a" / "b" / "state"), perms::owner_all);
  EXPECT_EQ(mode_of(ledger_file(ledger)), perms::owner_read | perms::owner_write);
  EXPECT_EQ(mode_of(dir / "a" / "b" / "state" / "ledger.lock"),
            perms::owner_read | perms::owner_write);
  EXPECT_EQ(mode_of(dir / "a" / "b" / "state" / "ledger.json.bak"),
            perms::owner_read | perms::owner_write);
}

TEST(LedgerFile, ExistingStateDirKeepsItsMode) {
  TempDir dir;
  std::filesystem::create_directories(dir / "state");
  std::filesystem::permissions(dir / "state", std::filesystem::perms(0755));
  Ledger ledger(dir / "state", 1s);
  ledger.begin().commit();
  EXPECT_EQ(mode_of(dir / "state"), std::filesystem::perms(0755));
}

TEST(LedgerFile, CommitKeepsThePreviousCopyAsBak) {
  TempDir dir;
  Ledger ledger(dir / "state", 1s);
  const auto backup = dir / "state" / "ledger.json.bak";
  std::vector<std::string> versions;
  for (int i = 0; i < 3; ++i) {
    auto transaction = ledger.begin();
    transaction.data().sandboxes.push_back(
        small_record(new_sandbox_id(), "n" + std::to_string(i), State::running));
    transaction.commit();
    versions.push_back(read_file(ledger_file(ledger)));
    if (i == 0) {
      EXPECT_FALSE(std::filesystem::exists(backup)) << "no previous ledger, so no backup";
    } else {
      EXPECT_EQ(read_file(backup), versions[i - 1]);
    }
  }
  EXPECT_EQ(ledger.read().sandboxes.size(), 3u);
  // Only the ledger, its backup and the lock: no temporary file is left behind.
  std::set<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir / "state")) {
    names.insert(entry.path().filename().string());
  }
  EXPECT_EQ(names, (std::set<std::string>{"ledger.json", "ledger.json.bak", "ledger.lock"}));
}

// A writer killed between its two renames leaves ledger.json.bak and ledger.json as links to one
// file; rename(2) between two links of one file does nothing, which must not leave the
// temporary link behind.
TEST(LedgerFile, CommitAfterBackupAndLedgerAreOneFile) {
  TempDir dir;
  Ledger ledger(dir / "state", 1s);
  ledger.begin().commit();
  const auto backup = dir / "state" / "ledger.json.bak";
  std::filesystem::create_hard_link(ledger_file(ledger), backup);
  const std::string before = read_file(ledger_file(ledger));
  {
    auto transaction = ledger.begin();
    transaction.data().sandboxes.push_back(full_record());
    transaction.commit();
  }
  EXPECT_EQ(read_file(backup), before);
  EXPECT_EQ(ledger.read().sandboxes.size(), 1u);
  std::set<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir / "state")) {
    names.insert(entry.path().filename().string());
  }
  EXPECT_EQ(names, (std::set<std::string>{"ledger.json", "ledger.json.bak", "ledger.lock"}));
}

TEST(LedgerFile, CommitWithoutChangesKeepsTheContent) {
  TempDir dir;
  Ledger ledger(dir / "state", 1s);
  {
    auto transaction = ledger.begin();
    transaction.data().sandboxes.push_back(full_record());
    transaction.commit();
  }
  const std::string first = read_file(ledger_file(ledger));
  ledger.begin().commit();
  EXPECT_EQ(read_file(ledger_file(ledger)), first);
}

TEST(LedgerFile, EnsureIdCommitsOnceAndStaysStable) {
  TempDir dir;
  Ledger ledger(dir / "state", 1s);
  const std::string id = ledger.ensure_id();
  EXPECT_TRUE(std::regex_match(id, std::regex("ldg-[a-z2-7]{12}"))) << id;
  EXPECT_TRUE(std::filesystem::exists(ledger_file(ledger)));
  EXPECT_EQ(ledger.ensure_id(), id);
  EXPECT_EQ(ledger.read().ledger_id, id);
  auto transaction = ledger.begin();
  transaction.commit();
  EXPECT_EQ(ledger.read().ledger_id, id);
}

TEST(LedgerFile, FirstCommitMintsTheLedgerId) {
  TempDir dir;
  Ledger ledger(dir / "state", 1s);
  auto transaction = ledger.begin();
  EXPECT_TRUE(transaction.data().ledger_id.empty());
  transaction.commit();
  EXPECT_FALSE(transaction.data().ledger_id.empty());
  EXPECT_EQ(ledger.read().ledger_id, transaction.data().ledger_id);
}

class LedgerCorrupt : public ::testing::Test {
protected:
  void SetUp() override {
    auto transaction = m_ledger.begin();
    transaction.data().sandboxes.push_back(full_record());
    transaction.commit();
    transaction.commit(); // now there is a backup
  }

  // Replaces the ledger with `text` and checks that reading, beginning a transaction and
  // ensure_id() all fail with `expected`, leaving both files as they were.
  void expect_refused(const std::string& text, const std::string& expected) {
    write_file(ledger_file(m_ledger), text);
    const std::string backup = read_file(backup_path());
    EXPECT_EQ(error_of([&] { m_ledger.read(); }), expected);
    EXPECT_EQ(error_of([&] { m_ledger.begin(); }), expected);
    EXPECT_EQ(error_of([&] { m_ledger.ensure_id(); }), expected);
    EXPECT_EQ(read_file(ledger_file(m_ledger)), text);
    EXPECT_EQ(read_file(backup_path()), backup);
  }

  std::string file() const { return ledger_file(m_ledger).string(); }
  std::filesystem::path backup_path() const { return m_dir / "state" / "ledger.json.bak"; }
  std::string restore_hint() const {
    return "; it was left untouched. The previous good copy is " + backup_path().string() +
           ": inspect both, then restore it with: cp " + backup_path().string() + " " + file();
  }

  TempDir m_dir;
  Ledger m_ledger{m_dir / "state", 1s};
};

TEST_F(LedgerCorrupt, TruncatedFile) {
  expect_refused("{\"schema_version\":1,\"sandboxes\":[",
                 "ledger " + file() +
                     " is corrupt (invalid JSON at byte offset 33: unexpected end of input "
                     "(expected a value), in sandboxes[0])" +
                     restore_hint());
}

TEST_F(LedgerCorrupt, Garbage) {
  expect_refused("not json\n", "ledger " + file() +
                                   " is corrupt (invalid JSON at byte offset 0: unexpected "
                                   "character 'n')" +
                                   restore_hint());
}

TEST_F(LedgerCorrupt, EmptyFile) {
  expect_refused("", "ledger " + file() +
                         " is corrupt (invalid JSON at byte offset 0: unexpected end of input "
                         "(expected a value))" +
                         restore_hint());
}

TEST_F(LedgerCorrupt, TrailingContent) {
  expect_refused("{\"schema_version\":1,\"sandboxes\":[]} x",
                 "ledger " + file() +
                     " is corrupt (invalid JSON at byte offset 36: unexpected content after the "
                     "end of the document)" +
                     restore_hint());
}

TEST_F(LedgerCorrupt, SyntaxErrorInsideARecord) {
  std::string text = read_file(ledger_file(m_ledger));
  const auto pos = text.find("\"driver\":\"docker\"");
  ASSERT_NE(pos, std::string::npos);
  text[pos + 9] = '?';
  expect_refused(text, "ledger " + file() + " is corrupt (invalid JSON at byte offset " +
                           std::to_string(pos + 9) +
                           ": unexpected character '?', in sandboxes[0])" + restore_hint());
}

// Issue 13: two records with one id were read, and lookups by id picked one of them.
TEST_F(LedgerCorrupt, DuplicateRecordIds) {
  const std::string text = read_file(ledger_file(m_ledger));
  const auto open = text.find('[');
  const auto close = text.rfind(']');
  ASSERT_NE(open, std::string::npos);
  const std::string record = text.substr(open + 1, close - open - 1);
  const std::string doubled = text.substr(0, close) + "," + record + text.substr(close);
  expect_refused(doubled, "ledger " + file() +
                              " is corrupt (sandboxes[0] and sandboxes[1] have the same id " +
                              full_record().id + ")" + restore_hint());
}

TEST_F(LedgerCorrupt, NotAnObject) {
  expect_refused("[]", "ledger " + file() +
                           " is corrupt (is an array, expected an object at the top level)" +
                           restore_hint());
}

TEST_F(LedgerCorrupt, NoSchemaVersion) {
  expect_refused("{\"sandboxes\":[]}", "ledger " + file() +
                                           " is corrupt (field \"schema_version\" is missing)" +
                                           restore_hint());
}

TEST_F(LedgerCorrupt, WrongFieldTypeNamesIndexIdAndField) {
  json document = json::parse(read_file(ledger_file(m_ledger)));
  json second = full_record();
  second["id"] = "sbx-secondsecond";
  second["history"][1]["time"] = 1234;
  document["sandboxes"].push_back(second);
  expect_refused(document.dump(),
                 "ledger " + file() +
                     " is corrupt (sandboxes[1] (id sbx-secondsecond): field \"history[1].time\" "
                     "is a number, expected an RFC 3339 time string)" +
                     restore_hint());
}

TEST_F(LedgerCorrupt, InvalidUtf8) {
  expect_refused("{\"schema_version\":1,\"ledger_id\":\"\xc3\x28\",\"sandboxes\":[]}",
                 "ledger " + file() +
                     " is corrupt (invalid JSON at byte offset 33: invalid UTF-8 in a string)" +
                     restore_hint());
}

TEST(LedgerFile, CorruptWithoutBackupSaysSo) {
  TempDir dir;
  Ledger ledger(dir / "state", 1s);
  write_file(ledger_file(ledger), "{");
  const auto backup = (dir / "state" / "ledger.json.bak").string();
  EXPECT_EQ(error_of([&] { ledger.begin(); }),
            "ledger " + ledger_file(ledger).string() +
                " is corrupt (invalid JSON at byte offset 1: unexpected end of input (expected a "
                "string as object key))"
                "; it was left untouched. There is no previous copy (" +
                backup +
                " does not exist): repair it by hand, or move it aside to start an empty ledger "
                "(sandboxes it listed can then be found with: sandboxer reap --orphans --dry-run)");
  EXPECT_EQ(read_file(ledger_file(ledger)), "{");
}

TEST(LedgerFile, NewerSchemaIsRefused) {
  TempDir dir;
  Ledger ledger(dir / "state", 1s);
  const std::string expected = "ledger " + ledger_file(ledger).string() +
                               " has schema_version 5, newer than this sandboxer understands (4); "
                               "upgrade sandboxer";
  write_file(ledger_file(ledger), "{\"schema_version\":5,\"sandboxes\":[{\"a\":\"new shape\"}]}");
  EXPECT_EQ(error_of([&] { ledger.read(); }), expected);
  EXPECT_EQ(error_of([&] { ledger.begin(); }), expected);
  // Also when the version comes after records that this version cannot read.
  write_file(ledger_file(ledger), "{\"sandboxes\":{\"v4\":[1,2]},\"schema_version\":5}");
  EXPECT_EQ(error_of([&] { ledger.read(); }), expected);
  EXPECT_EQ(read_file(ledger_file(ledger)), "{\"sandboxes\":{\"v4\":[1,2]},\"schema_version\":5}");
}

TEST(LedgerFile, UnreadableFileNamesPathAndErrno) {
  TempDir dir;
  Ledger ledger(dir / "state", 1s);
  std::filesystem::create_directories(ledger_file(ledger));
  EXPECT_EQ(error_of([&] { ledger.read(); }),
            "refusing ledger " + ledger_file(ledger).string() +
                ": it is a directory; another user could have planted or changed it. Check it, "
                "then remove it or give it to this user with mode 0600");
}

// Runs `check` (which returns what went wrong, or "") as an unprivileged user: root reads files
// whatever their mode, so as root it runs in a child that drops to nobody (65534) first.
std::string as_unprivileged(const std::function<std::string()>& check) {
  if (::geteuid() != 0) {
    return check();
  }
  int fds[2];
  if (::pipe(fds) != 0) {
    return "pipe failed";
  }
  pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    std::string problem;
    if (::setgroups(0, nullptr) != 0 || ::setresgid(65534, 65534, 65534) != 0 ||
        ::setresuid(65534, 65534, 65534) != 0) {
      problem = "cannot drop to uid 65534";
    } else {
      problem = check();
    }
    (void)!::write(fds[1], problem.data(), problem.size());
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string problem;
  char buffer[512];
  ssize_t n = 0;
  while ((n = ::read(fds[0], buffer, sizeof buffer)) > 0) {
    problem.append(buffer, static_cast<size_t>(n));
  }
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return "the unprivileged child did not exit cleanly";
  }
  return problem;
}

// As root it runs as nobody (issue 13: it used to be skipped, so it never ran in CI).
TEST(LedgerFile, PermissionDeniedNamesPathAndErrno) {
  EXPECT_EQ(as_unprivileged([] {
              TempDir dir;
              Ledger ledger(dir / "state", 1s);
              ledger.begin().commit();
              std::filesystem::permissions(ledger_file(ledger), std::filesystem::perms::none);
              const std::string expected =
                  "cannot read ledger " + ledger_file(ledger).string() +
                  ": Permission denied; check that it belongs to you and is readable (its mode "
                  "should be 0600)";
              const std::string got = error_of([&] { ledger.read(); });
              return got == expected ? std::string() : "got: " + got;
            }),
            "");
}

TEST(LedgerFile, LargeLedgerRoundTrips) {
  TempDir dir;
  Ledger ledger(dir / "state", 1s);
  SandboxRecord prototype = full_record();
  {
    auto transaction = ledger.begin();
    for (int i = 0; i < 3000; ++i) {
      prototype.id = new_sandbox_id();
      prototype.name = "n" + std::to_string(i);
      transaction.data().sandboxes.push_back(prototype);
    }
    transaction.commit();
  }
  // Large enough to be mapped and written in several chunks.
  EXPECT_GT(std::filesystem::file_size(ledger_file(ledger)), 2u << 20);
  const LedgerData data = ledger.read();
  ASSERT_EQ(data.sandboxes.size(), 3000u);
  EXPECT_EQ(data.sandboxes[2999].name, "n2999");
  EXPECT_EQ(json::parse(read_file(ledger_file(ledger))).at("sandboxes").size(), 3000u);
}

TEST(LedgerFile, SummaryReadLeavesOutTheBulkAndKeepsTheRest) {
  TempDir dir;
  Ledger ledger(dir / "state", 1s);
  {
    auto transaction = ledger.begin();
    transaction.data().sandboxes.push_back(full_record());
    transaction.commit();
  }
  const SandboxRecord summary = ledger.read(ReadScope::summary).sandboxes.at(0);
  SandboxRecord expected = full_record();
  expected.history.clear();
  expected.spec = json::object();
  expected.info = json::object();
  expected.env.clear();
  expected.secret_refs = json::object();
  EXPECT_EQ(as_json(summary), as_json(expected));
  EXPECT_EQ(ledger.read().sandboxes.at(0).history.size(), 4u) << "a whole read keeps history";
}

// Brackets, quotes and backslashes inside the skipped strings must not end the skip early.
TEST(LedgerFile, SummaryReadStepsOverTrickyStrings) {
  TempDir dir;
  Ledger ledger(dir / "state", 1s);
  {
    auto transaction = ledger.begin();
    SandboxRecord r = small_record("sbx-aaaaaaaaaaaa", "a", State::running);
    r.transition(EventKind::updated, State::running, r.created_at, "t", "ends in a backslash \\",
                 {{"text", "]} \" \\\" [{"}, {"deep", {{{"x", {1, {2, {3}}}}}}}});
    r.spec = {{"tricky", "\\\\\""}};
    r.error = "after the skipped parts";
    transaction.data().sandboxes.push_back(r);
    transaction.data().sandboxes.push_back(small_record("sbx-bbbbbbbbbbbb", "b", State::orphaned));
    transaction.commit();
  }
  const LedgerData data = ledger.read(ReadScope::summary);
  ASSERT_EQ(data.sandboxes.size(), 2u);
  EXPECT_EQ(data.sandboxes[0].error, "after the skipped parts");
  EXPECT_EQ(data.sandboxes[1].id, "sbx-bbbbbbbbbbbb");
  EXPECT_EQ(data.sandboxes[1].state, State::orphaned);
}

TEST(LedgerFile, ScanVisitsEveryRecordInOrder) {
  TempDir dir;
  Ledger ledger(dir / "state", 1s);
  {
    auto transaction = ledger.begin();
    for (const char* id : {"sbx-aaaaaaaaaaaa", "sbx-bbbbbbbbbbbb", "sbx-cccccccccccc"}) {
      transaction.data().sandboxes.push_back(small_record(id, id, State::running));
    }
    transaction.commit();
  }
  std::vector<std::string> seen;
  ledger.scan(ReadScope::whole, [&](SandboxRecord& r) {
    EXPECT_EQ(r.history.size(), 1u);
    seen.push_back(std::move(r.id));
  });
  EXPECT_EQ(seen,
            (std::vector<std::string>{"sbx-aaaaaaaaaaaa", "sbx-bbbbbbbbbbbb", "sbx-cccccccccccc"}));
}

TEST(LedgerFile, TwoSandboxListsAreRefused) {
  TempDir dir;
  Ledger ledger(dir / "state", 1s);
  std::filesystem::create_directories(dir / "state");
  write_file(ledger_file(ledger),
             R"({"schema_version":1,"ledger_id":"l","sandboxes":[],"sandboxes":[]})");
  EXPECT_NE(error_of([&] { ledger.read(); }).find("\"sandboxes\" appears twice"),
            std::string::npos);
}

TEST(LedgerFile, SummaryReadStillRefusesABrokenRecord) {
  TempDir dir;
  Ledger ledger(dir / "state", 1s);
  {
    auto transaction = ledger.begin();
    transaction.data().sandboxes.push_back(full_record());
    transaction.commit();
  }
  std::string text = read_file(ledger_file(ledger));
  // Unbalance the history array, which a summary read skips over.
  const size_t history = text.find("\"history\":[");
  ASSERT_NE(history, std::string::npos);
  text.erase(history + 10, 1);
  write_file(ledger_file(ledger), text);
  EXPECT_NE(error_of([&] { ledger.read(ReadScope::summary); }).find("is corrupt"),
            std::string::npos);
}

// Damaged files (flipped, inserted and dropped bytes, truncation) are refused with a LedgerError,
// or read if still valid; never a crash, a hang or another exception.
TEST(LedgerFile, DamagedFilesAreRefusedCleanly) {
  TempDir dir;
  Ledger ledger(dir / "state", 1s);
  {
    auto transaction = ledger.begin();
    transaction.data().sandboxes = {full_record(), full_record()};
    transaction.commit();
  }
  const std::string good = read_file(ledger_file(ledger));
  std::mt19937 random(1234);
  const std::string alphabet = "{}[]\":,\\ntfu0123456789.-eE \xc3\xa9\x80\xff\x01";
  int refused = 0;
  for (int round = 0; round < 2000; ++round) {
    std::string text = good;
    const int edits = 1 + static_cast<int>(random() % 3);
    for (int e = 0; e < edits; ++e) {
      const size_t pos = random() % text.size();
      switch (random() % 4) {
      case 0:
        text[pos] = alphabet[random() % alphabet.size()];
        break;
      case 1:
        text.insert(pos, 1, alphabet[random() % alphabet.size()]);
        break;
      case 2:
        text.erase(pos, 1 + random() % 8);
        break;
      default:
        text.resize(pos);
      }
      if (text.empty()) {
        break;
      }
    }
    // Unlinked first: ext4 flushes a file truncated and rewritten in place, which is slow.
    std::filesystem::remove(ledger_file(ledger));
    write_file(ledger_file(ledger), text);
    try {
      ledger.read();
    } catch (const LedgerError& e) {
      ++refused;
      EXPECT_TRUE(std::string(e.what()).find("it was left untouched") != std::string::npos ||
                  std::string(e.what()).find("newer than this sandboxer") != std::string::npos)
          << e.what();
    }
  }
  EXPECT_GT(refused, 1000);
}

// A writer killed at random instants leaves, every time, a ledger that reads and that is one of
// the states it committed, never a torn one.
TEST(LedgerCrash, KilledWriterLeavesOldOrNewLedger) {
  TempDir dir;
  const auto state_dir = dir / "state";
  Ledger ledger(state_dir, 5s);
  {
    auto transaction = ledger.begin();
    for (int i = 0; i < 300; ++i) {
      transaction.data().sandboxes.push_back(full_record());
      transaction.data().sandboxes.back().id = new_sandbox_id();
    }
    transaction.data().sandboxes[0].labels["generation"] = "0";
    transaction.commit();
  }
  // Generation g has 300 + g records, the last one named gen-g.
  auto generation_of = [](const LedgerData& data) {
    const int generation = std::stoi(data.sandboxes.at(0).labels.at("generation"));
    EXPECT_EQ(data.sandboxes.size(), 300u + generation);
    if (generation > 0) {
      EXPECT_EQ(data.sandboxes.back().name, "gen-" + std::to_string(generation));
    }
    return generation;
  };

  // Kill instants spread over a few of the writer's iterations, however fast this build is.
  const auto start = std::chrono::steady_clock::now();
  ledger.begin().commit();
  const auto iteration = std::chrono::duration_cast<std::chrono::microseconds>(
      std::chrono::steady_clock::now() - start);
  const unsigned seed = std::random_device()();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 random(seed);
  std::uniform_int_distribution<long> delay_us(iteration.count(), 5 * iteration.count() + 1000);
  int last = 0;
  // A loaded machine (a parallel test run) may start the forked writer slower than one
  // iteration here: until it has committed once, each round waits longer.
  long slack_us = 0;
  for (int round = 0; round < 20; ++round) {
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      try {
        Ledger writer(state_dir, 5s);
        while (true) {
          auto transaction = writer.begin();
          auto& records = transaction.data().sandboxes;
          const int next = std::stoi(records[0].labels.at("generation")) + 1;
          records[0].labels["generation"] = std::to_string(next);
          records.push_back(
              small_record(new_sandbox_id(), "gen-" + std::to_string(next), State::running));
          transaction.commit();
        }
      } catch (...) {
      }
      ::_exit(3);
    }
    std::this_thread::sleep_for(std::chrono::microseconds(delay_us(random) + slack_us));
    ::kill(child, SIGKILL);
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFSIGNALED(status)) << "the writer stopped by itself, status " << status;

    const LedgerData data = ledger.read();
    const int generation = generation_of(data);
    EXPECT_GE(generation, last) << "round " << round;
    last = generation;
    if (last == 0) {
      slack_us = 2 * slack_us + 5 * iteration.count() + 1000;
    }
    // The backup is a whole earlier state too.
    if (std::filesystem::exists(state_dir / "ledger.json.bak")) {
      write_file(dir / "backup" / "ledger.json", read_file(state_dir / "ledger.json.bak"));
      EXPECT_LE(generation_of(Ledger(dir / "backup", 5s).read()), generation);
    }
  }
  EXPECT_GT(last, 0) << "the writer never committed: the test proved nothing";
  // The lock died with the writer, and the next commit clears the temporary files it left.
  auto transaction = ledger.begin();
  transaction.commit();
  for (const auto& entry : std::filesystem::directory_iterator(state_dir)) {
    EXPECT_EQ(entry.path().filename().string().find(".tmp."), std::string::npos) << entry.path();
  }
}

// ---------------------------------------------------------------------------------------------
// Clock

TEST(ClockFormat, Rfc3339Utc) {
  using namespace std::chrono;
  EXPECT_EQ(format_time(sys_days{2026y / December / 2} + 11h + 51min + 32s),
            "2026-12-02T11:51:32Z");
  EXPECT_EQ(format_time(TimePoint{}), "1970-01-01T00:00:00Z");
  EXPECT_EQ(format_time(sys_days{2024y / February / 29} + 23h + 59min + 59s),
            "2024-02-29T23:59:59Z");
}

TEST(ClockParse, RoundTrips) {
  for (const char* text : {"2026-12-02T11:51:32Z", "1970-01-01T00:00:00Z", "2024-02-29T23:59:59Z",
                           "2099-12-31T23:59:59Z", "2000-01-01T00:00:00Z"}) {
    const auto t = parse_time(text);
    ASSERT_TRUE(t) << text;
    EXPECT_EQ(format_time(*t), text);
  }
}

TEST(ClockParse, OffsetsAndFractions) {
  const TimePoint utc = at("2026-12-02T11:51:32Z");
  EXPECT_EQ(parse_time("2026-12-02T13:51:32+02:00"), utc);
  EXPECT_EQ(parse_time("2026-12-02T06:21:32-05:30"), utc);
  EXPECT_EQ(parse_time("2026-12-02T11:51:32+00:00"), utc);
  EXPECT_EQ(parse_time("2026-12-02T11:51:32.999999Z"), utc);
  EXPECT_EQ(parse_time("2026-12-02T13:51:32.5+02:00"), utc);
  EXPECT_EQ(parse_time("2026-12-02t11:51:32z"), utc);
  EXPECT_EQ(parse_time("2026-12-03T00:30:00+01:00"), at("2026-12-02T23:30:00Z"));
}

TEST(ClockParse, RejectsGarbage) {
  for (const char* text :
       {"", "now", "2026-12-02", "2026-12-02T11:51:32", "2026-12-02T11:51Z", "2026-13-01T00:00:00Z",
        "2026-02-30T00:00:00Z", "2026-12-02T24:00:00Z", "2026-12-02T11:60:00Z",
        "2026-12-02T11:51:32+0200", "2026-12-02T11:51:32+24:00", "2026-12-02T11:51:32Zjunk",
        "2026-12-02T11:51:32.Z", " 2026-12-02T11:51:32Z", "26-12-02T11:51:32Z",
        "2026-12-02X11:51:32Z", "1764676292"}) {
    EXPECT_EQ(parse_time(text), std::nullopt) << "\"" << text << "\"";
  }
}

// Issue 13: a deadline past year 9999 was written as "'),.-12-24T06:34:00Z" and every later read
// of the ledger failed. The formatter refuses what the reader would refuse.
TEST(ClockFormat, RefusesYearsOutside0000To9999) {
  using namespace std::chrono;
  EXPECT_EQ(format_time(sys_days{year(9999) / December / 31} + 23h + 59min + 59s),
            "9999-12-31T23:59:59Z");
  EXPECT_EQ(format_time(sys_days{year(0) / January / 1}), "0000-01-01T00:00:00Z");
  for (TimePoint t : {TimePoint(sys_days{year(10000) / January / 1}),
                      TimePoint(sys_days{year(-1) / December / 31}),
                      TimePoint(seconds(std::numeric_limits<seconds::rep>::max() / 2))}) {
    EXPECT_FALSE(representable(t));
    try {
      format_time(t);
      ADD_FAILURE() << "an unwritable time was formatted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("outside the years 0000-9999"), std::string::npos);
    }
  }
}

TEST(ClockParse, RefusesWhatCannotBeWrittenBack) {
  EXPECT_EQ(parse_time("9999-12-31T23:59:60Z"), std::nullopt);
  EXPECT_EQ(parse_time("9999-12-31T23:30:00-01:00"), std::nullopt);
  EXPECT_EQ(parse_time("0000-01-01T00:30:00+01:00"), std::nullopt);
  EXPECT_EQ(format_time(*parse_time("9999-12-31T23:59:59Z")), "9999-12-31T23:59:59Z");
}

TEST(ClockArithmetic, AddCheckedStaysWritable) {
  const TimePoint now = at("2026-12-02T11:51:32Z");
  EXPECT_EQ(add_checked(now, std::chrono::seconds(60)), at("2026-12-02T11:52:32Z"));
  EXPECT_EQ(add_checked(now, k_max_duration), at("2126-11-08T11:51:32Z"));
  EXPECT_EQ(add_checked(at("9990-01-01T00:00:00Z"), k_max_duration), std::nullopt);
  EXPECT_EQ(add_checked(now, std::chrono::seconds(std::numeric_limits<std::int64_t>::max())),
            std::nullopt);
  EXPECT_EQ(add_checked(TimePoint(std::chrono::seconds(std::numeric_limits<std::int64_t>::max())),
                        std::chrono::seconds(1)),
            std::nullopt);
}

// A record whose deadline cannot be written makes the commit fail cleanly: the ledger on disk is
// the previous one, readable.
TEST(LedgerCommit, UnwritableTimeLeavesTheLedgerAsItWas) {
  TempDir dir;
  Ledger ledger(dir / "state", 1s);
  {
    auto tx = ledger.begin();
    tx.data().sandboxes.push_back(small_record("sbx-aaaaaaaaaaaa", "ok", State::running));
    tx.commit();
  }
  {
    auto tx = ledger.begin();
    SandboxRecord bad = small_record("sbx-bbbbbbbbbbbb", "bad", State::running);
    bad.expires_at = TimePoint(std::chrono::sys_days{std::chrono::year(12000) / 1 / 1});
    tx.data().sandboxes.push_back(bad);
    EXPECT_THROW(tx.commit(), Error);
  }
  LedgerData data = ledger.read();
  ASSERT_EQ(data.sandboxes.size(), 1u);
  EXPECT_EQ(data.sandboxes[0].id, "sbx-aaaaaaaaaaaa");
}

TEST(ClockSystem, FakeNowFromTheEnvironment) {
  ScopedEnv env;
  allow_fake_now();
  env.set("SANDBOXER_FAKE_NOW", "2030-01-02T03:04:05Z");
  const Clock& clock = system_clock();
  EXPECT_EQ(&clock, &system_clock());
  EXPECT_EQ(clock.now(), at("2030-01-02T03:04:05Z"));
  // Read at every call.
  env.set("SANDBOXER_FAKE_NOW", "2030-01-02T05:04:05+02:00");
  EXPECT_EQ(clock.now(), at("2030-01-02T03:04:05Z"));
  env.set("SANDBOXER_FAKE_NOW", "yesterday");
  try {
    clock.now();
    ADD_FAILURE() << "a bad SANDBOXER_FAKE_NOW was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::usage);
    EXPECT_NE(std::string(e.what()).find("SANDBOXER_FAKE_NOW='yesterday'"), std::string::npos)
        << e.what();
  }
}

TEST(ClockSystem, RealTimeInWholeSeconds) {
  ScopedEnv env;
  env.set("SANDBOXER_FAKE_NOW", nullptr);
  const auto before = std::chrono::floor<std::chrono::seconds>(std::chrono::system_clock::now());
  const TimePoint now = system_clock().now();
  const auto after = std::chrono::system_clock::now();
  EXPECT_LE(before, now);
  EXPECT_LE(now, after);
}

// ---------------------------------------------------------------------------------------------
// Owner

constexpr const char* k_ci_variables[] = {
    "CI",
    "CI_JOB_ID",
    "CI_PIPELINE_ID",
    "CI_PROJECT_PATH",
    "GITHUB_RUN_ID",
    "GITHUB_RUN_ATTEMPT",
    "GITHUB_REPOSITORY",
    "GITHUB_WORKFLOW",
    "GITHUB_JOB",
    "BUILD_ID",
    "BUILD_URL",
    "JOB_NAME",
    "BUILDKITE_BUILD_ID",
    "CIRCLE_WORKFLOW_ID",
};

// Starts from an environment without CI variables, since the tests may well run in CI.
class OwnerTest : public ::testing::Test {
protected:
  void SetUp() override {
    for (const char* name : k_ci_variables) {
      m_env.set(name, nullptr);
    }
  }
  ScopedEnv m_env;
};

TEST_F(OwnerTest, UserHostPid) {
  m_env.set("USER", "alice-test");
  const Owner owner = current_owner();
  EXPECT_EQ(owner.user, "alice-test");
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  EXPECT_EQ(owner.host, host);
  EXPECT_EQ(owner.pid, ::getpid());
  EXPECT_TRUE(owner.ci.empty());
}

TEST_F(OwnerTest, UserFromPasswdWithoutUserVariable) {
  m_env.set("USER", nullptr);
  EXPECT_FALSE(current_owner().user.empty());
  m_env.set("USER", "");
  EXPECT_FALSE(current_owner().user.empty());
}

TEST_F(OwnerTest, CiVariablesThatAreSetAndNotEmpty) {
  m_env.set("CI", "true");
  m_env.set("GITHUB_RUN_ID", "42");
  m_env.set("GITHUB_REPOSITORY", "org/repo");
  m_env.set("CI_JOB_ID", "");
  m_env.set("NOT_A_CI_VARIABLE", "x");
  const Owner owner = current_owner();
  EXPECT_EQ(owner.ci,
            (std::map<std::string, std::string>{
                {"CI", "true"}, {"GITHUB_RUN_ID", "42"}, {"GITHUB_REPOSITORY", "org/repo"}}));
}

TEST_F(OwnerTest, EveryDocumentedVariableIsRecorded) {
  for (const char* name : k_ci_variables) {
    m_env.set(name, (std::string("v-") + name).c_str());
  }
  const Owner owner = current_owner();
  ASSERT_EQ(owner.ci.size(), std::size(k_ci_variables));
  for (const char* name : k_ci_variables) {
    EXPECT_EQ(owner.ci.at(name), std::string("v-") + name);
  }
}

TEST(OwnerDescribe, WithAndWithoutCiJob) {
  Owner owner{"alice", "build-7", 4242, {}};
  EXPECT_EQ(describe(owner), "alice@build-7 pid 4242");
  owner.ci = {{"CI", "true"}};
  EXPECT_EQ(describe(owner), "alice@build-7 pid 4242");
  owner.ci["GITHUB_RUN_ID"] = "42";
  EXPECT_EQ(describe(owner), "alice@build-7 pid 4242 ci GITHUB_RUN_ID=42");
  owner.ci["CI_JOB_ID"] = "977";
  EXPECT_EQ(describe(owner), "alice@build-7 pid 4242 ci CI_JOB_ID=977");
}

} // namespace
} // namespace sandboxer
