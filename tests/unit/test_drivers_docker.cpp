// The docker driver against a fake http::Transport: the exact Engine API requests it sends and how
// it reads the engine's answers. The real engine is exercised by tests/e2e/test_docker*.sh.
#include <deque>
#include <filesystem>
#include <fmt/format.h>
#include <functional>
#include <future>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <thread>
#include <unistd.h>

#include <sandboxer/error.hpp>
#include <sandboxer/http.hpp>
#include <sandboxer/lock_file.hpp>

#include "drivers/docker/docker_driver.hpp"
#include "drivers/docker/engine_api.hpp"
#include "drivers/docker/hijack.hpp"
#include "drivers/docker/log_lines.hpp"
#include "support/collect_io.hpp"
#include "support/silent_server.hpp"

namespace sandboxer {
namespace {

using nlohmann::json;

std::string url_decode(std::string_view text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '%' && i + 2 < text.size()) {
      out += static_cast<char>(std::stoi(std::string(text.substr(i + 1, 2)), nullptr, 16));
      i += 2;
    } else {
      out += text[i];
    }
  }
  return out;
}

// Answers the requests it is given in order from a script of expected (method, path) pairs, and
// records every request. A request the script did not expect fails the test.
class FakeEngine : public http::Transport {
public:
  struct Exchange {
    std::string method;
    std::string path; // after /v1.41, query included
    long status = 200;
    std::string body;
  };

  void expect(std::string method, std::string path, long status, json body = nullptr) {
    m_script.push_back(
        {std::move(method), std::move(path), status, body.is_null() ? "" : body.dump()});
  }
  void expect_raw(std::string method, std::string path, long status, std::string body) {
    m_script.push_back({std::move(method), std::move(path), status, std::move(body)});
  }

  http::Response send(const http::Request& request) override {
    const std::string prefix = "http://docker/v1.41";
    EXPECT_TRUE(request.url.starts_with(prefix)) << request.url;
    EXPECT_EQ(request.unix_socket, socket_path);
    std::string path = request.url.substr(prefix.size());
    sent.push_back(request);
    if (m_script.empty()) {
      ADD_FAILURE() << "unexpected request " << request.method << " " << path;
      return {500, {}, R"({"message":"unexpected"})"};
    }
    Exchange next = m_script.front();
    m_script.pop_front();
    EXPECT_EQ(request.method + " " + path, next.method + " " + next.path);
    if (after_answer) {
      after_answer(path, next.status);
    }
    http::Response response{next.status, {}, next.body};
    if (request.on_body && !next.body.empty()) {
      request.on_body(next.body);
      response.body.clear();
    }
    return response;
  }

  bool done() const { return m_script.empty(); }
  std::vector<http::Request> sent;
  std::string socket_path = "/fake/docker.sock";
  // Called with each request's path and the status it is about to get.
  std::function<void(const std::string&, long)> after_answer;

private:
  std::deque<Exchange> m_script;
};

class NullProgress : public Progress {
public:
  void update(std::string_view) override {}
};

using testing::CollectIo;

// One frame of the engine's multiplexed stream.
std::string frame(char stream, std::string_view payload) {
  std::string header = {stream, 0, 0, 0, 0, 0, 0, static_cast<char>(payload.size())};
  return header + std::string(payload);
}

