// The compose-ssh driver's pure parts: its spec (paths resolved against the profile), the quoting
// of remote argv, the tar sent to the host, the compose file and its override, and the reading of
// ssh's failures. The driver against a real sshd is tests/e2e/test_compose_ssh*.sh.
#include <fstream>
#include <gtest/gtest.h>
#include <sstream>

#include <sandboxer/error.hpp>
#include <sandboxer/proc.hpp>

#include "drivers/compose-ssh/compose_file.hpp"
#include "drivers/compose-ssh/host.hpp"
#include "drivers/compose-ssh/ports.hpp"
#include "drivers/compose-ssh/spec.hpp"
#include "drivers/compose-ssh/ssh.hpp"
#include "drivers/compose-ssh/tar.hpp"
#include "support/temp_dir.hpp"

namespace sandboxer::drivers::compose_ssh {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

std::string error_of(const json& section, const SpecOrigin* origin = nullptr) {
  try {
    origin ? parse_profile_section(section, *origin) : parse_spec(section);
  } catch (const SpecError& e) {
    return e.pointer() + ": " + e.what();
  }
  return "accepted";
}

TEST(ComposeSshSpec, FillsDefaultsAndRoundTrips) {
  Spec spec = parse_spec({{"host", "build-1.example"}, {"compose_file", "/srv/stack.yml"}});
  EXPECT_EQ(spec.port, 22);
  EXPECT_FALSE(spec.user);
  EXPECT_EQ(spec.connect_timeout, std::chrono::seconds(10));
  EXPECT_EQ(spec.stop_timeout, std::chrono::seconds(10));
  json stored = to_json(spec);
  EXPECT_EQ(to_json(parse_spec(stored)), stored);
  EXPECT_EQ(stored["compose_file"], "/srv/stack.yml");
  // No settle time by default (issue 34.10); one given is kept, and none at all is a setting.
  EXPECT_EQ(spec.settle, std::chrono::milliseconds(0));
  stored["settle"] = "1500ms";
  EXPECT_EQ(parse_spec(stored).settle, std::chrono::milliseconds(1500));
  stored["settle"] = "0s";
  EXPECT_EQ(parse_spec(stored).settle, std::chrono::milliseconds(0));
  stored["settle"] = "-1s";
  EXPECT_THROW(parse_spec(stored), SpecError);
}

TEST(ComposeSshSpec, RelativePathsResolveAgainstTheProfileThatWroteThem) {
  testing::TempDir dir;
  fs::create_directories(dir / "base");
  std::ofstream(dir / "base" / "stack.yml") << "services: {web: {image: x}}\n";
  std::ofstream(dir / "base" / "key") << "not a real key\n";
  SpecOrigin origin;
  origin.directory_of = [&](const std::string& pointer) {
    return pointer == "/compose_file" || pointer == "/identity_file" ? dir / "base" : dir.path();
  };
  json section = {{"host", "h"}, {"compose_file", "stack.yml"}, {"identity_file", "./key"}};
  Spec spec = parse_profile_section(section, origin);
  EXPECT_EQ(spec.compose_file, dir / "base" / "stack.yml");
  EXPECT_EQ(*spec.identity_file, dir / "base" / "key");
  // A file that is not there is the profile's mistake, located.
  section["env_file"] = "missing.env";
  EXPECT_EQ(error_of(section, &origin),
            "/env_file: no such file: " + (dir / "missing.env").string());
}

TEST(ComposeSshSpec, RefusesWhatSshOrTheHostWouldMisread) {
  json base = {{"host", "h"}, {"compose_file", "/s.yml"}};
  auto with = [&](const char* key, json value) {
    json section = base;
    section[key] = std::move(value);
    return error_of(section);
  };
  EXPECT_EQ(with("host", "-oProxyCommand=x"), "/host: expected a host name or address");
  EXPECT_EQ(with("user", "a b"), "/user: expected a user name");
  EXPECT_EQ(with("port", 70000), "/port: expected a whole number from 1 to 65535");
  EXPECT_EQ(with("service", "../x"), "/service: expected a compose service name");
  EXPECT_EQ(with("connect_timeout", "500ms"),
            "/connect_timeout: ssh counts its connect timeout in whole seconds: use 1s or more");
  EXPECT_EQ(with("stop_timeout", "1500ms"), "/stop_timeout: expected whole seconds (10s, 1m)");
  EXPECT_EQ(with("hosst", "x").substr(0, 27), "/hosst: unknown key \"hosst\"");
  EXPECT_EQ(error_of({{"host", "h"}}), ": missing required key \"compose_file\"");
  EXPECT_EQ(with("known_hosts", ""), "/known_hosts: expected a non-empty string");
}

TEST(ComposeSshRemote, SshArgvChecksHostKeysAndNeverPrompts) {
  Target target{"h", 2222, "bob", fs::path("/k"), fs::path("/kh"), std::chrono::seconds(7)};
  Ssh ssh(target);
  auto argv = ssh.argv_for({.argv = {"docker", "ps"}});
  auto has = [&](const std::string& arg) {
    return std::find(argv.begin(), argv.end(), arg) != argv.end();
  };
  EXPECT_TRUE(has("BatchMode=yes"));
  EXPECT_TRUE(has("StrictHostKeyChecking=yes"));
  EXPECT_TRUE(has("ConnectTimeout=7"));
  EXPECT_TRUE(has("UserKnownHostsFile=/kh"));
  EXPECT_TRUE(has("ControlMaster=auto"));
  EXPECT_FALSE(has("StrictHostKeyChecking=no"));
  EXPECT_EQ(argv[argv.size() - 2], "h");
  EXPECT_EQ(argv[argv.size() - 3], "--");
  EXPECT_EQ(argv.back(), "'docker' 'ps'");
  EXPECT_EQ(ssh.where(), "bob@h:2222");
}

TEST(ComposeSshRemote, ReadsSshsOwnFailures) {
  Target target{"h", 22, std::nullopt, fs::path("/id"), fs::path("/kh"), std::chrono::seconds(5)};
  auto key = classify_ssh_failure("Host key verification failed.\r\n", target, "h:22");
  ASSERT_TRUE(key);
  EXPECT_TRUE(key->auth);
  EXPECT_NE(key->message.find("/kh"), std::string::npos);
  auto refused = classify_ssh_failure("h: Permission denied (publickey).\n", target, "h:22");
  ASSERT_TRUE(refused);
  EXPECT_NE(refused->message.find("refused the key /id"), std::string::npos);
  auto down =
      classify_ssh_failure("ssh: connect to host h port 22: Connection refused\n", target, "h:22");
  ASSERT_TRUE(down);
  EXPECT_FALSE(down->auth);
  EXPECT_NE(down->message.find("cannot reach h:22"), std::string::npos);
  // A remote command's own exit 255 with its own words is not ssh's failure.
  EXPECT_FALSE(classify_ssh_failure("my tool failed\n", target, "h:22"));
}

TEST(ComposeSshRemote, QuotesTheLastLinesOfOutput) {
  EXPECT_EQ(last_lines("one\r\ntwo\n\nthree\r\n\n", 2), "two / three");
  EXPECT_EQ(last_lines("only", 1), "only");
  EXPECT_EQ(last_lines("\n\n", 3), "");
}

TEST(ComposeSshTar, TarReadsBackWhatWasWritten) {
  testing::TempDir dir;
  std::string long_name = std::string(120, 'd') + "/file.txt";
  std::string archive = tar_archive({{"p/", "", 0700},
                                     {"p/compose.yml", "services: {}\n", 0600},
                                     {"p/" + long_name, std::string(1000, 'x'), 0644}});
  EXPECT_EQ(archive.size() % 512, 0u);
  proc::Command untar;
  untar.argv = {"tar", "-x", "-f", "-", "-C", dir.path().string()};
  untar.stdin_data = archive;
  auto result = proc::run(untar);
  ASSERT_EQ(result.exit_code, 0) << result.err;
  std::ifstream in(dir / "p" / "compose.yml");
  std::string text((std::istreambuf_iterator<char>(in)), {});
  EXPECT_EQ(text, "services: {}\n");
  EXPECT_EQ(fs::file_size(dir / "p" / long_name), 1000u);
  EXPECT_THROW(tar_archive({{"/abs", "", 0600}}), std::invalid_argument);
  EXPECT_THROW(tar_archive({{std::string(300, 'a'), "", 0600}}), std::invalid_argument);
}

TEST(ComposeSshFile, ServicesInTheFilesOrderAndItsVersion) {
  auto file = read_compose_file("version: '3.8'\nservices:\n  web: {}\n  db: {}\n  cache: {}\n",
                                "stack.yml");
  EXPECT_EQ(file.version, "3.8");
  EXPECT_EQ(file.services, (std::vector<std::string>{"web", "db", "cache"}));
  json override_doc = json::parse(override_file(file, {.labels = {{"sandboxer.id", "sbx-1"}},
                                                       .environment = {{"A", "1"}},
                                                       .images = {{"db", "img:db"}}}));
  EXPECT_EQ(override_doc["version"], "3.8");
  EXPECT_EQ(override_doc["services"]["web"]["labels"]["sandboxer.id"], "sbx-1");
  EXPECT_EQ(override_doc["services"]["cache"]["environment"]["A"], "1");
  EXPECT_EQ(override_doc["services"]["db"]["image"], "img:db");
  EXPECT_FALSE(override_doc["services"]["web"].contains("image"));
}

TEST(ComposeSshFile, ABrokenFileIsNamedWithItsLine) {
  auto message = [](const std::string& text) {
    try {
      read_compose_file(text, "/p/stack.yml");
    } catch (const DriverError& e) {
      EXPECT_EQ(e.kind(), DriverError::Kind::invalid_spec);
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_EQ(message("services:\n  web: [\n"), message("services:\n  web: [\n"));
  EXPECT_NE(message("services:\n  web: [\n").find("/p/stack.yml:"), std::string::npos);
  EXPECT_NE(message("version: '3'\n").find("expected services:"), std::string::npos);
  EXPECT_NE(message("services: {}\n").find("at least one service"), std::string::npos);
  EXPECT_NE(message("- a\n").find("a mapping with services"), std::string::npos);
  // Found by fuzz_compose: a service name that is not UTF-8 once made the override throw.
  EXPECT_NE(message("services:\n  we \xa0L: {image: x}\n").find("/p/stack.yml:2:3: a service name"),
            std::string::npos);
  ComposeFile odd{std::string("3\xa0"), {"web"}};
  EXPECT_NO_THROW(override_file(odd, {}));
}

TEST(ComposeSshHost, ReadsDockersStatusWords) {
  Container healthy{"id", "db", "running", "Up 3 seconds (healthy)", "1.29.2", {}};
  EXPECT_EQ(healthy.health(), "healthy");
  Container starting{"id", "db", "running", "Up 1 second (health: starting)", "", {}};
  EXPECT_EQ(starting.health(), "starting");
  Container plain{"id", "web", "running", "Up 3 seconds", "", {}};
  EXPECT_EQ(plain.health(), "");
  Container exited{"id", "job", "exited", "Exited (3) 2 seconds ago", "", {}};
  EXPECT_EQ(exited.exit_code(), 3);
  EXPECT_FALSE(plain.exit_code());
}

TEST(ComposeSshHost, OneReadTellsStateHealthAndHowLongAllRan) {
  // now=, then per container: id, service, state, health, exit code, started at, compose version.
  auto reading = parse_reading("now=1700000010.500000000\n"
                               "aaa\tweb\trunning\t\t0\t2023-11-14T22:13:29.000000000Z\t1.29.2\n"
                               "bbb\tdb\trunning\thealthy\t0\t2023-11-14T22:13:30.250Z\t1.29.2\n");
  ASSERT_EQ(reading.containers.size(), 2u);
  EXPECT_EQ(reading.containers[1].service, "db");
  EXPECT_EQ(reading.containers[1].health(), "healthy");
  EXPECT_EQ(reading.containers[0].health(), "");
  EXPECT_EQ(reading.containers[0].compose_version, "1.29.2");
  // 1700000010.5 is 22:13:30.5 UTC: the youngest (db) has run 250 ms.
  ASSERT_TRUE(reading.all_up_for);
  EXPECT_EQ(reading.all_up_for->count(), 250);

  auto failing = parse_reading("now=1700000010\n"
                               "aaa\tweb\trunning\tstarting\t0\t2023-11-14T22:13:29Z\t\n"
                               "ccc\tjob\texited\t\t3\t2023-11-14T22:13:29Z\t\n");
  ASSERT_EQ(failing.containers.size(), 2u);
  EXPECT_EQ(failing.containers[0].health(), "starting");
  EXPECT_EQ(failing.containers[1].exit_code(), 3);
  EXPECT_FALSE(failing.all_up_for); // not all run

  // A host whose date has no %N, or none at all: no age, the driver counts from its own look.
  EXPECT_EQ(parse_reading("now=1700000010.N\naaa\tweb\trunning\t\t0\t2023-11-14T22:13:29Z\t\n")
                .all_up_for->count(),
            1000);
  EXPECT_FALSE(parse_reading("aaa\tweb\trunning\t\t0\t2023-11-14T22:13:29Z\t\n").all_up_for);
  EXPECT_FALSE(parse_reading("now=1700000010\n").all_up_for);
}

TEST(ComposeSshHost, ListsByLabelWithTheLabelsInOneRead) {
  auto containers = parse_labelled(
      "aaa\tweb\trunning\t1.29.2\t{\"com.docker.compose.project\":\"sbx-1\",\"team\":\"a\\tb\"}\n"
      "bbb\t<no value>\texited\t<no value>\tnull\n");
  ASSERT_EQ(containers.size(), 2u);
  EXPECT_EQ(containers[0].labels.at("com.docker.compose.project"), "sbx-1");
  EXPECT_EQ(containers[0].labels.at("team"), "a\tb");
  EXPECT_EQ(containers[0].state, "running");
  EXPECT_EQ(containers[1].service, "");
  EXPECT_TRUE(containers[1].labels.empty());
}

TEST(ComposeSshHost, KeepsWhichComposeAHostHasPerHostInTheDataDir) {
  testing::TempDir dir;
  Ssh first(Target{"cache-test-1.example", 2201, "ci", std::nullopt, std::nullopt,
                   std::chrono::seconds(1)});
  Ssh second(Target{"cache-test-1.example", 2202, "ci", std::nullopt, std::nullopt,
                    std::chrono::seconds(1)});
  {
    Host host(first, std::chrono::seconds(1), dir.path());
    Host other(second, std::chrono::seconds(1), dir.path());
    EXPECT_FALSE(host.known_compose());
    host.remember_compose(ComposeKind::plugin);
    other.remember_compose(ComposeKind::v1);
    EXPECT_EQ(host.known_compose(), ComposeKind::plugin);
    EXPECT_EQ(other.known_compose(), ComposeKind::v1);
  }
  // On disk, one file per user@host:port, read back by a later command of another process.
  EXPECT_TRUE(fs::exists(dir / "compose.ci@cache-test-1.example%3a2201"));
  std::ofstream(dir / "compose.ci@cache-test-1.example%3a2201") << "v1\n";
  Host host(first, std::chrono::seconds(1), dir.path());
  // This process remembers what it learnt itself first.
  EXPECT_EQ(host.known_compose(), ComposeKind::plugin);
  host.forget_compose();
  EXPECT_FALSE(host.known_compose());
  EXPECT_FALSE(fs::exists(dir / "compose.ci@cache-test-1.example%3a2201"));
  EXPECT_EQ(compose_argv(ComposeKind::plugin), (std::vector<std::string>{"docker", "compose"}));
  EXPECT_EQ(compose_argv(ComposeKind::v1), (std::vector<std::string>{"docker-compose"}));
}

TEST(ComposeSshPorts, ComposesShortSyntaxAndReadsTheEnginesChoiceBack) {
  EXPECT_EQ(compose_port({8080, "tcp", std::nullopt, "127.0.0.1"}), "127.0.0.1::8080/tcp");
  EXPECT_EQ(compose_port({5432, "tcp", 15432, "0.0.0.0"}), "0.0.0.0:15432:5432/tcp");
  EXPECT_EQ(compose_port({53, "udp", std::nullopt, "::1"}), "[::1]::53/udp");
  // The web service publishes the profile's 8080 and its own 80 on every address (listed twice
  // by the engine); db only exposes 5432.
  const std::string lines = "web {\"80/tcp\":[{\"HostIp\":\"0.0.0.0\",\"HostPort\":\"8000\"},"
                            "{\"HostIp\":\"::\",\"HostPort\":\"8000\"}],"
                            "\"8080/tcp\":[{\"HostIp\":\"127.0.0.1\",\"HostPort\":\"49153\"}]}\n"
                            "db {\"5432/tcp\":null}\n";
  auto bindings =
      read_bindings(lines, {{8080, "tcp", std::nullopt, "127.0.0.1"}}, "web", "build-1");
  ASSERT_EQ(bindings.size(), 2u);
  EXPECT_EQ(bindings[0].port, 8080);
  EXPECT_EQ(bindings[0].host, "127.0.0.1");
  EXPECT_EQ(bindings[0].host_port, 49153);
  EXPECT_EQ(bindings[0].url, "tcp://127.0.0.1:49153");
  EXPECT_EQ(bindings[1].port, 80);
  EXPECT_EQ(bindings[1].host, "build-1"); // on every address of the host: its name
  EXPECT_EQ(bindings[1].url, "tcp://build-1:8000");
  EXPECT_EQ(forward_target(bindings[0]), "127.0.0.1");
  EXPECT_EQ(forward_target(bindings[1]), "127.0.0.1");
  EXPECT_EQ(forward_target({1, "tcp", "10.0.0.7", 2, ""}), "10.0.0.7");
  // A port asked for that the engine did not publish is an error, never a guess.
  EXPECT_THROW(read_bindings(lines, {{9090, "tcp", std::nullopt, "127.0.0.1"}}, "web", "h"),
               DriverError);
  EXPECT_THROW(read_bindings(lines, {{8080, "tcp", std::nullopt, "127.0.0.1"}}, "db", "h"),
               DriverError);
  EXPECT_TRUE(read_bindings("garbage\nweb not-json\n", {}, "web", "h").empty());
}

// The pause and resume commands (host.cpp), run here against a fake docker and docker-compose
// that keep their containers' states in files and log each call: what the host would be asked.
class ComposeSshPause : public ::testing::Test {
protected:
  void SetUp() override {
    fs::create_directories(dir / "bin");
    fs::create_directories(dir / "state");
    fs::create_directories(dir / "home" / k_state_dir / "projects" / "sbx-p");
    // A container is a file state/ID holding its state; its service is its id.
    write(dir / "bin" / "docker", with_state(R"SH(#!/bin/sh
S="@S@"
echo "docker $*" >>"$S/../log"
case $1 in
ps)
  shift; all=; format=; states=
  while [ $# -gt 0 ]; do
    case $1 in
    -a | -aq) all=1 ;;
    --format) format=$2; shift ;;
    --filter) case $2 in status=*) states="$states ${2#status=}" ;; esac; shift ;;
    esac
    shift
  done
  [ -n "$states" ] || { [ -n "$all" ] && states="running paused exited created" || states=running; }
  for f in "$S"/*; do
    [ -f "$f" ] || continue
    id=${f##*/}; st=$(cat "$f")
    for want in $states; do
      [ "$st" = "$want" ] || continue
      if [ -n "$format" ]; then printf '%s\t%s\t%s\t%s\t1.29.2\n' "$id" "$id" "$st" "$st"; else echo "$id"; fi
    done
  done ;;
pause|unpause)
  verb=$1; shift
  for id in "$@"; do
    if [ $verb = pause ]; then echo paused >"$S/$id"; else echo running >"$S/$id"; fi
  done ;;
inspect)
  shift 2; shift
  for id in "$@"; do
    printf '%s\t%s\t%s\t\t0\t2023-11-14T22:13:29Z\t1.29.2\t{}\n' "$id" "$id" "$(cat "$S/$id")"
  done ;;
