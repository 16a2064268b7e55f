// The e2b driver against tests/fake_e2b/server.py, a local server that follows E2B's spec: every
// call goes over real HTTP through libcurl, and the fake checks where the key travels.
#include <algorithm>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <set>

#include <sandboxer/error.hpp>
#include <sandboxer/http.hpp>

#include "support/catalog.hpp"
#include "support/collect_io.hpp"
#include "support/fake_clock.hpp"
#include "support/local_server.hpp"
#include "support/temp_dir.hpp"

namespace sandboxer {
namespace {

using nlohmann::json;

const std::string k_key = "e2b_5f3c0d9a8b7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a";

// The fake, started per test on a port the kernel picks.
class FakeE2b {
public:
  explicit FakeE2b(const testing::TempDir& dir)
      : m_server(std::string(SANDBOXER_SOURCE_DIR) + "/tests/fake_e2b/server.py",
                 {"--key-file", key_file(dir)}),
        m_url(fmt::format("http://127.0.0.1:{}", m_server.port())) {}

  const std::string& url() const { return m_url; }

  json control(const std::string& what, const json& body = nullptr) {
    http::Request request;
    request.method = body.is_null() ? "GET" : "POST";
    request.url = m_url + "/_control/" + what;
    if (!body.is_null()) {
      request.body = body.dump();
    }
    auto response = http::curl_transport().send(request);
    return response.body.empty() ? json() : json::parse(response.body);
  }
  // Every request the fake saw, as "METHOD path -> status".
  std::vector<std::string> requests() {
    std::vector<std::string> lines;
    for (const auto& r : control("requests")) {
      if (!r["path"].get<std::string>().starts_with("/_control/")) {
        lines.push_back(fmt::format("{} {} -> {}", r["method"].get<std::string>(),
                                    r["path"].get<std::string>(), r["status"].dump()));
      }
    }
    return lines;
  }

private:
  static std::string key_file(const testing::TempDir& dir) {
    testing::write_file(dir / "key", k_key + "\n");
    return (dir / "key").string();
  }

  testing::LocalServer m_server;
  std::string m_url;
};

using testing::CollectIo;

class E2bFakeTest : public ::testing::Test {
protected:
  void TearDown() override {
    EXPECT_EQ(fake.control("violations"), json::array()) << "the key travelled where it must not";
  }

  std::unique_ptr<Driver> open(json section = json::object(), std::string key = k_key) {
    section["api_url"] = fake.url();
    section["envd_url"] = fake.url();
    const auto& factory = testing::builtin_catalog().find("e2b");
    DriverContext context;
    context.data_dir = dir.path();
    context.clock = &clock;
    context.secrets["api_key"] = key;
    return factory.open(factory.parse_spec(section), context);
  }

  SandboxHandle create(Driver& driver, const std::string& id, Labels labels = {}) {
    labels["sandboxer.id"] = id;
    CreateRequest request{.sandbox_id = id, .name = id, .labels = labels};
    request.expires_at = clock.now() + std::chrono::minutes(30);
    auto result = driver.create(request);
    return {id, result.backend_id, json::object(), result.info};
  }