class DockerDriverTest : public ::testing::Test {
protected:
  void SetUp() override {
    data_dir = std::filesystem::temp_directory_path() /
               fmt::format("sandboxer-docker-test-{}-{}", getpid(),
                           ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(data_dir);
  }
  void TearDown() override { std::filesystem::remove_all(data_dir); }

  std::unique_ptr<Driver> open(json section = json::object(), json location = nullptr) {
    if (!section.contains("host") && location.is_null()) {
      section["host"] = "unix:///fake/docker.sock";
    }
    if (!section.contains("image")) {
      section["image"] = "sandboxer/busybox:local";
    }
    const auto& factory = drivers::docker::docker_factory();
    DriverContext context;
    context.progress = &progress;
    context.data_dir = data_dir;
    if (!location.is_null()) {
      context.location = location;
    }
    return drivers::docker::open_docker_driver(factory.parse_spec(section), context, engine);
  }

  SandboxHandle handle() const { return {"sbx-abc", "c1", json::object(), json::object()}; }

  // destroy's look for what an interrupted restore --in-place left: every container labelled
  // with the sandbox's id.
  void expect_leftover_list(json containers = json::array()) {
    engine.expect("GET",
                  "/containers/json?all=1&filters=%7B%22label%22%3A%5B%22sandboxer.id%3Dsbx-abc%22"
                  "%5D%7D",
                  200, containers);
  }

  void expect_running_container() {
    engine.expect("GET", "/containers/c1/json", 200,
                  {{"State", {{"Running", true}, {"Status", "running"}}}});
  }

  FakeEngine engine;
  NullProgress progress;
  std::filesystem::path data_dir;
};

TEST_F(DockerDriverTest, CreateSendsTheContainerWithLabelsLimitsAndName) {
  auto driver = open({{"command", {"sleep", "infinity"}},
                      {"pull", "never"},
                      {"cpus", 0.5},
                      {"memory", "64m"},
                      {"pids_limit", 50},
                      {"network", "none"},
                      {"cap_drop", {"NET_RAW"}},
                      {"env", {{"FROM_SPEC", "1"}}}});
  engine.expect("POST", "/containers/create?name=sbx-abc", 201, {{"Id", "c1"}});
  engine.expect("POST", "/containers/c1/start", 204);
  expect_running_container();

  Labels labels = {{"sandboxer.id", "sbx-abc"},
                   {"sandboxer.profile", "box"},
                   {"sandboxer.ledger", "L1"},
                   {"sandboxer.expires_at", "2026-12-02T16:00:00Z"},
                   {"team", "e2e"}};
  auto result = driver->create(
      {.sandbox_id = "sbx-abc", .name = "box1", .labels = labels, .env = {{"FROM_PROFILE", "2"}}});
  EXPECT_TRUE(engine.done());
  EXPECT_EQ(result.backend_id, "c1");
  EXPECT_EQ(result.info["image"], "sandboxer/busybox:local");

  json body = json::parse(engine.sent[0].body);
  EXPECT_EQ(body["Image"], "sandboxer/busybox:local");
  EXPECT_EQ(body["Labels"], json(labels));
  EXPECT_EQ(body["Cmd"], json({"sleep", "infinity"}));
  EXPECT_EQ(body["Env"], json({"FROM_PROFILE=2", "FROM_SPEC=1"}));
  const json& host = body["HostConfig"];
  EXPECT_EQ(host["Memory"], 64 * 1024 * 1024);
  EXPECT_EQ(host["NanoCpus"], 500000000);
  EXPECT_EQ(host["PidsLimit"], 50);
  EXPECT_EQ(host["NetworkMode"], "none");
  EXPECT_EQ(host["CapDrop"], json({"NET_RAW"}));
  // An init process by default, so that destroy does not wait out the grace period of a
  // command that ignores SIGTERM as PID 1 (issue 13).
  EXPECT_EQ(host["Init"], true);
  EXPECT_EQ(result.info["ledger"], "L1");
}

TEST_F(DockerDriverTest, SpecInitIsOverridableAndPortsAreBounded) {
  const auto& factory = drivers::docker::docker_factory();
  EXPECT_EQ(factory.parse_spec({{"image", "x"}})["init"], true);
  EXPECT_EQ(factory.parse_spec({{"image", "x"}, {"init", false}})["init"], false);
  auto pointer_of = [&](const json& section) -> std::string {
    try {
      factory.parse_spec(section);
    } catch (const SpecError& e) {
      return e.pointer() + ": " + e.what();
    }
    return "accepted";
  };
  EXPECT_EQ(pointer_of({{"image", "x"}, {"init", "yes"}}), "/init: expected true or false");
  // Used to be std::stoi: out_of_range, an "internal error".
  EXPECT_EQ(pointer_of({{"image", "x"}, {"ports", {"99999999999999999999:80"}}}),
            "/ports/0: host port 99999999999999999999 is not between 1 and 65535");
  EXPECT_EQ(pointer_of({{"image", "x"}, {"ports", {"70000"}}}),
            "/ports/0: container port 70000 is not between 1 and 65535");
  EXPECT_EQ(pointer_of({{"image", "x"}, {"ports", {"127.0.0.1:9000:8080/udp"}}}), "accepted");
}

// The stored spec is what the ledger keeps: its bytes did not change when the spec moved to a
// field table (issue 36.3). stop_timeout stays in seconds alone, a readiness in milliseconds.
TEST_F(DockerDriverTest, SpecIsStoredAsBeforeItsFieldTable) {
  const auto& factory = drivers::docker::docker_factory();
  const json full = json::parse(R"({"image": "debian:12", "command": "sleep  infinity",
    "entrypoint": [], "env": {"A": "b", "N": 1}, "workdir": "/w", "user": 1000, "cpus": 1,
    "memory": "256m", "pids_limit": 64, "network": "mynet", "ports": ["8080", "9000:80/udp"],
    "mounts": [{"source": "/a", "target": "/b"}, {"type": "tmpfs", "target": "/t", "size": "1m"}],
    "read_only": true, "cap_add": ["A"], "cap_drop": ["ALL"], "security_opt": ["x"],
    "pull": "always", "readiness": {"command": ["true"], "timeout": "1m30s"},
    "stop_timeout": "1m30s", "init": false, "host": "tcp://x:1"})");
  EXPECT_EQ(factory.parse_spec(full).dump(),
            R"({"cap_add":["A"],"cap_drop":["ALL"],"command":["sleep","infinity"],"cpus":1.0,)"
            R"("entrypoint":[],"env":{"A":"b","N":"1"},"host":"tcp://x:1","image":"debian:12",)"
            R"("init":false,"memory":268435456,"mounts":[{"read_only":false,"source":"/a",)"
            R"("target":"/b","type":"bind"},{"read_only":false,"size":1048576,"target":"/t",)"
            R"("type":"tmpfs"}],"network":"mynet","pids_limit":64,"ports":["8080/tcp",)"
            R"("127.0.0.1:9000:80/udp"],"pull":"always","read_only":true,"readiness":)"
            R"({"command":["true"],"interval":"200ms","timeout":"90000ms"},"security_opt":["x"],)"
            R"("stop_timeout":"90s","user":"1000","workdir":"/w"})");
  EXPECT_EQ(factory.parse_spec(factory.parse_spec(full)), factory.parse_spec(full));
  EXPECT_EQ(factory.parse_spec({{"image", "x"}}).dump(),
            R"({"image":"x","init":true,"network":"bridge","pull":"if-missing","read_only":false,)"
            R"("stop_timeout":"10s"})");
  auto error_of = [&](const char* section) -> std::string {
    try {
      factory.parse_spec(json::parse(section));
    } catch (const SpecError& e) {
      return e.pointer() + ": " + e.what();
    }
    return "accepted";
  };
  EXPECT_EQ(error_of(R"({"imgae": "x"})"), R"(/imgae: unknown key "imgae", did you mean "image"?)");
  EXPECT_EQ(error_of(R"({"network": "none"})"),
            ": the docker section needs an image (e.g. image: debian:12)");
  EXPECT_EQ(error_of(R"({"image": "x", "network": "none", "ports": [80]})"),
            "/ports: ports cannot be published with network: none");
  EXPECT_EQ(error_of(R"({"image": "x", "readiness": {"timeout": "1s"}})"),
            "/readiness: readiness needs a command, e.g. [test, -e, /tmp/ready]");
  EXPECT_EQ(error_of(R"({"image": "x", "readiness": {"command": []}})"), "accepted");
  EXPECT_EQ(error_of(R"({"image": "x", "stop_timeout": "0s"})"), "accepted");
  EXPECT_EQ(error_of(R"({"image": "x", "mounts": [{"type": "bind", "source": "/a"}]})"),
            "/mounts/0: a mount needs a target (an absolute path in the container)");
  EXPECT_EQ(
      error_of(R"({"image": "x", "mounts": [{"type": "tmpfs", "target": "/t", "source": "/a"}]})"),
      "/mounts/0/source: a tmpfs mount has no source");
  EXPECT_EQ(
      error_of(
          R"({"image": "x", "mounts": [{"type": "volume", "target": "/t", "size": "1m", "source": "v"}]})"),
      "/mounts/0/size: only a tmpfs mount has a size");
  EXPECT_EQ(error_of(R"({"image": "x", "memory": "5m"})"),
            "/memory: the Docker Engine needs at least 6m of memory");
}