compose) [ "$2" != version ] ;;
esac
)SH"));
    write(dir / "bin" / "docker-compose", with_state(R"SH(#!/bin/sh
S="@S@"
echo "compose $*" >>"$S/../log"
for word in "$@"; do
  case $word in
  stop) to=exited ;;
  start) to=running ;;
  esac
done
for f in "$S"/*; do [ "$(cat "$f")" = paused ] || echo "$to" >"$f"; done
)SH"));
    fs::permissions(dir / "bin" / "docker", fs::perms::owner_all);
    fs::permissions(dir / "bin" / "docker-compose", fs::perms::owner_all);
    set("web", "running");
    set("db", "running");
  }
  static void write(const fs::path& path, const std::string& text) { std::ofstream(path) << text; }
  // The script with @S@ made the state directory.
  std::string with_state(std::string script) const {
    script.replace(script.find("@S@"), 3, (dir / "state").string());
    return script;
  }
  void set(const std::string& id, const std::string& state) {
    write(dir / "state" / id, state + "\n");
  }
  std::string state(const std::string& id) {
    std::ifstream in(dir / "state" / id);
    std::string word;
    in >> word;
    return word;
  }
  // Runs argv as ssh would on the host (in the home directory); the log of the calls it made.
  proc::Result run(const std::vector<std::string>& argv) {
    fs::remove(dir / "log");
    proc::Command command;
    command.argv = argv;
    command.cwd = dir / "home";
    command.env_set["PATH"] = (dir / "bin").string() + ":/usr/bin:/bin";
    command.timeout = std::chrono::seconds(20);
    return proc::run(command);
  }
  std::string log() {
    std::ifstream in(dir / "log");
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
  }
  fs::path mark() { return dir / "home" / k_state_dir / "projects" / "sbx-p" / "paused"; }
  testing::TempDir dir;
};

TEST_F(ComposeSshPause, FreezeIsOneDockerPauseOfTheRunningOnesAndARepeatDoesNothing) {
  PauseCall call{.step = PauseStep::freeze, .project = "sbx-p"};
  auto argv = pause_argv(call);
  ASSERT_GE(argv.size(), 4u);
  EXPECT_EQ(argv[0], "sh");
  EXPECT_EQ(argv[1], "-c");
  // sandboxer's values only as positional parameters, never inside the script.
  EXPECT_EQ(argv[2].find("sbx-p"), std::string::npos);
  auto result = run(argv);
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_NE(log().find("docker pause db web\n"), std::string::npos) << log();
  EXPECT_NE(log().find("--filter label=com.docker.compose.project=sbx-p --filter status=running"),
            std::string::npos)
      << log();
  EXPECT_EQ(state("web"), "paused");
  EXPECT_EQ(state("db"), "paused");
  EXPECT_EQ(log().find("compose -p"), std::string::npos) << "compose is not needed to freeze";
  ASSERT_EQ(run(argv).exit_code, 0);
  EXPECT_EQ(log().find("docker pause"), std::string::npos) << "a repeat paused again: " << log();

  // resume: the paused ones unpaused, no compose start (nothing is stopped), then the read.
  auto resumed = run(pause_argv({.step = PauseStep::resume, .project = "sbx-p"}));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_NE(log().find("docker unpause db web\n"), std::string::npos) << log();
  EXPECT_EQ(log().find("compose -p"), std::string::npos) << log();
  Reading reading = parse_reading(resumed.out);
  ASSERT_EQ(reading.containers.size(), 2u);
  EXPECT_EQ(reading.containers[0].state, "running");
  EXPECT_TRUE(reading.all_up_for) << "the host's clock was read: " << resumed.out;
  EXPECT_EQ(resumed.out.find("started"), std::string::npos) << "a thaw alone";
  ASSERT_EQ(run(pause_argv({.step = PauseStep::resume, .project = "sbx-p"})).exit_code, 0);
  EXPECT_EQ(log().find("unpause"), std::string::npos) << "a repeat unpaused again: " << log();
}

TEST_F(ComposeSshPause, StopIsComposeStopWithTheGraceAndAMarkThatStartRemoves) {
  write(dir / "home" / k_state_dir / "projects" / "sbx-p" / "env", "A=1\n");
  set("db", "paused"); // a frozen container would sit out the whole grace: thawed first
  PauseCall call{.step = PauseStep::stop,
                 .project = "sbx-p",
                 .project_dir = "/srv/app",
                 .compose = ComposeKind::v1,
                 .grace = std::chrono::seconds(5),
                 .pause_id = "pse-aaaabbbbcccc"};
  auto result = run(pause_argv(call));
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const std::string files = std::string(k_state_dir) + "/projects/sbx-p";
  EXPECT_NE(log().find("docker unpause db\n"), std::string::npos) << log();
  EXPECT_NE(log().find("compose -p sbx-p --project-directory /srv/app -f " + files +
                       "/compose.yml -f " + files + "/sandboxer.override.yml --env-file " + files +
                       "/env stop -t 5\n"),
            std::string::npos)
      << log();
  EXPECT_LT(log().find("docker unpause"), log().find("compose -p"));
  EXPECT_EQ(state("web"), "exited");
  std::ifstream in(mark());
  std::string id;
  in >> id;
  EXPECT_EQ(id, "pse-aaaabbbbcccc");

  // status reads the mark: paused, not merely stopped.
  auto status = run(status_argv("sbx-p"));
  ASSERT_EQ(status.exit_code, 0) << status.err;
  EXPECT_NE(status.out.find("web\tweb\texited"), std::string::npos) << status.out;
  EXPECT_NE(status.out.find("\nstopped-by-pause\n"), std::string::npos) << status.out;

  auto resumed = run(pause_argv({.step = PauseStep::resume,
                                 .project = "sbx-p",
                                 .project_dir = "/srv/app",
                                 .compose = ComposeKind::v1}));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_NE(log().find("--env-file " + files + "/env start\n"), std::string::npos) << log();
  EXPECT_EQ(state("web"), "running");
  EXPECT_FALSE(fs::exists(mark()));
  EXPECT_EQ(parse_reading(resumed.out).containers.size(), 2u);
  EXPECT_EQ(resumed.out.rfind("started\n", 0), 0u) << "compose start ran";
  EXPECT_EQ(run(status_argv("sbx-p")).out.find("stopped-by-pause"), std::string::npos);
}

TEST_F(ComposeSshPause, ThePluginWhenTheHostHasItAndNothingForAGoneProject) {
  // Without a known compose the host is asked (this fake has no plugin: v1).
  PauseCall call{.step = PauseStep::stop, .project = "sbx-p"};
  ASSERT_EQ(run(pause_argv(call)).exit_code, 0);
  EXPECT_NE(log().find("docker compose version"), std::string::npos) << log();
  EXPECT_NE(log().find("compose -p sbx-p --project-directory " + std::string(k_state_dir) +
                       "/projects/sbx-p -f"),
            std::string::npos)
      << log();
  call.compose = ComposeKind::plugin;
  call.step = PauseStep::resume;
  ASSERT_EQ(run(pause_argv(call)).exit_code, 0);
  EXPECT_NE(log().find("docker compose -p sbx-p"), std::string::npos) << log();

  fs::remove_all(dir / "state");
  fs::create_directories(dir / "state");
  for (auto step : {PauseStep::freeze, PauseStep::stop, PauseStep::resume}) {
    auto result = run(pause_argv({.step = step, .project = "sbx-p"}));
    EXPECT_EQ(result.exit_code, 0);
    EXPECT_EQ(result.out, "gone\n");
  }
}

} // namespace
} // namespace sandboxer::drivers::compose_ssh