  testing::TempDir dir;
  FakeE2b fake{dir};
  testing::FakeClock clock{
      std::chrono::floor<std::chrono::seconds>(std::chrono::system_clock::now())};
};

TEST_F(E2bFakeTest, CreateSendsTheTimeoutMetadataAndEnvTheSpecAsksFor) {
  auto driver = open({{"template", "base"},
                      {"on_expiry", "pause"},
                      {"env", {{"A", "1"}}},
                      {"metadata", {{"team", "infra"}}},
                      {"internet_access", false}});
  auto sandbox = create(*driver, "sbx-one", {{"sandboxer.ledger", "led-1"}});
  json remote = fake.control("sandboxes")[sandbox.backend_id];
  EXPECT_EQ(remote["timeout"], 30 * 60 + 60) << "ledger TTL plus one minute of grace";
  EXPECT_EQ(remote["autoPause"], true);
  EXPECT_EQ(remote["allowInternetAccess"], false);
  EXPECT_EQ(remote["metadata"]["sandboxer.id"], "sbx-one");
  EXPECT_EQ(remote["metadata"]["sandboxer.ledger"], "led-1");
  EXPECT_EQ(remote["metadata"]["team"], "infra");
  EXPECT_EQ(remote["envVars"]["A"], "1");
  EXPECT_FALSE(sandbox.info.dump().find("ea_") != std::string::npos) << "no envd token in info";
  EXPECT_EQ(driver->status(sandbox).state, BackendStatus::State::running);
}

TEST_F(E2bFakeTest, ExecSeparatesStdoutStderrAndExitCode) {
  auto driver = open({{"env", {{"FROM_SPEC", "spec"}}}});
  auto sandbox = create(*driver, "sbx-exec");
  CollectIo io;
  ExecRequest request{.argv = {"sh", "-c", "echo out $FROM_SPEC $FROM_EXEC; echo err >&2; exit 3"}};
  request.env = {{"FROM_EXEC", "exec"}};
  EXPECT_EQ(driver->exec(sandbox, request, io), 3);
  EXPECT_EQ(io.stdout_text, "out spec exec\n");
  EXPECT_EQ(io.stderr_text, "err\n");
  CollectIo ok;
  EXPECT_EQ(driver->exec(sandbox, {.argv = {"true"}}, ok), 0) << "a zero exit code is omitted";
  CollectIo killed;
  EXPECT_EQ(driver->exec(sandbox, {.argv = {"sh", "-c", "kill -9 $$"}}, killed), 137);
}

TEST_F(E2bFakeTest, StatusFollowsPauseAndExecResumesAPausedSandbox) {
  auto driver = open({{"on_expiry", "pause"}});
  auto sandbox = create(*driver, "sbx-pause");
  fake.control("advance", {{"seconds", 31 * 60 + 1}});
  EXPECT_EQ(driver->status(sandbox).state, BackendStatus::State::paused);
  CollectIo io;
  EXPECT_EQ(driver->exec(sandbox, {.argv = {"echo", "back"}}, io), 0);
  EXPECT_EQ(io.stdout_text, "back\n");
  EXPECT_EQ(driver->status(sandbox).state, BackendStatus::State::running);
}

TEST_F(E2bFakeTest, ExtendMovesTheFakesDeadlineAndDestroyIsIdempotent) {
  auto driver = open();
  auto sandbox = create(*driver, "sbx-ext");
  double before = fake.control("sandboxes")[sandbox.backend_id]["endAt"];
  driver->extend(sandbox, clock.now() + std::chrono::hours(2));
  double after = fake.control("sandboxes")[sandbox.backend_id]["endAt"];
  EXPECT_NEAR(after - before, 90 * 60, 5);
  driver->destroy(sandbox);
  EXPECT_EQ(driver->status(sandbox).state, BackendStatus::State::missing);
  try {
    driver->destroy(sandbox);
    FAIL();
  } catch (const DriverError& e) {
    EXPECT_EQ(e.kind(), DriverError::Kind::not_found);
  }
  EXPECT_THROW(driver->extend(sandbox, clock.now() + std::chrono::hours(1)), DriverError);
  CollectIo io;
  try {
    driver->exec(sandbox, {.argv = {"true"}}, io);
    FAIL();
  } catch (const DriverError& e) {
    EXPECT_EQ(e.kind(), DriverError::Kind::not_found);
  }
}

TEST_F(E2bFakeTest, ATimeoutBeyondThePlanIsATtlCap) {
  auto driver = open();
  fake.control("max_timeout", {{"seconds", 3600}});
  CreateRequest request{.sandbox_id = "sbx-long"};
  request.expires_at = clock.now() + std::chrono::hours(5);
  try {
    driver->create(request);
    FAIL();
  } catch (const DriverError& e) {
    EXPECT_EQ(e.kind(), DriverError::Kind::refused);
    EXPECT_EQ(e.code(), ExitCode::policy);
    EXPECT_NE(std::string(e.what()).find("Timeout cannot be greater than 1 hours (code 400)"),
              std::string::npos)
        << e.what();
  }
}

TEST_F(E2bFakeTest, ListRemoteFiltersByMetadataAcrossPages) {
  auto driver = open();
  for (int i = 0; i < 103; ++i) {
    create(*driver, fmt::format("sbx-{:03}", i), {{"sandboxer.ledger", "mine"}});
  }
  create(*driver, "sbx-other", {{"sandboxer.ledger", "theirs"}});
  auto found = driver->list_remote({{"sandboxer.ledger", "mine"}});
  EXPECT_EQ(found.size(), 103u);
  std::set<std::string> ids;
  for (const auto& resource : found) {
    EXPECT_EQ(resource.labels.at("sandboxer.ledger"), "mine");
    ids.insert(resource.labels.at("sandboxer.id"));
  }
  EXPECT_EQ(ids.size(), 103u) << "no sandbox twice across pages";
  auto requests = fake.requests();
  EXPECT_EQ(std::count_if(requests.begin(), requests.end(),
                          [](const auto& r) { return r.starts_with("GET /v2/sandboxes"); }),
            2);
  EXPECT_EQ(driver->list_remote({{"sandboxer.ledger", "nobody"}}).size(), 0u);
}

TEST_F(E2bFakeTest, TransientErrorsAreRetriedOnlyWhereRepeatingIsSafe) {
  auto driver = open();
  auto sandbox = create(*driver, "sbx-retry");
  fake.control("inject",
               {{"status", 503}, {"count", 2}, {"method", "GET"}, {"path", "/sandboxes"}});
  EXPECT_EQ(driver->status(sandbox).state, BackendStatus::State::running);
  fake.control("inject",
               {{"status", 503}, {"count", 1}, {"method", "POST"}, {"path", "/sandboxes"}});
  EXPECT_THROW(create(*driver, "sbx-not-retried"), DriverError);
  auto requests = fake.requests();
  EXPECT_EQ(std::count(requests.begin(), requests.end(),
                       "GET /sandboxes/" + sandbox.backend_id + " -> 503"),
            2);
  EXPECT_EQ(std::count(requests.begin(), requests.end(), "POST /sandboxes -> 503"), 1);
  EXPECT_EQ(requests.back(), "POST /sandboxes -> 503") << "create was not repeated";
}

TEST_F(E2bFakeTest, RateLimitsAreWaitedOutEvenForCreate) {
  auto driver = open();
  fake.control("inject", {{"status", 429}, {"count", 1}, {"method", "POST"}, {"retry_after", 1}});
  auto started = std::chrono::steady_clock::now();
  auto sandbox = create(*driver, "sbx-429");
  EXPECT_GE(std::chrono::steady_clock::now() - started, std::chrono::milliseconds(900));
  EXPECT_FALSE(sandbox.backend_id.empty());
  // RateLimit-Reset (seconds until the window resets) is honoured the same way.
  fake.control("inject",
               {{"status", 429}, {"count", 1}, {"method", "GET"}, {"ratelimit_reset", 2}});
  started = std::chrono::steady_clock::now();
  EXPECT_EQ(driver->status(sandbox).state, BackendStatus::State::running);
  EXPECT_GE(std::chrono::steady_clock::now() - started, std::chrono::milliseconds(1900));
  // With no retries left, the 429 itself is reported.
  auto impatient = open({{"retries", 0}});
  fake.control("inject", {{"status", 429}, {"count", 1}, {"method", "GET"}, {"retry_after", 1}});
  try {
    impatient->status(sandbox);
    FAIL();
  } catch (const DriverError& e) {
    EXPECT_NE(std::string(e.what()).find("(HTTP 429); rate limited"), std::string::npos)
        << e.what();
  }
}

TEST_F(E2bFakeTest, AWrongKeyIsAOneLineAuthError) {
  auto driver = open(json::object(), "e2b_00000000000000000000000000000000deadbeef");
  try {
    create(*driver, "sbx-auth");
    FAIL();
  } catch (const DriverError& e) {
    EXPECT_EQ(e.kind(), DriverError::Kind::auth);
    EXPECT_EQ(std::string(e.what()),
              "E2B create sandbox from template base: Invalid API key (code 401) (HTTP 401); "
              "check the key that secrets.api_key points at");
  }
}

TEST_F(E2bFakeTest, SnapshotsBecomeTemplatesThatCarryTheFiles) {
  auto driver = open();
  auto sandbox = create(*driver, "sbx-snap");
  CollectIo io;
  ASSERT_EQ(driver->exec(sandbox, {.argv = {"sh", "-c", "echo kept > state.txt"}}, io), 0);
  auto snapshot = driver->snapshot(sandbox, {"snp-test", "snap-1"});
  EXPECT_EQ(snapshot.backend_ref, "sbx-snap-snap-1:default");
  CreateRequest request{.sandbox_id = "sbx-restored", .from_snapshot = snapshot.backend_ref};
  request.expires_at = clock.now() + std::chrono::minutes(10);
  SandboxHandle restored{"sbx-restored", driver->create(request).backend_id, {}, {}};
  CollectIo cat;
  EXPECT_EQ(driver->exec(restored, {.argv = {"cat", "state.txt"}}, cat), 0);
  EXPECT_EQ(cat.stdout_text, "kept\n");
  driver->delete_snapshot(snapshot.backend_ref);
  EXPECT_EQ(fake.control("templates"), json::array({"base"}));
}

TEST_F(E2bFakeTest, AMissingKeyFailsBeforeAnyRequest) {
  const auto& factory = testing::builtin_catalog().find("e2b");
  DriverContext context;
  context.clock = &clock;
  try {
    factory.open(factory.parse_spec({{"api_url", fake.url()}}), context);
    FAIL();
  } catch (const DriverError& e) {
    EXPECT_EQ(e.code(), ExitCode::usage);
    EXPECT_NE(std::string(e.what()).find("secrets: {api_key: {env: E2B_API_KEY}}"),
              std::string::npos);
  }
  EXPECT_TRUE(fake.requests().empty());
}

} // namespace
} // namespace sandboxer