// Issue 13: a create that timed out was recorded failed while the engine might still make the
// container. It is removed by its name before the timeout is reported.
TEST_F(DockerDriverTest, CreateThatTimesOutRemovesTheContainerByName) {
  class TimingOut : public http::Transport {
  public:
    explicit TimingOut(FakeEngine& inner) : m_inner(inner) {}
    http::Response send(const http::Request& request) override {
      if (request.method == "POST" && request.url.find("/containers/create") != std::string::npos) {
        throw DriverError(DriverError::Kind::timeout, "docker: the engine did not answer in time");
      }
      return m_inner.send(request);
    }

  private:
    FakeEngine& m_inner;
  } timing_out(engine);
  DriverContext context;
  context.progress = &progress;
  context.data_dir = data_dir;
  auto driver = drivers::docker::open_docker_driver(
      drivers::docker::docker_factory().parse_spec(
          {{"image", "x"}, {"pull", "never"}, {"host", "unix:///fake/docker.sock"}}),
      context, timing_out);
  engine.expect("DELETE", "/containers/sbx-abc?v=1&force=1", 204);
  try {
    driver->create({.sandbox_id = "sbx-abc"});
    FAIL() << "create succeeded";
  } catch (const DriverError& e) {
    EXPECT_EQ(e.kind(), DriverError::Kind::timeout);
  }
  EXPECT_TRUE(engine.done());
}

TEST_F(DockerDriverTest, CreateRemovesTheContainerWhenStartFails) {
  auto driver = open({{"pull", "never"}});
  engine.expect("POST", "/containers/create?name=sbx-abc", 201, {{"Id", "c1"}});
  engine.expect("POST", "/containers/c1/start", 500, {{"message", "cgroup trouble"}});
  engine.expect("DELETE", "/containers/c1?v=1&force=1", 204);
  try {
    driver->create({.sandbox_id = "sbx-abc"});
    FAIL() << "create succeeded";
  } catch (const DriverError& e) {
    EXPECT_STREQ(e.what(), "docker: cannot start container c1: cgroup trouble");
  }
  EXPECT_TRUE(engine.done());
}

TEST_F(DockerDriverTest, CreateFromASnapshotUsesItsImage) {
  auto driver = open({{"pull", "always"}});
  engine.expect("POST", "/containers/create?name=sbx-abc", 201, {{"Id", "c1"}});
  engine.expect("POST", "/containers/c1/start", 204);
  expect_running_container();
  driver->create({.sandbox_id = "sbx-abc", .from_snapshot = "sandboxer/snap:sbx-old-s1"});
  EXPECT_EQ(json::parse(engine.sent[0].body)["Image"], "sandboxer/snap:sbx-old-s1");
  EXPECT_TRUE(engine.done()); // no pull of a snapshot, whatever the pull policy
}

TEST_F(DockerDriverTest, AMissingImageIsPulledOnlyWhenTheEngineSaysSo) {
  auto driver = open({{"pull", "if-missing"}});
  json no_image = {{"message", "No such image: sandboxer/busybox:local"}};
  engine.expect("POST", "/containers/create?name=sbx-abc", 404, no_image);
  engine.expect("GET", "/images/sandboxer%2Fbusybox%3Alocal/json", 404, no_image);
  engine.expect_raw("POST", "/images/create?fromImage=sandboxer%2Fbusybox&tag=local", 200,
                    R"({"status":"Downloading"})"
                    "\n");
  engine.expect("POST", "/containers/create?name=sbx-abc", 201, {{"Id", "c1"}});
  engine.expect("POST", "/containers/c1/start", 204);
  expect_running_container();
  driver->create({.sandbox_id = "sbx-abc"});
  EXPECT_TRUE(engine.done());
}

TEST_F(DockerDriverTest, AMissingImageWithPullNeverSaysWhatToDo) {
  auto driver = open({{"pull", "never"}});
  json no_image = {{"message", "No such image: sandboxer/busybox:local"}};
  engine.expect("POST", "/containers/create?name=sbx-abc", 404, no_image);
  engine.expect("GET", "/images/sandboxer%2Fbusybox%3Alocal/json", 404, no_image);
  try {
    driver->create({.sandbox_id = "sbx-abc"});
    FAIL() << "create succeeded";
  } catch (const DriverError& e) {
    EXPECT_EQ(e.code(), ExitCode::backend);
    EXPECT_NE(std::string(e.what()).find("is not on the engine and the profile says pull: never"),
              std::string::npos);
  }
  EXPECT_TRUE(engine.done());
}

TEST_F(DockerDriverTest, ANameConflictSaysWhatToDo) {
  auto driver = open({{"pull", "never"}});
  engine.expect("POST", "/containers/create?name=sbx-abc", 409,
                {{"message", "Conflict. The container name \"/sbx-abc\" is already in use"}});
  try {
    driver->create({.sandbox_id = "sbx-abc"});
    FAIL() << "create succeeded";
  } catch (const DriverError& e) {
    EXPECT_EQ(e.code(), ExitCode::backend);
    EXPECT_EQ(e.kind(), DriverError::Kind::conflict);
    EXPECT_NE(std::string(e.what()).find("a container named sbx-abc already exists"),
              std::string::npos);
  }
}

TEST_F(DockerDriverTest, DestroyStopsWithTheGraceThenRemovesWithVolumes) {
  auto driver = open({{"stop_timeout", "3s"}});
  engine.expect("POST", "/containers/c1/stop?t=3", 204);
  engine.expect("DELETE", "/containers/c1?v=1&force=1", 204);
  expect_leftover_list();
  driver->destroy(handle());
  EXPECT_TRUE(engine.done());
}

