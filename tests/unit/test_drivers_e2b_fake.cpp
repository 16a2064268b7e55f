// The e2b driver against tests/fake_e2b/server.py, a local server that follows E2B's spec: every
// call goes over real HTTP through libcurl, and the fake checks where the key travels.
#include <algorithm>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <map>
#include <set>
#include <sys/stat.h>
#include <thread>

#include <sandboxer/error.hpp>
#include <sandboxer/http.hpp>
#include <sandboxer/tar.hpp>

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

TEST_F(E2bFakeTest, ASandboxE2bPausedAtItsDeadlineIsResumedByExecWithOnExpiryPause) {
  auto driver = open({{"on_expiry", "pause"}});
  auto sandbox = create(*driver, "sbx-pause");
  fake.control("advance", {{"seconds", 31 * 60 + 1}});
  EXPECT_EQ(driver->status(sandbox).state, BackendStatus::State::paused);
  CollectIo io;
  EXPECT_EQ(driver->exec(sandbox, {.argv = {"echo", "back"}}, io), 0);
  EXPECT_EQ(io.stdout_text, "back\n");
  EXPECT_EQ(driver->status(sandbox).state, BackendStatus::State::running);
}

// --- sandboxer pause / resume -------------------------------------------------------------------

// What `pid` is doing, from /proc: 'T' stopped, 'Z' a zombie, 'S'/'R' running, '?' gone.
char e2b_process_state(const std::string& pid) {
  std::string stat;
  try {
    stat = testing::read_file("/proc/" + pid + "/stat");
  } catch (...) {
    return '?';
  }
  auto close = stat.rfind(')');
  return close == std::string::npos || close + 2 >= stat.size() ? '?' : stat[close + 2];
}