namespace sandboxer {
namespace {

// The fake's own check must be able to fail, or the tests above prove nothing about the key.
TEST(E2bFakeServer, RecordsTheKeyAnywhereButItsHeader) {
  testing::TempDir dir;
  FakeE2b fake(dir);
  http::Request request;
  request.url = fake.url() + "/v2/sandboxes?token=" + k_key;
  request.headers = {{"X-API-KEY", k_key}, {"Authorization", "Bearer " + k_key}};
  http::curl_transport().send(request);
  request.url = fake.url() + "/sandboxes";
  request.method = "POST";
  request.headers = {};
  request.body = R"({"templateID": "base", "note": ")" + k_key + "\"}";
  EXPECT_EQ(http::curl_transport().send(request).status, 401);
  auto violations = fake.control("violations");
  ASSERT_EQ(violations.size(), 4u) << violations.dump();
  EXPECT_NE(violations[0].get<std::string>().find("in the URL"), std::string::npos);
  EXPECT_NE(violations[1].get<std::string>().find("in header Authorization"), std::string::npos);
  EXPECT_NE(violations[2].get<std::string>().find("in the body"), std::string::npos);
  EXPECT_NE(violations[3].get<std::string>().find("no X-API-KEY"), std::string::npos);
}

} // namespace
} // namespace sandboxer