TEST_F(DockerDriverTest, DestroyWithoutGraceIsOneForcedRemove) {
  auto driver = open({{"stop_timeout", "0s"}});
  engine.expect("DELETE", "/containers/c1?v=1&force=1", 204);
  expect_leftover_list();
  driver->destroy(handle());
  EXPECT_TRUE(engine.done());
}

// A sandbox is destroyed on the engine that made it: another engine in DOCKER_HOST today (rootless
// docker, docker-in-docker) would answer 404 and the record would be closed with the container
// still running.
TEST_F(DockerDriverTest, TheRecordedEngineWinsOverDockerHost) {
  ::setenv("DOCKER_HOST", "unix:///fake/other.sock", 1);
  const auto& factory = drivers::docker::docker_factory();
  EXPECT_EQ(factory.location(factory.parse_spec({{"image", "x"}}), {}),
            json({{"engine", "unix:///fake/other.sock"}}));
  auto driver = open({{"stop_timeout", "0s"}}, {{"engine", "unix:///fake/docker.sock"}});
  engine.expect("DELETE", "/containers/c1?v=1&force=1", 204);
  expect_leftover_list();
  driver->destroy(handle()); // FakeEngine checks each request's socket
  ::unsetenv("DOCKER_HOST");
  EXPECT_TRUE(engine.done());
}

TEST(DockerEndpoint, EnginesAreSpelledAsDockerHostIs) {
  using drivers::docker::engine_address;
  EXPECT_EQ(engine_address("http://10.0.0.1:2375"), "tcp://10.0.0.1:2375"); // records before 0.2
  EXPECT_EQ(engine_address("unix:///run/d.sock"), "unix:///run/d.sock");
  EXPECT_EQ(drivers::docker::resolve_endpoint("tcp://10.0.0.1:2375").describe(),
            "tcp://10.0.0.1:2375");
  EXPECT_EQ(drivers::docker::resolve_endpoint("unix:///run/d.sock").describe(),
            "unix:///run/d.sock");
}

TEST_F(DockerDriverTest, RestoreInPlaceSwapsTheContainer) {
  auto driver = open({{"stop_timeout", "2s"}});
  engine.expect("GET", "/images/sandboxer%2Fsnap%3Asbx-abc-s1/json", 200, json::object());
  engine.expect("POST", "/containers/c1/rename?name=sbx-abc-replaced", 204);
  engine.expect("POST", "/containers/c1/stop?t=2", 204);
  engine.expect("POST", "/containers/create?name=sbx-abc", 201, {{"Id", "c2"}});
  engine.expect("POST", "/containers/c2/start", 204);
  engine.expect("GET", "/containers/c2/json", 200,
                {{"State", {{"Running", true}, {"Status", "running"}}}});
  engine.expect("DELETE", "/containers/c1?v=1&force=1", 204);
  auto result = driver->create(
      {.sandbox_id = "sbx-abc", .from_snapshot = "sandboxer/snap:sbx-abc-s1", .replaces = "c1"});
  EXPECT_EQ(result.backend_id, "c2");
  EXPECT_TRUE(engine.done());
}

TEST_F(DockerDriverTest, AFailedRestoreInPlaceBringsTheOldContainerBack) {
  auto driver = open({{"stop_timeout", "2s"}});
  engine.expect("GET", "/images/sandboxer%2Fsnap%3Asbx-abc-s1/json", 200, json::object());
  engine.expect("POST", "/containers/c1/rename?name=sbx-abc-replaced", 204);
  engine.expect("POST", "/containers/c1/stop?t=2", 204);
  engine.expect("POST", "/containers/create?name=sbx-abc", 201, {{"Id", "c2"}});
  engine.expect("POST", "/containers/c2/start", 500, {{"message", "no"}});
  engine.expect("DELETE", "/containers/c2?v=1&force=1", 204);
  engine.expect("POST", "/containers/c1/rename?name=sbx-abc", 204);
  engine.expect("POST", "/containers/c1/start", 204);
  EXPECT_THROW(driver->create({.sandbox_id = "sbx-abc",
                               .from_snapshot = "sandboxer/snap:sbx-abc-s1",
                               .replaces = "c1"}),
               DriverError);
  EXPECT_TRUE(engine.done());
}

TEST_F(DockerDriverTest, DestroyOfAContainerAlreadyGoneIsNotFound) {
  // The core counts not_found on destroy as destroyed.
  auto driver = open();
  engine.expect("POST", "/containers/c1/stop?t=10", 404, {{"message", "No such container: c1"}});
  expect_leftover_list();
  try {
    driver->destroy(handle());
    FAIL() << "destroy succeeded";
  } catch (const DriverError& e) {
    EXPECT_EQ(e.kind(), DriverError::Kind::not_found);
  }
  // Gone between the stop and the remove.
  engine.expect("POST", "/containers/c1/stop?t=10", 304);
  engine.expect("DELETE", "/containers/c1?v=1&force=1", 404, {{"message", "No such container"}});
  expect_leftover_list();
  try {
    driver->destroy(handle());
    FAIL() << "destroy succeeded";
  } catch (const DriverError& e) {
    EXPECT_EQ(e.kind(), DriverError::Kind::not_found);
  }
  EXPECT_TRUE(engine.done());
}

// Issue 13: an answer that is not JSON (a proxy's error page) was an "internal error" (exit 1);
// it is a backend error (exit 4) naming the call.
TEST_F(DockerDriverTest, AnswersThatAreNotJsonAreBackendErrors) {
  auto driver = open();
  engine.expect_raw("GET", "/containers/c1/json", 200, "<html>bad gateway</html>");
  try {
    driver->status(handle());
    ADD_FAILURE() << "a non-JSON answer was accepted";
  } catch (const DriverError& e) {
    EXPECT_EQ(e.code(), ExitCode::backend);
    EXPECT_NE(std::string(e.what()).find("inspect container: the engine's answer (HTTP 200) is "
                                         "not JSON: <html>bad gateway</html>"),
              std::string::npos)
        << e.what();
  }
  EXPECT_TRUE(engine.done());
}

