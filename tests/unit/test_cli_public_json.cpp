#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli/commands/output.hpp"

namespace sandboxer::commands {
namespace {

using json = nlohmann::json;

TimePoint at(const char* text) {
  return parse_time(text).value();
}

SandboxRecord record() {
  SandboxRecord r;
  r.id = "sbx-abcdefgh2345";
  r.name = "web \"1\"";
  r.profile = {"ci", "/p/ci.yaml", "sha256:00"};
  r.driver = "stub";
  r.backend_id = "b-1";
  r.spec = {{"never", "printed"}};
  r.env = {{"NOT", "printed"}};
  r.created_at = at("2026-12-02T11:00:00Z");
  r.expires_at = at("2026-12-02T12:00:00Z");
  r.labels = {{"team", "infra"}};
  r.owner = {"alice", "build-7", 42, {{"CI_JOB_ID", "7"}}};
  r.transition(EventKind::created, State::creating, r.created_at, "alice", "create");
  r.transition(EventKind::ready, State::running, at("2026-12-02T11:00:02Z"), "alice", "created",
               {{"duration_ms", 2000}});
  r.snapshots.push_back({"snp-aaaaaaaaaaaa", "s1", "ref", 10, at("2026-12-02T11:30:00Z")});
  r.idempotency_key = "k";
  return r;
}

// The fields of docs/json-output.md, and nothing from the ledger that is not public.
TEST(PublicJson, RecordHasTheDocumentedFields) {
  const json expected = {
      {"id", "sbx-abcdefgh2345"},
      {"name", "web \"1\""},
      {"state", "running"},
      {"driver", "stub"},
      {"backend_id", "b-1"},
      {"profile", {{"name", "ci"}, {"path", "/p/ci.yaml"}, {"hash", "sha256:00"}}},
      {"created_at", "2026-12-02T11:00:00Z"},
      {"expires_at", "2026-12-02T12:00:00Z"},
      {"max_expires_at", nullptr},
      {"seconds_left", 1800},
      {"ports", nlohmann::json::array()},
      {"labels", {{"team", "infra"}}},
      {"owner",
       {{"user", "alice"}, {"host", "build-7"}, {"pid", 42}, {"ci", {{"CI_JOB_ID", "7"}}}}},
      {"snapshots",
       {{{"id", "snp-aaaaaaaaaaaa"},
         {"name", "s1"},
         {"sandbox", "sbx-abcdefgh2345"},
         {"driver", "stub"},
         {"backend_ref", "ref"},
         {"size_bytes", 10},
         {"created_at", "2026-12-02T11:30:00Z"}}}},
      {"idempotency_key", "k"},
      {"restored_from", nullptr},
      {"error", nullptr}};
  EXPECT_EQ(public_json(record(), at("2026-12-02T11:30:00Z"), false), expected);
}

TEST(PublicJson, HistoryOnRequest) {
  const json j = public_json(record(), at("2026-12-02T11:30:00Z"), true);
  ASSERT_EQ(j.at("history").size(), 2u);
  EXPECT_EQ(j.at("history").at(0), json({{"time", "2026-12-02T11:00:00Z"},
                                         {"from", nullptr},
                                         {"to", "creating"},
                                         {"actor", "alice"},
                                         {"reason", "create"},
                                         {"details", json::object()},
                                         {"event", "created"},
                                         {"event_id", ""},
                                         {"prev", ""}}));
  EXPECT_EQ(j.at("history").at(1).at("details"), json({{"duration_ms", 2000}}));
}

// `list` prints the text form; `status` and `create` print the document. They must agree to the
// byte, as a script may diff them.
TEST(PublicJson, TextIsWhatTheDocumentDumps) {
  for (bool with_history : {false, true}) {
    std::string text;
    write_public_json(text, record(), at("2026-12-02T12:30:00Z"), with_history);
    EXPECT_EQ(text, public_json(record(), at("2026-12-02T12:30:00Z"), with_history).dump());
  }
}

TEST(PublicJson, NoDeadlineIsNull) {
  SandboxRecord r = record();
  r.expires_at.reset();
  const json j = public_json(r, at("2026-12-02T11:30:00Z"), false);
  EXPECT_TRUE(j.at("expires_at").is_null());
  EXPECT_TRUE(j.at("seconds_left").is_null());
}

} // namespace
} // namespace sandboxer::commands