class E2bPauseTest : public E2bFakeTest {
protected:
  // A file written before the pause and a counter that ticks every 0.1 s in the background, both
  // in the test's directory (the fake's commands run on this machine).
  void start_ticking(Driver& driver, const SandboxHandle& sandbox) {
    box = dir / "box";
    std::filesystem::create_directories(box);
    CollectIo io;
    const std::string script =
        "echo kept > state.txt; echo kept > \"$1/state.txt\"; "
        "(i=0; while :; do i=$((i+1)); echo $i > \"$1/ticks.new\"; mv \"$1/ticks.new\" "
        "\"$1/ticks\"; sleep 0.1; done) </dev/null >/dev/null 2>&1 & echo $! > \"$1/pid\"";
    ASSERT_EQ(driver.exec(sandbox, {.argv = {"sh", "-c", script, "sh", box.string()}}, io), 0)
        << io.stderr_text;
    pid = testing::read_file(box / "pid");
    pid.erase(pid.find_last_not_of("\n") + 1);
    ASSERT_TRUE(wait_for_ticks(2));
  }
  long ticks() {
    try {
      return std::stol(testing::read_file(box / "ticks"));
    } catch (...) {
      return 0;
    }
  }
  bool wait_for_ticks(long at_least) {
    for (int i = 0; i < 50; ++i) {
      if (ticks() >= at_least) {
        return true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return false;
  }
  // What the core does with a pause's or resume's info: merged into the record's.
  static void merge(SandboxHandle& sandbox, const json& info) { sandbox.info.update(info); }
  int count(const std::string& request_line) {
    auto requests = fake.requests();
    return static_cast<int>(std::count(requests.begin(), requests.end(), request_line));
  }

  std::filesystem::path box;
  std::string pid;
};

TEST_F(E2bPauseTest, PauseWithMemoryFreezesTheProcessesAndResumeGoesOn) {
  auto driver = open();
  EXPECT_TRUE(testing::builtin_catalog().find("e2b").capabilities().pause);
  EXPECT_FALSE(testing::builtin_catalog().find("e2b").capabilities().pause_emulated);
  auto sandbox = create(*driver, "sbx-pause-mem");
  start_ticking(*driver, sandbox);

  auto paused = driver->pause(sandbox, {.pause_id = "pse-aaaaaaaaaaaa", .memory = true});
  EXPECT_TRUE(paused.memory_kept);
  EXPECT_EQ(paused.how, "e2b");
  EXPECT_EQ(paused.info, json({{"e2b_pause_id", "pse-aaaaaaaaaaaa"}}));
  merge(sandbox, paused.info);
  EXPECT_EQ(driver->status(sandbox).state, BackendStatus::State::paused);
  EXPECT_EQ(fake.control("sandboxes")[sandbox.backend_id]["pausedWithMemory"], true);
  EXPECT_EQ(e2b_process_state(pid), 'T') << "the process is stopped, not gone";
  long frozen = ticks();
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  EXPECT_LE(ticks() - frozen, 1) << "the counter went on while paused";

  // A repeat (reap's repair, or a lost answer) is a success: E2B's 409, then its state.
  auto again = driver->pause(sandbox, {.pause_id = "pse-aaaaaaaaaaaa", .memory = true});
  EXPECT_TRUE(again.memory_kept);
  EXPECT_EQ(count("POST /sandboxes/" + sandbox.backend_id + "/pause -> 409"), 1);
  EXPECT_EQ(fake.control("sandboxes")[sandbox.backend_id]["pauses"], 1);

  // exec and cp never resume it behind the ledger's back.
  CollectIo io;
  try {
    driver->exec(sandbox, {.argv = {"true"}}, io);
    FAIL() << "exec in a paused sandbox";
  } catch (const DriverError& e) {
    EXPECT_EQ(e.kind(), DriverError::Kind::conflict);
    EXPECT_NE(std::string(e.what()).find("is paused: 'sandboxer resume sbx-pause-mem' resumes it"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(driver->stat_path(sandbox, box.string()), DriverError);
  EXPECT_EQ(driver->status(sandbox).state, BackendStatus::State::paused);
  try {
    driver->snapshot(sandbox, {.snapshot_id = "snp-x", .name = "snap", .paused = true});
    FAIL() << "a snapshot of a paused sandbox";
  } catch (const DriverError& e) {
    EXPECT_EQ(e.kind(), DriverError::Kind::unsupported);
  }

  auto resumed = driver->resume(
      sandbox, {.pause_id = "pse-aaaaaaaaaaaa", .expires_at = clock.now() + std::chrono::hours(1)});
  EXPECT_FALSE(resumed.backend_id) << "the same sandbox";
  EXPECT_FALSE(resumed.ports) << "the same URLs";
  EXPECT_TRUE(resumed.info.contains("e2b_pause_id") && resumed.info["e2b_pause_id"].is_null());
  merge(sandbox, resumed.info);
  EXPECT_EQ(driver->status(sandbox).state, BackendStatus::State::running);
  json remote = fake.control("sandboxes")[sandbox.backend_id];
  EXPECT_NEAR(remote["endAt"].get<double>() - fake.control("now")["now"].get<double>(), 3600 + 60,
              5)
      << "E2B's timeout is the running deadline plus the grace";
  EXPECT_EQ(count("POST /sandboxes/" + sandbox.backend_id + "/connect -> 201"), 1);
  EXPECT_TRUE(wait_for_ticks(frozen + 3)) << "the same process counts on";
  EXPECT_NE(e2b_process_state(pid), 'T');

  // Resuming a running sandbox changes nothing.
  driver->resume(
      sandbox, {.pause_id = "pse-aaaaaaaaaaaa", .expires_at = clock.now() + std::chrono::hours(1)});
  EXPECT_EQ(count("POST /sandboxes/" + sandbox.backend_id + "/connect -> 200"), 1);
  EXPECT_EQ(fake.control("sandboxes")[sandbox.backend_id]["resumes"], 1);
  for (const auto& line : fake.requests()) {
    EXPECT_EQ(line.find("/resume"), std::string::npos) << "the deprecated /resume: " << line;
  }

  CollectIo cat;
  EXPECT_EQ(driver->exec(sandbox, {.argv = {"cat", "state.txt"}}, cat), 0);
  EXPECT_EQ(cat.stdout_text, "kept\n");
  driver->destroy(sandbox);
  for (int i = 0; i < 50 && e2b_process_state(pid) != '?' && e2b_process_state(pid) != 'Z'; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_TRUE(e2b_process_state(pid) == '?' || e2b_process_state(pid) == 'Z')
      << "killing the sandbox kills its processes";
}

TEST_F(E2bPauseTest, PauseWithoutMemoryKeepsTheFilesOnly) {
  auto driver = open();
  auto sandbox = create(*driver, "sbx-pause-disk");
  start_ticking(*driver, sandbox);
  auto paused = driver->pause(sandbox, {.pause_id = "pse-bbbbbbbbbbbb", .memory = false});
  EXPECT_FALSE(paused.memory_kept);
  merge(sandbox, paused.info);
  EXPECT_EQ(fake.control("sandboxes")[sandbox.backend_id]["pausedWithMemory"], false);
  for (int i = 0; i < 50 && e2b_process_state(pid) != '?' && e2b_process_state(pid) != 'Z'; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_TRUE(e2b_process_state(pid) == '?' || e2b_process_state(pid) == 'Z')
      << "a pause without memory ends the processes";
  merge(sandbox, driver
                     ->resume(sandbox, {.pause_id = "pse-bbbbbbbbbbbb",
                                        .expires_at = clock.now() + std::chrono::minutes(30)})
                     .info);
  CollectIo cat;
  EXPECT_EQ(driver->exec(sandbox, {.argv = {"cat", "state.txt"}}, cat), 0);
  EXPECT_EQ(cat.stdout_text, "kept\n") << "the files survive";
  // No memory asked for either way: E2B's default, a pause that keeps it.
  auto by_default = driver->pause(sandbox, {.pause_id = "pse-cccccccccccc"});
  EXPECT_TRUE(by_default.memory_kept);
  EXPECT_EQ(fake.control("sandboxes")[sandbox.backend_id]["pausedWithMemory"], true);
}

TEST_F(E2bPauseTest, ASandboxThatVanishedIsNotFound) {
  auto driver = open();
  auto sandbox = create(*driver, "sbx-pause-gone");
  merge(sandbox, driver->pause(sandbox, {.pause_id = "pse-dddddddddddd"}).info);
  fake.control("vanish", {{"id", sandbox.backend_id}});
  EXPECT_EQ(driver->status(sandbox).state, BackendStatus::State::missing);
  for (const auto& verb : {"pause", "resume"}) {
    try {
      if (std::string(verb) == "pause") {
        driver->pause(sandbox, {.pause_id = "pse-dddddddddddd"});
      } else {
        driver->resume(sandbox, {.pause_id = "pse-dddddddddddd",
                                 .expires_at = clock.now() + std::chrono::minutes(30)});
      }
      FAIL() << verb << " of a vanished sandbox";
    } catch (const DriverError& e) {
      EXPECT_EQ(e.kind(), DriverError::Kind::not_found) << verb << ": " << e.what();
      EXPECT_NE(std::string(e.what()).find("is gone"), std::string::npos) << e.what();
    }
  }
}

TEST_F(E2bPauseTest, ExecNeverResumesAPausedSandboxWithoutOnExpiryPause) {
  auto driver = open();
  auto sandbox = create(*driver, "sbx-paused-elsewhere");
  // Paused by somebody else (the dashboard, an SDK): no mark of ours in the record.
  http::Request request;
  request.method = "POST";
  request.url = fake.url() + "/sandboxes/" + sandbox.backend_id + "/pause";
  request.headers = {{"X-API-KEY", k_key}};
  ASSERT_EQ(http::curl_transport().send(request).status, 204);
  CollectIo io;
  try {
    driver->exec(sandbox, {.argv = {"true"}}, io);
    FAIL() << "exec resumed a paused sandbox";
  } catch (const DriverError& e) {
    EXPECT_EQ(e.kind(), DriverError::Kind::conflict);
  }
  EXPECT_EQ(driver->status(sandbox).state, BackendStatus::State::paused);
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

// --- sandboxer cp: envd's /files for contents, commands for the rest --------------------------

// A tar stream served in uneven pieces, as the core's packer hands it over.
class E2bPiecesSource : public CopySource {
public:
  explicit E2bPiecesSource(std::string stream) : m_stream(std::move(stream)) {}
  size_t read(char* buffer, size_t size) override {
    size_t take = std::min({size, m_stream.size() - m_at, size_t{7001}});
    std::copy_n(m_stream.data() + m_at, take, buffer);
    m_at += take;
    return take;
  }

private:
  std::string m_stream;
  size_t m_at = 0;
};

class E2bStringSink : public CopySink {
public:
  void write(std::string_view bytes) override { stream.append(bytes); }
  std::string stream;
};

// One entry of a stream as a user would compare it: type, mode, time, content or link target.
struct E2bCopiedEntry {
  tar::Type type = tar::Type::file;
  uint32_t mode = 0;
  int64_t mtime = 0;
  std::string content;
  std::string link;
  bool operator==(const E2bCopiedEntry&) const = default;
};
using E2bCopiedTree = std::map<std::string, E2bCopiedEntry>;

std::string e2b_tar_of(const E2bCopiedTree& tree) {
  std::string stream;
  tar::Writer writer([&](std::string_view bytes) { stream.append(bytes); });
  for (const auto& [path, item] : tree) {
    tar::Entry entry{.path = path, .type = item.type, .mode = item.mode, .mtime = item.mtime};
    entry.size = item.type == tar::Type::file ? item.content.size() : 0;
    entry.link = item.link;
    writer.begin(entry);
    if (item.type == tar::Type::file) {
      writer.data(item.content);
    }
    writer.end();
  }
  writer.finish();
  return stream;
}

E2bCopiedTree e2b_tree_of(const std::string& stream) {
  struct Collect : tar::Sink {
    E2bCopiedTree tree;
    std::string current;
    void begin(const tar::Entry& entry) override {
      current = entry.path;
      tree[current] = {entry.type, entry.mode, entry.mtime, "", entry.link};
    }
    void data(std::string_view chunk) override { tree[current].content.append(chunk); }
    void end() override {}
  } collect;
  tar::Reader reader(collect);
  reader.feed(stream);
  reader.finish();
  return collect.tree;
}

std::string e2b_all_byte_values() {
  std::string bytes;
  for (int i = 0; i < 256; ++i) {
    bytes += static_cast<char>(i);
  }
  return bytes;
}

// 50 MiB that no two parts share (an offset mix-up in the composed file would show).
std::string e2b_big_content() {
  std::string bytes(50u << 20, '\0');
  uint64_t x = 0x9e3779b97f4a7c15ULL;
  for (auto& c : bytes) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    c = static_cast<char>(x);
  }
  return bytes;
}

struct stat e2b_stat_of(const std::filesystem::path& path) {
  struct stat st {};
  EXPECT_EQ(lstat(path.c_str(), &st), 0) << path;
  return st;
}

// The tree of the copy tests: every kind of entry the driver makes, under "d".
E2bCopiedTree e2b_sample_tree(bool with_big) {
  const int64_t t = 1700000000;
  E2bCopiedTree tree;
  tree["d"] = {tar::Type::directory, 0750, t + 1, "", ""};
  tree["d/all-bytes"] = {tar::Type::file, 0644, t + 2, e2b_all_byte_values(), ""};
  tree["d/empty"] = {tar::Type::file, 0600, t + 3, "", ""};
  tree["d/empty-dir"] = {tar::Type::directory, 0700, t + 4, "", ""};
  tree["d/run.sh"] = {tar::Type::file, 0755, t + 5, "#!/bin/sh\necho hi\n", ""};
  tree["d/name with spaces \xc3\xbc\xe2\x82\xac.txt"] = {tar::Type::file, 0644, t + 6, "utf-8\n",
                                                         ""};
  tree["d/link"] = {tar::Type::symlink, 0777, t + 7, "", "all-bytes"};
  if (with_big) {
    tree["d/big"] = {tar::Type::file, 0640, t + 8, e2b_big_content(), ""};
  }
  return tree;
}

TEST_F(E2bFakeTest, CopyInMakesFilesLinksModesAndTimesAndCopyOutGivesThemBack) {
  auto driver = open();
  auto sandbox = create(*driver, "sbx-cp");
  auto box = dir / "box"; // the fake's commands and files share this machine's filesystem
  std::filesystem::create_directories(box);
  E2bCopiedTree tree = e2b_sample_tree(true);

  auto started = std::chrono::steady_clock::now();
  E2bPiecesSource source(e2b_tar_of(tree));
  driver->copy_in(sandbox, {.directory = box.string()}, source);
  auto copied_in = std::chrono::steady_clock::now();

  EXPECT_EQ(testing::read_file(box / "d/all-bytes"), e2b_all_byte_values());
  // Compared whole, not printed: a 50 MiB difference would drown the log.
  EXPECT_TRUE(testing::read_file(box / "d/big") == tree["d/big"].content)
      << "the 50 MiB file differs";
  EXPECT_EQ(std::filesystem::file_size(box / "d/empty"), 0u);
  EXPECT_TRUE(std::filesystem::is_directory(box / "d/empty-dir"));
  EXPECT_TRUE(std::filesystem::is_empty(box / "d/empty-dir"));
  EXPECT_EQ(testing::read_file(box / "d/name with spaces \xc3\xbc\xe2\x82\xac.txt"), "utf-8\n");
  EXPECT_EQ(std::filesystem::read_symlink(box / "d/link"), "all-bytes");
  EXPECT_EQ(e2b_stat_of(box / "d/run.sh").st_mode & 07777, 0755u) << "the exec bit is kept";
  EXPECT_EQ(e2b_stat_of(box / "d/empty").st_mode & 07777, 0600u);
  EXPECT_EQ(e2b_stat_of(box / "d").st_mode & 07777, 0750u);
  EXPECT_EQ(e2b_stat_of(box / "d/empty-dir").st_mode & 07777, 0700u);
  for (const auto& [path, item] : tree) {
    EXPECT_EQ(e2b_stat_of(box / path).st_mtim.tv_sec, item.mtime) << path;
  }
  for (const auto& entry : std::filesystem::directory_iterator(box / "d")) {
    EXPECT_EQ(entry.path().filename().string().find(".sandboxer-part-"), std::string::npos)
        << "a part of the big file was left behind";
  }

  E2bStringSink sink;
  driver->copy_out(sandbox, {.path = (box / "d").string()}, sink);
  auto copied_out = std::chrono::steady_clock::now();
  E2bCopiedTree back = e2b_tree_of(sink.stream);
  EXPECT_EQ(back.size(), tree.size());
  for (const auto& [path, item] : tree) {
    ASSERT_TRUE(back.contains(path)) << path;
    EXPECT_TRUE(back[path] == item) << path << " differs after the round trip";
  }
  using ms = std::chrono::milliseconds;
  std::printf(
      "e2b copy of 50 MiB + 6 entries: in %lld ms, out %lld ms\n",
      static_cast<long long>(std::chrono::duration_cast<ms>(copied_in - started).count()),
      static_cast<long long>(std::chrono::duration_cast<ms>(copied_out - copied_in).count()));
}

TEST_F(E2bFakeTest, CopyInReplacesSameNamedFilesAndLinks) {
  auto driver = open();
  auto sandbox = create(*driver, "sbx-cp-replace");
  auto box = dir / "box";
  testing::write_file(box / "d/all-bytes", "a much longer old content that must not survive\n");
  std::filesystem::create_symlink("elsewhere", box / "d/link");
  E2bPiecesSource source(e2b_tar_of(e2b_sample_tree(false)));
  driver->copy_in(sandbox, {.directory = box.string()}, source);
  EXPECT_EQ(testing::read_file(box / "d/all-bytes"), e2b_all_byte_values());
  EXPECT_EQ(std::filesystem::read_symlink(box / "d/link"), "all-bytes");
}

TEST_F(E2bFakeTest, StatPathFollowsLinksAndTellsMissingFromDangling) {
  auto driver = open();
  auto sandbox = create(*driver, "sbx-stat");
  auto box = dir / "box";
  testing::write_file(box / "file", "12345");
  std::filesystem::permissions(box / "file", std::filesystem::perms(0750));
  std::filesystem::create_symlink("file", box / "to-file");
  std::filesystem::create_symlink("nowhere", box / "dangling");
  auto file = driver->stat_path(sandbox, (box / "file").string());
  EXPECT_EQ(file.kind, PathInfo::Kind::file);
  EXPECT_EQ(file.size, 5u);
  EXPECT_EQ(file.mode, 0750u);
  EXPECT_EQ(driver->stat_path(sandbox, (box / "to-file").string()).kind, PathInfo::Kind::file);
  EXPECT_EQ(driver->stat_path(sandbox, box.string()).kind, PathInfo::Kind::directory);
  auto dangling = driver->stat_path(sandbox, (box / "dangling").string());
  EXPECT_EQ(dangling.kind, PathInfo::Kind::symlink);
  EXPECT_EQ(dangling.link_target, "nowhere");
  EXPECT_EQ(driver->stat_path(sandbox, (box / "missing").string()).kind, PathInfo::Kind::missing);
}

TEST_F(E2bFakeTest, CopyOutOfAFileALinkAndAMissingPath) {
  auto driver = open();
  auto sandbox = create(*driver, "sbx-cp-out");
  auto box = dir / "box";
  testing::write_file(box / "one file.txt", e2b_all_byte_values());
  std::filesystem::create_symlink("one file.txt", box / "link");

  E2bStringSink file;
  driver->copy_out(sandbox, {.path = (box / "one file.txt").string()}, file);
  auto tree = e2b_tree_of(file.stream);
  ASSERT_EQ(tree.size(), 1u);
  EXPECT_EQ(tree["one file.txt"].content, e2b_all_byte_values()) << "under its base name";

  E2bStringSink link;
  driver->copy_out(sandbox, {.path = (box / "link").string()}, link);
  EXPECT_EQ(e2b_tree_of(link.stream)["link"].type, tar::Type::symlink) << "a link stays a link";
  E2bStringSink followed;
  driver->copy_out(sandbox, {.path = (box / "link").string(), .follow = true}, followed);
  EXPECT_EQ(e2b_tree_of(followed.stream)["link"].content, e2b_all_byte_values()) << "--follow";

  E2bStringSink missing;
  try {
    driver->copy_out(sandbox, {.path = (box / "missing").string()}, missing);
    FAIL() << "a missing path is an error";
  } catch (const DriverError& e) {
    EXPECT_EQ(e.kind(), DriverError::Kind::not_found);
    EXPECT_NE(std::string(e.what()).find((box / "missing").string()), std::string::npos);
  }
  EXPECT_TRUE(missing.stream.empty());
}

TEST_F(E2bFakeTest, CopyInReportsEnvdsOwnWordsWhenTheDiskIsFull) {
  auto driver = open();
  auto sandbox = create(*driver, "sbx-cp-full");
  auto box = dir / "box";
  std::filesystem::create_directories(box);
  fake.control("inject", {{"status", 507},
                          {"count", 1},
                          {"method", "POST"},
                          {"path", "/files"},
                          {"message", "not enough disk space available"}});
  E2bPiecesSource source(e2b_tar_of(e2b_sample_tree(false)));
  try {
    driver->copy_in(sandbox, {.directory = box.string()}, source);
    FAIL() << "a full disk is an error";
  } catch (const DriverError& e) {
    EXPECT_NE(std::string(e.what()).find("not enough disk space available (code 507) (HTTP 507)"),
              std::string::npos)
        << e.what();
  }
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