TEST_F(DockerDriverTest, StatusMapsTheEngineState) {
  auto driver = open();
  using State = BackendStatus::State;
  struct Case {
    json state;
    State want;
    std::string detail;
  };
  std::vector<Case> cases = {
      {{{"Status", "running"}, {"Running", true}}, State::running, "running"},
      {{{"Status", "paused"}}, State::paused, "paused"},
      {{{"Status", "created"}}, State::stopped, "created"},
      {{{"Status", "exited"}, {"ExitCode", 3}}, State::stopped, "exited (exit code 3)"},
      {{{"Status", "exited"}, {"ExitCode", 137}, {"OOMKilled", true}},
       State::stopped,
       "exited (exit code 137, killed for using more memory than its limit; raise docker.memory)"},
      {{{"Status", "restarting"}}, State::unknown, "restarting"},
  };
  for (const auto& c : cases) {
    engine.expect("GET", "/containers/c1/json", 200, {{"State", c.state}});
    auto status = driver->status(handle());
    EXPECT_EQ(status.state, c.want) << c.state;
    EXPECT_EQ(status.detail, c.detail);
  }
  engine.expect("GET", "/containers/c1/json", 404, {{"message", "No such container"}});
  engine.expect("GET", "/containers/sbx-abc/json", 404, {{"message", "No such container"}});
  auto missing = driver->status(handle());
  EXPECT_EQ(missing.state, State::missing);
  EXPECT_EQ(missing.detail, "no such container");
  EXPECT_TRUE(engine.done());
}

// restore --in-place killed between its steps: the ledger has c1, which is set aside under
// sbx-abc-replaced and stopped, and the unfinished new container c2 has the sandbox's name.
TEST_F(DockerDriverTest, StatusUndoesAnInterruptedRestoreInPlace) {
  auto driver = open();
  engine.expect("GET", "/containers/c1/json", 200,
                {{"Id", "c1"},
                 {"Name", "/sbx-abc-replaced"},
                 {"State", {{"Running", false}, {"Status", "exited"}, {"ExitCode", 137}}}});
  engine.expect("GET", "/containers/sbx-abc/json", 200,
                {{"Id", "c2"},
                 {"Name", "/sbx-abc"},
                 {"Config", {{"Labels", {{"sandboxer.id", "sbx-abc"}}}}}});
  engine.expect("DELETE", "/containers/c2?v=1&force=1", 204);
  engine.expect("POST", "/containers/c1/rename?name=sbx-abc", 204);
  engine.expect("POST", "/containers/c1/start", 204);
  engine.expect(
      "GET", "/containers/c1/json", 200,
      {{"Id", "c1"}, {"Name", "/sbx-abc"}, {"State", {{"Running", true}, {"Status", "running"}}}});
  auto status = driver->status(handle());
  EXPECT_EQ(status.state, BackendStatus::State::running);
  EXPECT_EQ(status.detail, "brought back under its name after an interrupted restore --in-place "
                           "(its unfinished new container c2 removed); running");
  EXPECT_TRUE(engine.done());
  // Settled: the next status is a plain one.
  engine.expect(
      "GET", "/containers/c1/json", 200,
      {{"Id", "c1"}, {"Name", "/sbx-abc"}, {"State", {{"Running", true}, {"Status", "running"}}}});
  EXPECT_EQ(driver->status(handle()).detail, "running");
  EXPECT_TRUE(engine.done());
}

TEST_F(DockerDriverTest, StatusLeavesARestoreInPlaceInProgressAlone) {
  auto driver = open();
  // What the restoring process holds while it swaps the containers.
  LockFile lock(data_dir / "restore-in-place-sbx-abc.lock", Seconds(0), "test");
  auto held = lock.acquire();
  engine.expect("GET", "/containers/c1/json", 200,
                {{"Id", "c1"},
                 {"Name", "/sbx-abc-replaced"},
                 {"State", {{"Running", true}, {"Status", "running"}}}});
  auto status = driver->status(handle());
  EXPECT_EQ(status.state, BackendStatus::State::running);
  EXPECT_EQ(status.detail, "being replaced by a restore --in-place in progress; running");
  EXPECT_TRUE(engine.done());
}

TEST_F(DockerDriverTest, StatusOfAContainerGoneInARestoreInPlaceNamesTheNewOne) {
  auto driver = open();
  engine.expect("GET", "/containers/c1/json", 404, {{"message", "No such container"}});
  engine.expect("GET", "/containers/sbx-abc/json", 200,
                {{"Id", "c2"},
                 {"Name", "/sbx-abc"},
                 {"Config", {{"Labels", {{"sandboxer.id", "sbx-abc"}}}}}});
  auto status = driver->status(handle());
  EXPECT_EQ(status.state, BackendStatus::State::missing);
  EXPECT_NE(status.detail.find("container c2 under its name is the new one of an interrupted "
                               "restore --in-place"),
            std::string::npos)
      << status.detail;
  EXPECT_TRUE(engine.done());
}

TEST_F(DockerDriverTest, DestroyRemovesWhatAnInterruptedRestoreInPlaceLeft) {
  auto driver = open({{"stop_timeout", "0s"}});
  const json ours = {{"sandboxer.id", "sbx-abc"}};
  engine.expect("DELETE", "/containers/c1?v=1&force=1", 204);
  // c9 and c8 come back although they do not match the filter (a proxy or an engine that ignores
  // filters): they are not removed (issue 13).
  expect_leftover_list(json::array({{{"Id", "c1"}, {"Labels", ours}},
                                    {{"Id", "c2"}, {"Labels", ours}},
                                    {{"Id", "c9"}, {"Labels", {{"sandboxer.id", "sbx-other"}}}},
                                    {{"Id", "c8"}}}));
  engine.expect("DELETE", "/containers/c2?v=1&force=1", 204);
  driver->destroy(handle());
  EXPECT_TRUE(engine.done());
  // The recorded container already gone, the new one of the restore still there: destroyed, not
  // "already gone".
  engine.expect("DELETE", "/containers/c1?v=1&force=1", 404, {{"message", "No such container"}});
  expect_leftover_list(json::array({{{"Id", "c2"}, {"Labels", ours}}}));
  engine.expect("DELETE", "/containers/c2?v=1&force=1", 204);
  EXPECT_NO_THROW(driver->destroy(handle()));
  EXPECT_TRUE(engine.done());
  // The look for leftovers failing does not undo a destroy that removed the container.
  engine.expect("DELETE", "/containers/c1?v=1&force=1", 204);
  engine.expect("GET",
                "/containers/json?all=1&filters=%7B%22label%22%3A%5B%22sandboxer.id%3Dsbx-abc%22"
                "%5D%7D",
                500, {{"message", "engine trouble"}});
  EXPECT_NO_THROW(driver->destroy(handle()));
  EXPECT_TRUE(engine.done());
}

