// The modal driver's parts that need no server: its spec, the server URL rules, the token checks
// done before the gRPC module is loaded, and how Modal's log items become lines; then pause and
// resume against tests/fake_modal (the rest of the driver against it is tests/e2e/test_modal*.sh).
#include <climits>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sandboxer/error.hpp>

#include "drivers/modal/log_lines.hpp"
#include "drivers/modal/modal_factory.hpp"
#include "drivers/modal/spec.hpp"
#include "support/collect_io.hpp"
#include "support/fake_clock.hpp"
#include "support/temp_dir.hpp"

namespace sandboxer::drivers::modal {
namespace {

using nlohmann::json;

std::string error_of(const json& section) {
  try {
    parse_spec(section);
  } catch (const SpecError& e) {
    return e.pointer() + ": " + e.what();
  }
  return "accepted";
}

TEST(ModalSpec, FillsDefaultsAndRoundTrips) {
  Spec spec = parse_spec({{"image", "debian:12"}});
  EXPECT_EQ(spec.app, "sandboxer");
  EXPECT_EQ(spec.network, "blocked"); // open network is the user's explicit choice
  EXPECT_EQ(spec.command, (std::vector<std::string>{"sleep", "infinity"}));
  EXPECT_FALSE(spec.timeout);
  EXPECT_EQ(spec.snapshot_ttl, std::chrono::seconds(30 * 86400));
  EXPECT_EQ(spec.attempts, 3);
  json stored = to_json(spec);
  EXPECT_EQ(to_json(parse_spec(stored)), stored);
}

TEST(ModalSpec, ReadsEveryField) {
  Spec spec = parse_spec({{"image", "im-abc"},
                          {"app", "ci"},
                          {"environment", "dev"},
                          {"cpu", 0.5},
                          {"memory", "2g"},
                          {"timeout", "2h"},
                          {"idle_timeout", "10m"},
                          {"workdir", "/app"},
                          {"command", {"sleep", "3600"}},
                          {"network", {"10.0.0.0/8"}},
                          {"tags", {{"team", "infra"}}},
                          {"server_url", "http://127.0.0.1:5000/"},
                          {"snapshot_ttl", "never"},
                          {"legacy_exec", true},
                          {"attempts", 5}});
  EXPECT_EQ(*spec.milli_cpu, 500);
  EXPECT_EQ(*spec.memory_mb, 2048);
  EXPECT_EQ(*spec.timeout, std::chrono::hours(2));
  EXPECT_EQ(*spec.idle_timeout, std::chrono::minutes(10));
  EXPECT_EQ(spec.network, "allowlist");
  EXPECT_EQ(spec.allowed_cidrs, std::vector<std::string>{"10.0.0.0/8"});
  EXPECT_EQ(*spec.server_url, "http://127.0.0.1:5000");
  EXPECT_FALSE(spec.snapshot_ttl);
  EXPECT_TRUE(is_image_id(spec.image));
  EXPECT_FALSE(is_image_id("debian:12"));
  json stored = to_json(spec);
  EXPECT_EQ(to_json(parse_spec(stored)), stored);
  EXPECT_EQ(stored["network"], json::array({"10.0.0.0/8"}));
}

TEST(ModalSpec, RefusesWhatModalWouldNot) {
  EXPECT_EQ(error_of({{"image", "x"}, {"imag", "y"}}).substr(0, 6), "/imag:");
  EXPECT_EQ(error_of(json::object()).substr(0, 7), "/image:");
  EXPECT_EQ(error_of({{"image", "x"}, {"timeout", "25h"}}),
            "/timeout: Modal allows at most 24h, not 1d1h");
  EXPECT_EQ(error_of({{"image", "x"}, {"timeout", "1500ms"}}),
            "/timeout: Modal counts this in whole seconds (write 90s, 15m, 2h)");
  EXPECT_EQ(error_of({{"image", "x"}, {"cpu", 0}}),
            "/cpu: expected a number of cores from 0.125 to 64 (0.5, 2)");
  EXPECT_EQ(error_of({{"image", "x"}, {"memory", "12"}}),
            "/memory: expected a size such as 512m or 4g (or a number of MiB)");
  EXPECT_EQ(error_of({{"image", "x"}, {"workdir", "app"}}),
            "/workdir: expected an absolute path inside the sandbox (/app)");
  EXPECT_EQ(error_of({{"image", "x"}, {"network", "wide"}}),
            "/network: expected blocked, open or a list of CIDRs, not wide");
  EXPECT_EQ(error_of({{"image", "x"}, {"tags", {{"sandboxer.id", "x"}}}}),
            "/tags/sandboxer.id: the \"sandboxer.\" prefix is reserved for the tags sandboxer "
            "sets");
  // A token must never travel in clear beyond this machine.
  EXPECT_EQ(error_of({{"image", "x"}, {"server_url", "http://api.modal.com"}}),
            "/server_url: server_url http://api.modal.com: plain http is allowed only to a "
            "loopback address (a local test server); use https:// so the token is encrypted");
  EXPECT_EQ(error_of({{"image", "x"}, {"server_url", "https://api.modal.com"}}), "accepted");
}

TEST(ModalSpec, ServerUrlFromTheEnvironmentIsCheckedToo) {
  Spec spec = parse_spec({{"image", "x"}});
  ::setenv("MODAL_SERVER_URL", "http://10.1.2.3:443", 1);
  EXPECT_THROW(resolve_server_url(spec), DriverError);
  ::setenv("MODAL_SERVER_URL", "http://127.0.0.1:9/", 1);
  EXPECT_EQ(resolve_server_url(spec), "http://127.0.0.1:9");
  ::unsetenv("MODAL_SERVER_URL");
  EXPECT_EQ(resolve_server_url(spec), "https://api.modal.com:443");
}

TEST(ModalFactory, ChecksTheTokenWithoutShowingIt) {
  const DriverFactory& factory = modal_factory();
  EXPECT_EQ(factory.name(), "modal");
  EXPECT_TRUE(factory.capabilities().snapshot);
  EXPECT_TRUE(factory.capabilities().list_by_label);
  EXPECT_TRUE(factory.capabilities().logs);
  json spec = factory.parse_spec({{"image", "x"}, {"server_url", "http://127.0.0.1:9"}});
  DriverContext context;
  try {
    factory.open(spec, context);
    FAIL() << "opened without a token";
  } catch (const DriverError& e) {
    EXPECT_EQ(e.kind(), DriverError::Kind::invalid_spec);
    EXPECT_NE(std::string(e.what()).find("secrets: {token_id"), std::string::npos);
  }
  context.secrets = {{"token_id", "ak-0123456789"}, {"token_secret", "wrong secret value"}};
  try {
    factory.open(spec, context);
    FAIL() << "opened with a malformed secret";
  } catch (const DriverError& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("secrets.token_secret does not look like a Modal token secret"),
              std::string::npos)
        << what;
    EXPECT_EQ(what.find("wrong secret value"), std::string::npos);
  }
}

// 2026-12-06T20:00:01Z and a quarter, in Modal's two forms.
constexpr std::uint64_t k_ns = 1796587201250000000ULL;
const TimePoint k_second = *parse_time("2026-12-06T20:00:01Z");

LogChunk chunk(std::string data, std::uint64_t ns = k_ns, int fd = k_fd_stdout) {
  return {fd, std::move(data), ns, 0};
}

std::vector<std::string> texts(const std::vector<TimedLine>& lines) {
  std::vector<std::string> out;
  for (const auto& timed : lines) {
    out.push_back(timed.line.stream + ":" + timed.line.text);
  }
  return out;
}

TEST(ModalLogs, DescriptorsAreStreams) {
  EXPECT_EQ(stream_of(k_fd_stdout, k_fd_stdout), "stdout");
  EXPECT_EQ(stream_of(k_fd_stderr, k_fd_stdout), "stderr");
  // An item that names no descriptor is of the stream it came on.
  EXPECT_EQ(stream_of(k_fd_unspecified, k_fd_stderr), "stderr");
  // FILE_DESCRIPTOR_INFO: Modal's own messages, not the sandbox's output.
  EXPECT_EQ(stream_of(3, k_fd_stdout), std::nullopt);
}

TEST(ModalLogs, TimeFromNanosecondsElseSeconds) {
  EXPECT_EQ(nanos_of(chunk("x")), static_cast<std::int64_t>(k_ns));
  EXPECT_EQ(nanos_of({k_fd_stdout, "x", 0, 1796587201.25}), static_cast<std::int64_t>(k_ns));
  EXPECT_EQ(nanos_of({k_fd_stdout, "x", 0, 0}), std::nullopt);
}

TEST(ModalLogs, ChunksAreCutIntoLines) {
  LineCutter cutter;
  // A chunk with two lines and the start of a third; the third ends in the next chunk.
  auto first = cutter.feed("stdout", chunk("one\ntwo\r\nthr"));
  EXPECT_EQ(texts(first), (std::vector<std::string>{"stdout:one", "stdout:two"}));
  ASSERT_TRUE(first[0].line.time);
  EXPECT_EQ(*first[0].line.time, k_second); // to the second
  EXPECT_EQ(first[0].nanos, static_cast<std::int64_t>(k_ns));
  // Another stream's chunk in between does not mix with it.
  EXPECT_EQ(texts(cutter.feed("stderr", chunk("oops\n", k_ns + 5, k_fd_stderr))),
            std::vector<std::string>{"stderr:oops"});
  auto later = cutter.feed("stdout", chunk("ee\n\nfour", k_ns + 2'000'000'000));
  EXPECT_EQ(texts(later), (std::vector<std::string>{"stdout:three", "stdout:"}));
  // A line has the time of the chunk it began in.
  EXPECT_EQ(later[0].nanos, static_cast<std::int64_t>(k_ns));
  EXPECT_EQ(later[1].nanos, static_cast<std::int64_t>(k_ns) + 2'000'000'000);
  // What did not end with a newline comes out at the end, once.
  EXPECT_EQ(texts(cutter.flush()), std::vector<std::string>{"stdout:four"});
  EXPECT_TRUE(cutter.flush().empty());
  // A chunk without a time: the stream's last one.
  auto untimed = cutter.feed("stdout", chunk("five\n", 0));
  EXPECT_EQ(untimed[0].nanos, static_cast<std::int64_t>(k_ns) + 2'000'000'000);
  LineCutter fresh;
  EXPECT_FALSE(fresh.feed("stdout", chunk("six\n", 0))[0].line.time);
}

TEST(ModalLogs, StreamsMergeByTimeThenSinceAndTail) {
  LineCutter cutter;
  std::vector<TimedLine> lines = cutter.feed("stdout", chunk("a\n", k_ns));
  for (auto& line : cutter.feed("stdout", chunk("c\n", k_ns + 3'000'000'000))) {
    lines.push_back(line);
  }
  for (auto& line : cutter.feed("stderr", chunk("b\n", k_ns + 1'000'000'000, k_fd_stderr))) {
    lines.push_back(line);
  }
  auto text_of = [](const std::vector<LogLine>& merged) {
    std::string out;
    for (const auto& line : merged) {
      out += line.text;
    }
    return out;
  };
  EXPECT_EQ(text_of(merge_lines(lines, {})), "abc");
  EXPECT_EQ(text_of(merge_lines(lines, {.tail = 1})), "c");
  EXPECT_EQ(text_of(merge_lines(lines, {.since = k_second + std::chrono::seconds(1)})), "bc");
  EXPECT_EQ(text_of(merge_lines(lines, {.since = k_second + std::chrono::hours(1)})), "");
}

// --- pause and resume against tests/fake_modal ------------------------------------------------

// The fake's binary: $SANDBOXER_FAKE_MODAL (as the e2e tests get it), else next to this test
// binary, where tests/CMakeLists.txt builds it.
std::string modal_fake_binary() {
  if (const char* path = std::getenv("SANDBOXER_FAKE_MODAL"); path && *path) {
    return path;
  }
  char self[PATH_MAX] = {};
  ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) {
    return "";
  }
  auto candidate = std::filesystem::path(std::string(self, static_cast<size_t>(n))).parent_path() /
                   "sandboxer-fake-modal";
  return std::filesystem::exists(candidate) ? candidate.string() : "";
}

// sandboxer-fake-modal on a loopback port, with its state (and calls.jsonl) in `state_dir`.
class ModalFakeServer {
public:
  ModalFakeServer(const std::string& binary, const std::filesystem::path& state_dir)
      : m_state_dir(state_dir) {
    int out[2];
    if (::pipe(out) != 0) {
      std::abort();
    }
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
    posix_spawn_file_actions_addclose(&actions, out[0]);
    std::vector<std::string> words = {binary, "--state-dir", state_dir.string()};
    std::vector<char*> argv;
    for (auto& word : words) {
      argv.push_back(word.data());
    }
    argv.push_back(nullptr);
    std::vector<std::string> env_words = {"FAKE_MODAL_TOKEN_ID=" + token_id,
                                          "FAKE_MODAL_TOKEN_SECRET=" + token_secret};
    for (char** e = ::environ; *e; ++e) {
      env_words.emplace_back(*e);
    }
    std::vector<char*> envp;
    for (auto& word : env_words) {
      envp.push_back(word.data());
    }
    envp.push_back(nullptr);
    if (::posix_spawn(&m_pid, binary.c_str(), &actions, nullptr, argv.data(), envp.data()) != 0) {
      std::abort();
    }
    posix_spawn_file_actions_destroy(&actions);
    ::close(out[1]);
    FILE* stream = ::fdopen(out[0], "r");
    char line[64] = {};
    if (!std::fgets(line, sizeof line, stream) || std::strncmp(line, "PORT=", 5) != 0) {
      ADD_FAILURE() << binary << " did not print its port";
    } else {
      m_port = std::atoi(line + 5);
    }
    std::fclose(stream);
  }
  ~ModalFakeServer() {
    ::kill(m_pid, SIGTERM);
    int status = 0;
    ::waitpid(m_pid, &status, 0);
  }
  ModalFakeServer(const ModalFakeServer&) = delete;
  ModalFakeServer& operator=(const ModalFakeServer&) = delete;

  std::string url() const { return "http://127.0.0.1:" + std::to_string(m_port); }
  // The calls of `rpc` the fake logged, in order.
  std::vector<json> calls(const std::string& rpc) const {
    std::vector<json> found;
    std::ifstream in(m_state_dir / "calls.jsonl");
    for (std::string line; std::getline(in, line);) {
      auto call = json::parse(line, nullptr, false);
      if (call.is_object() && call.value("rpc", "") == rpc) {
        found.push_back(call);
      }
    }
    return found;
  }

  const std::string token_id = "ak-0123456789abcdef";
  const std::string token_secret = "as-0123456789abcdef0123";

private:
  std::filesystem::path m_state_dir;
  pid_t m_pid = -1;
  int m_port = 0;
};

class ModalQuietProgress : public Progress {
public:
  void update(std::string_view) override {}
};

class ModalPauseTest : public ::testing::Test {
protected:
  void SetUp() override {
    const std::string binary = modal_fake_binary();
    if (binary.empty()) {
      GTEST_SKIP() << "the fake Modal server was not built (sandboxer-fake-modal)";
    }
    std::filesystem::create_directories(dir / "fake");
    fake = std::make_unique<ModalFakeServer>(binary, dir / "fake");
    const DriverFactory& factory = modal_factory();
    json spec = factory.parse_spec({{"image", "debian:12"},
                                    {"server_url", fake->url()},
                                    {"timeout", "2h"},
                                    {"call_timeout", "5s"}});
    context.data_dir = dir.path();
    context.clock = &clock;
    context.progress = &progress;
    context.secrets = {{"token_id", fake->token_id}, {"token_secret", fake->token_secret}};
    context.location = factory.location(spec, context);
    driver = factory.open(spec, context);
  }

  SandboxHandle create(const std::string& id) {
    CreateRequest request{.sandbox_id = id, .name = id, .labels = {{"sandboxer.id", id}}};
    request.expires_at = clock.now() + std::chrono::minutes(30);
    request.ports = {PortSpec{.port = 8080}};
    auto made = driver->create(request);
    return {id, made.backend_id, json::object(), made.info};
  }

  static DriverError::Kind kind_of(const std::function<void()>& call) {
    try {
      call();
    } catch (const DriverError& e) {
      return e.kind();
    }
    ADD_FAILURE() << "no DriverError";
    return DriverError::Kind::error;
  }

  testing::TempDir dir;
  testing::FakeClock clock{
      std::chrono::floor<std::chrono::seconds>(std::chrono::system_clock::now())};
  ModalQuietProgress progress;
  DriverContext context;
  std::unique_ptr<ModalFakeServer> fake;
  std::unique_ptr<Driver> driver;
};

TEST_F(ModalPauseTest, PauseIsASnapshotAndTheEndOfTheSandboxResumeMakesANewOne) {
  EXPECT_TRUE(modal_factory().capabilities().pause);
  EXPECT_TRUE(modal_factory().capabilities().pause_emulated);
  auto sandbox = create("sbx-modal-pause");
  const std::string first = sandbox.backend_id;
  testing::CollectIo io;
  ASSERT_EQ(driver->exec(sandbox, {.argv = {"sh", "-c", "echo kept > state.txt"}}, io), 0)
      << io.stderr_text;

  // Processes cannot be kept: refused before anything is done.
  try {
    driver->pause(sandbox, {.pause_id = "pse-modal000001", .memory = true});
    FAIL() << "memory: true accepted";
  } catch (const DriverError& e) {
    EXPECT_EQ(e.kind(), DriverError::Kind::refused);
    EXPECT_EQ(e.code(), ExitCode::policy);
    EXPECT_NE(std::string(e.what()).find("modal cannot keep memory; set pause: {memory: false}"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(driver->status(sandbox).state, BackendStatus::State::running);
  EXPECT_TRUE(fake->calls("TaskSnapshotFilesystem").empty());

  auto paused = driver->pause(sandbox, {.pause_id = "pse-modal000001", .memory = false});
  EXPECT_FALSE(paused.memory_kept);
  EXPECT_EQ(paused.how, "snapshot+terminate");
  const std::string image = paused.info.value("pause_image", "");
  ASSERT_TRUE(image.starts_with("im-")) << paused.info;
  auto snapshots = fake->calls("TaskSnapshotFilesystem");
  ASSERT_EQ(snapshots.size(), 1u);
  const std::string snapshot_id = snapshots[0]["request"].value("snapshotId", "");
  EXPECT_EQ(snapshot_id.size(), 36u) << "a UUID: " << snapshots[0];
  auto tags_set = fake->calls("SandboxTagsSet");
  ASSERT_EQ(tags_set.size(), 1u);
  EXPECT_NE(tags_set[0]["request"].dump().find(image), std::string::npos) << tags_set[0];
  EXPECT_NE(tags_set[0]["request"].dump().find("sandboxer.id"), std::string::npos)
      << "all the tags are sent again: " << tags_set[0];

  // Before the core merged the info (a pause cut short), the sandbox's tag says it.
  auto status = driver->status(sandbox);
  EXPECT_EQ(status.state, BackendStatus::State::paused);
  EXPECT_EQ(status.detail, "emulated: filesystem snapshot " + image +
                               ", sandbox terminated; processes do not survive");
  auto repeated = driver->pause(sandbox, {.pause_id = "pse-modal000001", .memory = false});
  EXPECT_EQ(repeated.info, paused.info) << "a repeat finds the pause's image";
  EXPECT_EQ(fake->calls("TaskSnapshotFilesystem").size(), 1u) << "no second snapshot";
  sandbox.info.update(paused.info);
  EXPECT_EQ(driver->status(sandbox).state, BackendStatus::State::paused);
  driver->pause(sandbox, {.pause_id = "pse-modal000001"});
  EXPECT_EQ(fake->calls("TaskSnapshotFilesystem").size(), 1u);

  testing::CollectIo refused;
  EXPECT_EQ(kind_of([&] { driver->exec(sandbox, {.argv = {"true"}}, refused); }),
            DriverError::Kind::conflict);
  EXPECT_EQ(
      driver->snapshot(sandbox, {.snapshot_id = "snp-1", .name = "s", .paused = true}).backend_ref,
      image)
      << "a paused sandbox's snapshot is its pause image";

  ResumeRequest resume{.pause_id = "pse-modal000001",
                       .expires_at = clock.now() + std::chrono::minutes(20),
                       .labels = {{"sandboxer.id", "sbx-modal-pause"}, {"team", "infra"}},
                       .ports = {PortSpec{.port = 8080}}};
  auto resumed = driver->resume(sandbox, resume);
  ASSERT_TRUE(resumed.backend_id);
  EXPECT_TRUE(resumed.backend_id->starts_with("sb-"));
  EXPECT_NE(*resumed.backend_id, first);
  EXPECT_EQ(resumed.info.value("sandbox", ""), *resumed.backend_id);
  EXPECT_EQ(resumed.info.value("image_id", ""), image);
  EXPECT_TRUE(resumed.info["pause_image"].is_null());
  ASSERT_TRUE(resumed.ports);
  ASSERT_EQ(resumed.ports->size(), 1u);
  EXPECT_NE((*resumed.ports)[0].host.find("8080"), std::string::npos) << "a new tunnel";
  auto create_call = fake->calls("SandboxCreate").back();
  EXPECT_EQ(create_call["request"]["definition"].value("imageId", ""), image);
  EXPECT_EQ(create_call["request"]["definition"].value("timeoutSecs", 0), 7200);
  sandbox.backend_id = *resumed.backend_id;
  sandbox.info.update(resumed.info);

  EXPECT_EQ(driver->status(sandbox).state, BackendStatus::State::running);
  testing::CollectIo cat;
  EXPECT_EQ(driver->exec(sandbox, {.argv = {"cat", "state.txt"}}, cat), 0);
  EXPECT_EQ(cat.stdout_text, "kept\n") << "the files came back through the snapshot image";
  auto found = driver->list_remote({{"sandboxer.id", "sbx-modal-pause"}});
  ASSERT_EQ(found.size(), 1u) << "the paused one has ended; the new one has the same sandboxer.id";
  EXPECT_EQ(found[0].backend_id, sandbox.backend_id);
  EXPECT_EQ(found[0].labels["team"], "infra");

  // Resuming a running sandbox makes nothing.
  auto again = driver->resume(sandbox, resume);
  EXPECT_FALSE(again.backend_id);
  EXPECT_EQ(fake->calls("SandboxCreate").size(), 2u);
  driver->destroy(sandbox);
}

TEST_F(ModalPauseTest, AResumeCutShortIsMadeAgainNotTwice) {
  auto sandbox = create("sbx-modal-twice");
  sandbox.info.update(driver->pause(sandbox, {.pause_id = "pse-modal000002"}).info);
  ResumeRequest resume{.pause_id = "pse-modal000002",
                       .expires_at = clock.now() + std::chrono::minutes(20),
                       .labels = {{"sandboxer.id", "sbx-modal-twice"}}};
  auto lost = driver->resume(sandbox, resume); // its answer never reached the ledger
  auto kept = driver->resume(sandbox, resume);
  ASSERT_TRUE(lost.backend_id && kept.backend_id);
  EXPECT_NE(*lost.backend_id, *kept.backend_id);
  auto found = driver->list_remote({{"sandboxer.id", "sbx-modal-twice"}});
  ASSERT_EQ(found.size(), 1u) << "the first attempt's sandbox was terminated";
  EXPECT_EQ(found[0].backend_id, *kept.backend_id);
}

TEST_F(ModalPauseTest, AGoneImageOrSandboxIsNotFound) {
  auto sandbox = create("sbx-modal-gone");
  auto paused = driver->pause(sandbox, {.pause_id = "pse-modal000003", .memory = false});
  sandbox.info.update(paused.info);
  const std::string image = paused.info["pause_image"];
  std::filesystem::remove_all(dir / "fake" / "images" / image); // expired
  auto status = driver->status(sandbox);
  EXPECT_EQ(status.state, BackendStatus::State::missing);
  EXPECT_NE(status.detail.find(image), std::string::npos) << status.detail;
  EXPECT_EQ(kind_of([&] {
              driver->resume(sandbox, {.pause_id = "pse-modal000003",
                                       .expires_at = clock.now() + std::chrono::minutes(20),
                                       .labels = {{"sandboxer.id", "sbx-modal-gone"}}});
            }),
            DriverError::Kind::not_found);
  EXPECT_EQ(fake->calls("SandboxCreate").size(), 1u) << "nothing made from a gone image";

  SandboxHandle unknown{"sbx-modal-none", "sb-doesnotexist0000000", json::object(), json::object()};
  EXPECT_EQ(kind_of([&] { driver->pause(unknown, {.pause_id = "pse-modal000004"}); }),
            DriverError::Kind::not_found);
  EXPECT_EQ(driver->status(unknown).state, BackendStatus::State::missing);
  // A sandbox that ended by itself has no files left to keep.
  auto ended = create("sbx-modal-ended");
  driver->destroy(ended);
  EXPECT_EQ(kind_of([&] { driver->pause(ended, {.pause_id = "pse-modal000005"}); }),
            DriverError::Kind::not_found);
}

} // namespace
} // namespace sandboxer::drivers::modal