TEST_F(DockerDriverTest, ListRemoteFiltersByEveryLabel) {
  json filters = {{"label", {"sandboxer.ledger=L1", "sandboxer.profile=box"}}};
  std::string query = "/containers/json?all=1&filters=";
  engine.expect(
      "GET", query + "PLACEHOLDER", 200,
      json::array(
          {{{"Id", "c1"},
            {"State", "running"},
            {"Labels", {{"sandboxer.ledger", "L1"}, {"sandboxer.profile", "box"}, {"x", "y"}}}},
           // Not matching the filter, yet returned: never reported as ours.
           {{"Id", "c2"},
            {"State", "running"},
            {"Labels", {{"sandboxer.ledger", "L2"}, {"sandboxer.profile", "box"}}}},
           {{"Id", "c3"}, {"State", "running"}}}));
  // The filter is URL-encoded JSON: compare it decoded.
  class Decoding : public http::Transport {
  public:
    explicit Decoding(FakeEngine& inner) : m_inner(inner) {}
    http::Response send(const http::Request& request) override {
      auto at = request.url.find("filters=");
      seen_filters = json::parse(url_decode(request.url.substr(at + 8)));
      http::Request copy = request;
      copy.url = request.url.substr(0, at + 8) + "PLACEHOLDER";
      return m_inner.send(copy);
    }
    json seen_filters;

  private:
    FakeEngine& m_inner;
  } decoding(engine);
  DriverContext context;
  context.progress = &progress;
  auto listing = drivers::docker::open_docker_driver(
      drivers::docker::docker_factory().parse_spec(
          {{"image", "x"}, {"host", "unix:///fake/docker.sock"}}),
      context, decoding);
  auto found = listing->list_remote({{"sandboxer.ledger", "L1"}, {"sandboxer.profile", "box"}});
  EXPECT_EQ(decoding.seen_filters, filters);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].backend_id, "c1");
  EXPECT_EQ(found[0].state, "running");
  EXPECT_EQ(found[0].labels.at("x"), "y");
}

TEST_F(DockerDriverTest, SnapshotCommitsToTheSnapshotRepository) {
  auto driver = open();
  engine.expect("POST", "/commit?container=c1&repo=sandboxer%2Fsnap&tag=sbx-abc-s1&pause=1", 201,
                {{"Id", "sha256:1"}});
  engine.expect("GET", "/images/sandboxer%2Fsnap%3Asbx-abc-s1/json", 200, {{"Size", 12345}});
  auto result = driver->snapshot(handle(), {"snp-test", "s1"});
  EXPECT_EQ(result.backend_ref, "sandboxer/snap:sbx-abc-s1");
  EXPECT_EQ(result.size_bytes, 12345u);
  json config = json::parse(engine.sent[0].body);
  EXPECT_EQ(config["Labels"]["sandboxer.id"], "sbx-abc");
  EXPECT_EQ(config["Labels"]["sandboxer.snapshot"], "s1");
  EXPECT_TRUE(engine.done());
}

TEST_F(DockerDriverTest, AnEngineOlderThanTheApiSaysUpgrade) {
  auto driver = open({{"pull", "never"}});
  engine.expect("POST", "/containers/create?name=sbx-abc", 400,
                {{"message", "client version 1.41 is too new. Maximum supported API version is "
                             "1.40"}});
  try {
    driver->create({.sandbox_id = "sbx-abc"});
    FAIL() << "create succeeded";
  } catch (const DriverError& e) {
    EXPECT_EQ(e.code(), ExitCode::backend);
    EXPECT_STREQ(e.what(), "docker: the engine on unix:///fake/docker.sock speaks API 1.40, older "
                           "than 1.41 which sandboxer needs (Docker 20.10 or later): upgrade "
                           "docker");
  }
}

TEST_F(DockerDriverTest, ExecDemultiplexesAndReturnsTheExitCode) {
  auto driver = open();
  engine.expect("POST", "/containers/c1/exec", 201, {{"Id", "e1"}});
  engine.expect_raw("POST", "/exec/e1/start", 200, frame(1, "out\n") + frame(2, "err\n"));
  engine.expect("GET", "/exec/e1/json", 200, {{"Running", false}, {"ExitCode", 42}});
  CollectIo io;
  EXPECT_EQ(driver->exec(handle(), {.argv = {"sh", "-c", "exit 42"}, .workdir = "/tmp"}, io), 42);
  EXPECT_EQ(io.stdout_text, "out\n");
  EXPECT_EQ(io.stderr_text, "err\n");
  json body = json::parse(engine.sent[0].body);
  EXPECT_EQ(body["Cmd"], json({"sh", "-c", "exit 42"}));
  EXPECT_EQ(body["WorkingDir"], "/tmp");
  EXPECT_TRUE(engine.done());
}

// Lines as `sandboxer logs` gets them.
class LogLines : public LogSink {
public:
  void line(const LogLine& line) override { lines.push_back(line); }
  std::vector<LogLine> lines;
};

TEST_F(DockerDriverTest, LogsAreTheMainProcesssLinesWithTheirTimesAndStreams) {
  auto driver = open();
  engine.expect("GET", "/containers/c1/json", 200, {{"Config", {{"Tty", false}}}});
  // A line split over two frames, one frame holding two lines, and a last line without newline.
  engine.expect_raw(
      "GET", "/containers/c1/logs?stdout=1&stderr=1&timestamps=1&since=1796587200&tail=5", 200,
      frame(1, "2026-12-06T20:00:01.123456789Z hel") + frame(1, "lo\n") +
          frame(2, "2026-12-06T20:00:02.5Z oops\n2026-12-06T20:00:03Z again\n") +
          frame(1, "2026-12-06T20:00:04Z last"));
  LogLines sink;
  driver->logs(handle(), {.since = *parse_time("2026-12-06T20:00:00Z"), .tail = 5}, sink);
  ASSERT_EQ(sink.lines.size(), 4u);
  EXPECT_EQ(sink.lines[0].stream, "stdout");
  EXPECT_EQ(sink.lines[0].text, "hello");
  EXPECT_EQ(format_time(*sink.lines[0].time), "2026-12-06T20:00:01Z");
  EXPECT_EQ(sink.lines[1].stream, "stderr");
  EXPECT_EQ(sink.lines[1].text, "oops");
  EXPECT_EQ(sink.lines[2].text, "again");
  EXPECT_EQ(sink.lines[3].stream, "stdout");
  EXPECT_EQ(sink.lines[3].text, "last");
  EXPECT_TRUE(engine.done());
}

TEST_F(DockerDriverTest, LogsFollowAsksTheEngineToFollowWithoutADeadlineOnTheStream) {
  auto driver = open();
  engine.expect("GET", "/containers/c1/json", 200, {{"Config", {{"Tty", false}}}});
  engine.expect_raw("GET", "/containers/c1/logs?stdout=1&stderr=1&timestamps=1&follow=1", 200,
                    frame(1, "2026-12-06T20:00:01Z one\n"));
  LogLines sink;
  driver->logs(handle(), {.follow = true}, sink);
  ASSERT_EQ(sink.lines.size(), 1u);
  const auto& sent = engine.sent.back();
  // A quiet container is no failure: the stream is bounded by days, the answer by a minute.
  EXPECT_GE(sent.timeout, std::chrono::hours(24));
  ASSERT_TRUE(sent.answer_timeout.has_value());
  EXPECT_LE(*sent.answer_timeout, std::chrono::minutes(1));
}

TEST_F(DockerDriverTest, LogsOfAContainerWithATerminalAreOneRawStream) {
  auto driver = open();
  engine.expect("GET", "/containers/c1/json", 200, {{"Config", {{"Tty", true}}}});
  engine.expect_raw("GET", "/containers/c1/logs?stdout=1&stderr=1&timestamps=1", 200,
                    "2026-12-06T20:00:01Z prompt\r\n");
  LogLines sink;
  driver->logs(handle(), {}, sink);
  ASSERT_EQ(sink.lines.size(), 1u);
  EXPECT_EQ(sink.lines[0].text, "prompt");
  EXPECT_EQ(sink.lines[0].stream, "stdout");
}

TEST_F(DockerDriverTest, LogsOfAGoneContainerAreNotFound) {
  auto driver = open();
  engine.expect("GET", "/containers/c1/json", 404, {{"message", "No such container: c1"}});
  LogLines sink;
  try {
    driver->logs(handle(), {}, sink);
    FAIL() << "no error";
  } catch (const DriverError& e) {
    EXPECT_EQ(e.kind(), DriverError::Kind::not_found);
  }
}

TEST_F(DockerDriverTest, ALogsErrorIsAnErrorNotALine) {
  auto driver = open();
  engine.expect("GET", "/containers/c1/json", 200, {{"Config", {{"Tty", false}}}});
  engine.expect("GET", "/containers/c1/logs?stdout=1&stderr=1&timestamps=1", 500,
                {{"message", "configured logging driver does not support reading"}});
  LogLines sink;
  try {
    driver->logs(handle(), {}, sink);
    FAIL() << "no error";
  } catch (const DriverError& e) {
    EXPECT_NE(std::string(e.what()).find("does not support reading"), std::string::npos)
        << e.what();
  }
  EXPECT_TRUE(sink.lines.empty());
}

// The engine's frames arrive in whatever pieces the socket gives: one byte at a time must give the
// same lines.
TEST(DockerLogLines, FramesFedOneByteAtATimeGiveWholeLines) {
  LogLines sink;
  drivers::docker::TimestampedLines lines(sink);
  drivers::docker::StreamDemuxer demuxer(lines);
  std::string stream = frame(1, "2026-12-06T20:00:01Z first\n2026-12-06T20:00:02Z sec") +
                       frame(2, "2026-12-06T20:00:03Z warn\n") + frame(1, "ond\n") +
                       frame(1, "not stamped\n");
  for (char byte : stream) {
    demuxer.feed(std::string_view(&byte, 1));
  }
  lines.finish();
  ASSERT_EQ(sink.lines.size(), 4u);
  EXPECT_EQ(sink.lines[0].text, "first");
  EXPECT_EQ(sink.lines[1].text, "warn");
  EXPECT_EQ(sink.lines[1].stream, "stderr");
  EXPECT_EQ(sink.lines[2].text, "second");
  EXPECT_EQ(format_time(*sink.lines[2].time), "2026-12-06T20:00:02Z");
  EXPECT_EQ(sink.lines[3].text, "not stamped");
  EXPECT_FALSE(sink.lines[3].time.has_value());
}

TEST_F(DockerDriverTest, ExecKilledByTheOomKillerIsABackendError) {
  auto killed = [&](std::string events) {
    engine.expect("POST", "/containers/c1/exec", 201, {{"Id", "e1"}});
    engine.expect_raw("POST", "/exec/e1/start", 200, "");
    engine.expect("GET", "/exec/e1/json", 200, {{"Running", false}, {"ExitCode", 137}});
    engine.expect_raw("GET", "PLACEHOLDER", 200, std::move(events));
  };
  class EventsPath : public http::Transport {
  public:
    explicit EventsPath(FakeEngine& inner) : m_inner(inner) {}
    http::Response send(const http::Request& request) override {
      http::Request copy = request;
      if (request.url.find("/events?") != std::string::npos) {
        events_url = request.url;
        copy.url = "http://docker/v1.41PLACEHOLDER";
      }
      return m_inner.send(copy);
    }
    std::string events_url;

  private:
    FakeEngine& m_inner;
  } transport(engine);
  DriverContext context;
  context.progress = &progress;
  auto oom_driver = drivers::docker::open_docker_driver(
      drivers::docker::docker_factory().parse_spec(
          {{"image", "x"}, {"host", "unix:///fake/docker.sock"}, {"memory", "8m"}}),
      context, transport);
  CollectIo io;
  killed(R"({"status":"oom","id":"c1","Type":"container","Action":"oom"})"
         "\n");
  try {
    oom_driver->exec(handle(), {.argv = {"hog"}}, io);
    FAIL() << "exec returned";
  } catch (const DriverError& e) {
    EXPECT_EQ(e.code(), ExitCode::backend);
    EXPECT_STREQ(e.what(), "docker: the command in sbx-abc was killed for using more memory than "
                           "the sandbox's limit (docker.memory: 8 MiB); raise docker.memory in "
                           "the profile, or make the command use less");
  }
  EXPECT_NE(url_decode(transport.events_url).find(R"({"container":["c1"],"event":["oom"]})"),
            std::string::npos)
      << transport.events_url;
  // No oom event in the window: a plain kill -9, the command's own 137.
  killed("");
  EXPECT_EQ(oom_driver->exec(handle(), {.argv = {"sh", "-c", "kill -9 $$"}}, io), 137);
  EXPECT_TRUE(engine.done());
}

} // namespace
} // namespace sandboxer

namespace sandboxer {
namespace {

// A local terminal as exec -t sees it: a size, a "resized" pipe, and stdin. When the command's
// output says "ready", the terminal is resized to 44x132 and stdin ends.
class TerminalIo : public ExecIo {
public:
  TerminalIo() {
    EXPECT_EQ(::pipe(m_winch), 0);
    EXPECT_EQ(::pipe(m_stdin), 0);
  }
  ~TerminalIo() override {
    for (int fd : {m_winch[0], m_winch[1], m_stdin[0], m_stdin[1]}) {
      if (fd >= 0) {
        ::close(fd);
      }
    }
  }
  void out(std::string_view bytes) override {
    text.append(bytes);
    if (m_stdin[1] >= 0 && text.find("ready") != std::string::npos) {
      size = {44, 132};
      EXPECT_EQ(::write(m_winch[1], "w", 1), 1);
      ::close(m_stdin[1]);
      m_stdin[1] = -1;
    }
  }
  void err(std::string_view bytes) override { text.append(bytes); }
  int stdin_fd() const override { return m_stdin[0]; }
  std::optional<TerminalSize> terminal_size() const override { return size; }
  int resize_fd() const override { return m_winch[0]; }

  TerminalSize size{33, 111};
  std::string text;

private:
  int m_winch[2] = {-1, -1};
  int m_stdin[2] = {-1, -1};
};

// exec -t: the API calls go to the fake engine, the hijacked stream to a real unix socket served
// here. The exec's terminal gets the local size once the engine accepts it (refused first, as
// before the process runs), and the new size after a resize of the local terminal.
TEST_F(DockerDriverTest, ExecWithATerminalSendsItsSizeAndItsResizes) {
  std::string socket_path = (data_dir / "engine.sock").string();
  int listener = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::snprintf(address.sun_path, sizeof address.sun_path, "%s", socket_path.c_str());
  ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  ASSERT_EQ(::listen(listener, 1), 0);

  std::promise<void> first_size_taken;
  engine.socket_path = socket_path;
  engine.after_answer = [&](const std::string& path, long status) {
    if (path == "/exec/e1/resize?h=33&w=111" && status == 201) {
      first_size_taken.set_value();
    }
  };
  std::string start_request;
  std::thread server([&] {
    int connection = ::accept(listener, nullptr, nullptr);
    char buffer[4096];
    while (start_request.find("}") == std::string::npos) {
      ssize_t n = ::read(connection, buffer, sizeof buffer);
      if (n <= 0) {
        break;
      }
      start_request.append(buffer, n);
    }
    std::string upgraded = "HTTP/1.1 101 UPGRADED\r\nConnection: Upgrade\r\nUpgrade: tcp\r\n\r\n";
    EXPECT_EQ(::write(connection, upgraded.data(), upgraded.size()), ssize_t(upgraded.size()));
    first_size_taken.get_future().wait_for(std::chrono::seconds(10));
    EXPECT_EQ(::write(connection, "ready\r\n", 7), 7);
    while (::read(connection, buffer, sizeof buffer) > 0) {
    }
    ::close(connection);
  });

  auto driver = open({{"host", "unix://" + socket_path}});
  engine.expect("POST", "/containers/c1/exec", 201, {{"Id", "e1"}});
  engine.expect("POST", "/exec/e1/resize?h=33&w=111", 409,
                {{"message", "container c1 is not running"}});
  engine.expect("POST", "/exec/e1/resize?h=33&w=111", 201);
  engine.expect("POST", "/exec/e1/resize?h=44&w=132", 201);
  engine.expect("GET", "/exec/e1/json", 200, {{"Running", false}, {"ExitCode", 0}});
  TerminalIo io;
  int status = driver->exec(handle(), {.argv = {"sh"}, .attach_stdin = true, .tty = true}, io);
  server.join();
  ::close(listener);
  EXPECT_EQ(status, 0);
  EXPECT_EQ(io.text, "ready\r\n");
  EXPECT_NE(start_request.find("POST /v1.41/exec/e1/start HTTP/1.1"), std::string::npos);
  EXPECT_NE(start_request.find("\"Tty\":true"), std::string::npos) << start_request;
  json body = json::parse(engine.sent[0].body);
  EXPECT_EQ(body["Tty"], true);
  EXPECT_EQ(body["AttachStdin"], true);
  EXPECT_TRUE(engine.done());
}

} // namespace
} // namespace sandboxer

namespace sandboxer {
namespace {

TEST(RawStream, AnUpgradeNobodyAnswersTimesOut) {
  const std::string error =
      testing::error_of_unanswered([](const http::Request& r) { drivers::docker::hijack(r); });
  EXPECT_NE(error.find("no response within 300 ms"), std::string::npos) << error;
}

} // namespace
} // namespace sandboxer
