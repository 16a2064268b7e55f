#include <cstdlib>
#include <fstream>
#include <gtest/gtest.h>
#include <regex>
#include <set>

#include <sandboxer/duration.hpp>
#include <sandboxer/error.hpp>

#include "core/errors.hpp"
#include "core/profile/profile.hpp"
#include "core/schemas/schemas.hpp"
#include "support/catalog.hpp"
#include "support/temp_dir.hpp"

namespace sandboxer {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using testing::TempDir;
using testing::write_file;

const fs::path k_data_dir = fs::path(SANDBOXER_TEST_DATA) / "profiles";
const fs::path k_examples_dir = fs::path(SANDBOXER_SOURCE_DIR) / "profiles";

// Sets (or, with nullopt, unsets) an environment variable for the life of the object.
class ScopedEnv {
public:
  ScopedEnv(std::string name, const std::optional<std::string>& value) : m_name(std::move(name)) {
    if (const char* old = std::getenv(m_name.c_str())) {
      m_old = old;
    }
    set(value);
  }
  ~ScopedEnv() { set(m_old); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

private:
  void set(const std::optional<std::string>& value) {
    if (value) {
      setenv(m_name.c_str(), value->c_str(), 1);
    } else {
      unsetenv(m_name.c_str());
    }
  }
  std::string m_name;
  std::optional<std::string> m_old;
};

// The message of the ProfileError that loading `file` throws, or "" when it loads.
std::string load_error(const fs::path& file, const std::vector<fs::path>& search = {}) {
  try {
    // What `profiles validate` checks: the loader, then the driver catalog.
    testing::builtin_catalog().check_profile(load_profile(file, search));
  } catch (const ProfileError& e) {
    EXPECT_EQ(e.code(), ExitCode::usage);
    return e.what();
  }
  return "";
}

class ProfileTest : public ::testing::Test {
protected:
  fs::path write(const std::string& name, const std::string& text) {
    fs::path path = m_dir / name;
    write_file(path, text);
    return path;
  }
  Profile load(const std::string& name, const std::vector<fs::path>& search = {}) {
    return load_profile(m_dir / name, search);
  }
  std::string at(const std::string& name, int line, int column) const {
    return place(m_dir / name, line, column);
  }
  static std::string place(const fs::path& file, int line, int column) {
    return file.string() + ":" + std::to_string(line) + ":" + std::to_string(column);
  }

  TempDir m_dir;
};

// --- good profiles -----------------------------------------------------------------------------

TEST_F(ProfileTest, MinimalProfileGetsDefaults) {
  write("small.yaml", "driver: stub\n");
  Profile profile = load("small.yaml");
  EXPECT_EQ(profile.name, "small");
  EXPECT_EQ(profile.path, m_dir / "small.yaml");
  EXPECT_TRUE(profile.chain.empty());
  EXPECT_EQ(profile.driver, "stub");
  EXPECT_FALSE(profile.ttl.none);
  EXPECT_EQ(profile.ttl.default_ttl, Seconds(3600)); // the documented default when ttl is absent
  EXPECT_EQ(profile.ttl.max_ttl, std::nullopt);
  EXPECT_TRUE(profile.labels.empty());
  EXPECT_TRUE(profile.env.empty());
  EXPECT_TRUE(profile.secrets.empty());
  EXPECT_EQ(profile.events, json::array());
  EXPECT_EQ(profile.driver_spec, json::object());
  EXPECT_EQ(profile.resolved, (json{{"name", "small"}, {"driver", "stub"}}));
}

TEST_F(ProfileTest, FullProfileFillsEveryField) {
  ScopedEnv home("HOME", "/home/tester");
  write("ci-small.yaml", R"(name: ci-small
description: Small CI sandboxes
driver: docker
ttl: { default: 30m, max: 4h }
labels: { team: infra, app.kubernetes.io/name: api }
env: { FOO: bar }
secrets:
  api_key: { env: E2B_API_KEY }
  ssh_key: { file: ~/.ssh/id_ed25519 }
events:
  - { type: jsonl, path: ~/.local/state/sandboxer/events.jsonl }
  - { type: http, url: https://hub.example/events }
docker:
  image: debian:12
  command: [sleep, infinity]
  cpus: 1
  memory: 512m
  privileged: false
)");
  Profile profile = load("ci-small.yaml");
  EXPECT_EQ(profile.name, "ci-small");
  EXPECT_EQ(profile.driver, "docker");
  EXPECT_EQ(profile.ttl.default_ttl, Seconds(1800));
  EXPECT_EQ(profile.ttl.max_ttl, Seconds(4 * 3600));
  EXPECT_EQ(profile.labels, (std::map<std::string, std::string>{
                                {"team", "infra"}, {"app.kubernetes.io/name", "api"}}));
  EXPECT_EQ(profile.env, (std::map<std::string, std::string>{{"FOO", "bar"}}));
  ASSERT_EQ(profile.secrets.size(), 2u);
  EXPECT_EQ(profile.secrets["api_key"].kind, SecretRef::Kind::env);
  EXPECT_EQ(profile.secrets["api_key"].source, "E2B_API_KEY");
  EXPECT_EQ(profile.secrets["ssh_key"].kind, SecretRef::Kind::file);
  EXPECT_EQ(profile.secrets["ssh_key"].source, "/home/tester/.ssh/id_ed25519");
  ASSERT_EQ(profile.events.size(), 2u);
  EXPECT_EQ(profile.events[0]["type"], "jsonl");
  EXPECT_EQ(profile.events[1]["url"], "https://hub.example/events");
  EXPECT_EQ(profile.driver_spec, (json{{"image", "debian:12"},
                                       {"command", {"sleep", "infinity"}},
                                       {"cpus", 1},
                                       {"memory", "512m"},
                                       {"privileged", false}}));
  EXPECT_EQ(profile.resolved["description"], "Small CI sandboxes");
  EXPECT_EQ(profile.resolved["docker"], profile.driver_spec);
}

TEST_F(ProfileTest, ScalarsAreTypedOnlyWhenPlain) {
  write("types.yaml", R"(driver: stub
stub:
  yes_bool: true
  no_bool: False
  quoted_bool: "true"
  integer: 42
  negative: -7
  plus: +3
  leading_zero: 007
  big: 123456789012345678901234567890
  float: 1.5
  exponent: 2e3
  quoted_number: "42"
  single_quoted: '1.5'
  null_word: null
  tilde: ~
  empty:
  quoted_empty: ""
  yaml11_yes: yes
  hex: 0x1F
  infinity: .inf
  size: 256m
  tagged: !!str 5
  block: |
    two
    lines
  list: [1, "2", three, ~]
  nested: { deeper: { deepest: 0.25 } }
)");
  json spec = load("types.yaml").driver_spec;
  EXPECT_EQ(spec["yes_bool"], true);
  EXPECT_EQ(spec["no_bool"], false);
  EXPECT_EQ(spec["quoted_bool"], "true");
  EXPECT_EQ(spec["integer"], 42);
  EXPECT_TRUE(spec["integer"].is_number_integer());
  EXPECT_EQ(spec["negative"], -7);
  EXPECT_EQ(spec["plus"], 3);
  EXPECT_EQ(spec["leading_zero"], 7);
  EXPECT_EQ(spec["big"], "123456789012345678901234567890"); // beyond int64: kept as text
  EXPECT_EQ(spec["float"], 1.5);
  EXPECT_EQ(spec["exponent"], 2000.0);
  EXPECT_EQ(spec["quoted_number"], "42");
  EXPECT_EQ(spec["single_quoted"], "1.5");
  EXPECT_TRUE(spec["null_word"].is_null());
  EXPECT_TRUE(spec["tilde"].is_null());
  EXPECT_TRUE(spec["empty"].is_null());
  EXPECT_EQ(spec["quoted_empty"], "");
  EXPECT_EQ(spec["yaml11_yes"], "yes"); // YAML 1.2: only true/false are booleans
  EXPECT_EQ(spec["hex"], "0x1F");
  EXPECT_EQ(spec["infinity"], ".inf");
  EXPECT_EQ(spec["size"], "256m");
  EXPECT_EQ(spec["tagged"], "5");
  EXPECT_EQ(spec["block"], "two\nlines\n");
  EXPECT_EQ(spec["list"], (json{1, "2", "three", nullptr}));
  EXPECT_EQ(spec["nested"]["deeper"]["deepest"], 0.25);
}

TEST_F(ProfileTest, LabelsAndEnvKeepTheTextAsWritten) {
  write("text.yaml", R"(driver: stub
labels: { version: 2, enabled: true, ratio: 1.50 }
env: { PYTHON_VERSION: 3.10, DEBUG: false, EMPTY: "" }
)");
  Profile profile = load("text.yaml");
  EXPECT_EQ(profile.labels, (std::map<std::string, std::string>{
                                {"version", "2"}, {"enabled", "true"}, {"ratio", "1.50"}}));
  EXPECT_EQ(profile.env, (std::map<std::string, std::string>{
                             {"PYTHON_VERSION", "3.10"}, {"DEBUG", "false"}, {"EMPTY", ""}}));
  EXPECT_EQ(profile.resolved["env"]["PYTHON_VERSION"], "3.10");
  EXPECT_EQ(profile.resolved["labels"]["version"], "2");
}

TEST_F(ProfileTest, PortsTakeEachFormAndDefaultToLoopbackTcp) {
  write("ports.yaml", R"(driver: stub
ports: [8080, "53/udp", {port: 5432, protocol: tcp, host_port: 15432, bind: "::1"}]
)");
  Profile profile = load("ports.yaml");
  ASSERT_EQ(profile.ports.size(), 3u);
  EXPECT_EQ(profile.ports[0].port, 8080);
  EXPECT_EQ(profile.ports[0].protocol, "tcp");
  EXPECT_EQ(profile.ports[0].bind, "127.0.0.1");
  EXPECT_FALSE(profile.ports[0].host_port);
  EXPECT_EQ(profile.ports[1].port, 53);
  EXPECT_EQ(profile.ports[1].protocol, "udp");
  EXPECT_EQ(profile.ports[2].host_port, 15432);
  EXPECT_EQ(profile.ports[2].bind, "::1");
  EXPECT_TRUE(profile.warnings.empty());
}

TEST_F(ProfileTest, APortOnEveryAddressIsAllowedWithAWarningThatSaysWhere) {
  write("open.yaml",
        "driver: stub\nports: [{port: 80, bind: 0.0.0.0}, {port: 81, bind: \"::\"}]\n");
  Profile profile = load("open.yaml");
  ASSERT_EQ(profile.warnings.size(), 2u);
  EXPECT_EQ(profile.warnings[0].rfind(at("open.yaml", 2, 26), 0), 0u) << profile.warnings[0];
  EXPECT_NE(profile.warnings[0].find("exposes port 80/tcp on every network"), std::string::npos);
}

TEST_F(ProfileTest, PortMistakesAreLocated) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"ports: [0]", "2:9: ports[0]: \"0\" is not a port number from 1 to 65535"},
      {"ports: [65536]", "2:9: ports[0]: \"65536\" is not a port number from 1 to 65535"},
      {"ports: [80, 81, 80]", "2:17: ports[2]: port 80/tcp is listed twice"},
      {"ports: [80/sctp]", "2:9: ports[0]: protocol \"sctp\": expected tcp or udp"},
      {"ports: [{port: 1, host_port: 9}, {port: 2, host_port: 9}]",
       "2:55: ports[1].host_port: 9/tcp on 127.0.0.1 is asked for twice"},
      {"ports: [{port: 1, bind: here}]", "2:25: ports[0].bind: expected an IP address"},
      {"ports: [{protocol: tcp}]", "2:9: ports[0]: missing \"port\""},
      {"ports: 8080", "2:8: ports: expected a list"},
  };
  for (const auto& [line, message] : cases) {
    write("bad.yaml", "driver: stub\n" + line + "\n");
    try {
      load("bad.yaml");
      ADD_FAILURE() << line << " was accepted";
    } catch (const ProfileError& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
  }
}

TEST_F(ProfileTest, ReadyNamesAnExposedPortAndWaitsAMinuteUnlessTold) {
  write("ready.yaml", "driver: stub\nports: [8080, 9090]\nready: {port: 8080}\n");
  Profile profile = load("ready.yaml");
  ASSERT_TRUE(profile.ready);
  EXPECT_EQ(profile.ready->port, 8080);
  EXPECT_EQ(profile.ready->timeout, Seconds(60));
  write("ready-timed.yaml", "driver: stub\nports: [8080]\nready: {port: \"8080\", timeout: 2m}\n");
  EXPECT_EQ(load("ready-timed.yaml").ready->timeout, Seconds(120));
  write("not-ready.yaml", "driver: stub\nports: [8080]\n");
  EXPECT_FALSE(load("not-ready.yaml").ready);
}

TEST_F(ProfileTest, ReadyMistakesAreLocated) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"ready: {port: 0}", "3:15: ready.port: \"0\" is not a port number from 1 to 65535"},
      {"ready: {port: 70000}", "3:15: ready.port: \"70000\" is not a port number"},
      {"ready: {port: 9090}", "3:15: ready.port: port 9090/tcp is not exposed; add it to `ports:`"},
      {"ready: {port: 53}", "3:15: ready.port: port 53/tcp is not exposed"},
      {"ready: {port: 8080, timout: 5s}", "3:21: ready: unknown key \"timout\", did you mean "
                                          "\"timeout\"?"},
      {"ready: {port: 8080, timeout: soon}", "3:30: ready.timeout: invalid duration \"soon\""},
      {"ready: {port: 8080, timeout: 0s}", "3:30: ready.timeout: wait at least 1s"},
      {"ready: {timeout: 5s}", "3:1: ready: missing \"port\""},
      {"ready: 8080", "3:8: ready: expected a map such as {port: 8080, timeout: 60s}"},
      {"redy: {port: 8080}", "3:1: unknown key \"redy\", did you mean \"ready\"?"},
  };
  for (const auto& [line, message] : cases) {
    write("bad.yaml", "driver: stub\nports: [8080, 53/udp]\n" + line + "\n");
    try {
      load("bad.yaml");
      ADD_FAILURE() << line << " was accepted";
    } catch (const ProfileError& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
      EXPECT_EQ(e.code(), ExitCode::usage);
    }
  }
}

TEST_F(ProfileTest, NameMayBeAnyScalar) {
  write("numbered.yaml", "name: 2024\ndriver: stub\n");
  EXPECT_EQ(load("numbered.yaml").name, "2024");
  write("nulled.yaml", "name: ~\ndriver: stub\n");
  EXPECT_EQ(load("nulled.yaml").name, "nulled");
}

TEST_F(ProfileTest, DriverOfAnotherBuildIsLeftToTheRegistry) {
  // Whether a driver exists is the registry's question (check_profile_driver), not the loader's.
  write("future.yaml", "driver: firecracker\nfirecracker: { vcpus: 2 }\n");
  Profile profile = load("future.yaml");
  EXPECT_EQ(profile.driver, "firecracker");
  EXPECT_EQ(profile.driver_spec, (json{{"vcpus", 2}}));
}

TEST_F(ProfileTest, NullDriverSectionIsEmpty) {
  write("null-section.yaml", "driver: stub\nstub:\n");
  EXPECT_EQ(load("null-section.yaml").driver_spec, json::object());
}

// --- invalid profiles: every fixture states its exact message --------------------------------

// The "# expect: " line of a fixture, with {file} and {dir} filled in.
std::string expected_message(const fs::path& file) {
  std::ifstream in(file);
  std::string line;
  std::getline(in, line);
  const std::string prefix = "# expect: ";
  EXPECT_TRUE(line.starts_with(prefix)) << file << " has no \"# expect: \" first line";
  std::string message = line.substr(std::min(prefix.size(), line.size()));
  for (const auto& [placeholder, value] :
       {std::pair<std::string, std::string>{"{file}", file.string()},
        std::pair<std::string, std::string>{"{dir}", file.parent_path().string()}}) {
    for (size_t at = message.find(placeholder); at != std::string::npos;
         at = message.find(placeholder, at + value.size())) {
      message.replace(at, placeholder.size(), value);
    }
  }
  return message;
}

TEST(ProfileInvalid, EveryFixtureFailsWithItsExactMessage) {
  ScopedEnv unset("SANDBOXER_TEST_SURELY_UNDEFINED", std::nullopt);
  std::set<fs::path> fixtures;
  for (const auto& entry : fs::directory_iterator(k_data_dir / "invalid")) {
    if (entry.path().extension() == ".yaml") {
      fixtures.insert(entry.path());
    }
  }
  ASSERT_GE(fixtures.size(), 40u);
  for (const auto& file : fixtures) {
    EXPECT_EQ(load_error(file), expected_message(file)) << file;
  }
}

TEST_F(ProfileTest, MissingFileNamesTheOsError) {
  EXPECT_EQ(load_error(m_dir / "absent.yaml"),
            (m_dir / "absent.yaml").string() + ": cannot read profile: No such file or directory");
}

TEST_F(ProfileTest, DirectoryIsNotAProfile) {
  fs::create_directories(m_dir / "dir.yaml");
  EXPECT_EQ(load_error(m_dir / "dir.yaml"),
            (m_dir / "dir.yaml").string() + ": cannot read profile: Is a directory");
}

TEST_F(ProfileTest, UnknownKeyInsideMergedParentPointsAtTheParent) {
  write("base.yaml", "driver: stub\nttl: { default: 1h, mx: 2h }\n");
  write("child.yaml", "extends: base\n");
  EXPECT_EQ(load_error(m_dir / "child.yaml"),
            at("base.yaml", 2, 21) + ": ttl: unknown key \"mx\", did you mean \"max\"?");
}

// --- extends -------------------------------------------------------------------------------

TEST(ProfileExtends, MergesThreeLevels) {
  Profile profile = load_profile(k_data_dir / "good" / "child.yaml", {});
  EXPECT_EQ(profile.name, "child"); // names are not inherited
  EXPECT_EQ(profile.chain, (std::vector<fs::path>{k_data_dir / "good" / "parent.yaml",
                                                  k_data_dir / "good" / "grandparent.yaml"}));
  EXPECT_EQ(profile.driver, "stub");
  EXPECT_EQ(profile.resolved["description"], "inherited by parent and child");
  EXPECT_FALSE(profile.resolved.contains("extends"));
  // Maps merge at every depth, the nearest file winning.
  EXPECT_EQ(profile.ttl.default_ttl, Seconds(3600));
  EXPECT_EQ(profile.ttl.max_ttl, Seconds(8 * 3600));
  EXPECT_EQ(profile.labels, (std::map<std::string, std::string>{
                                {"team", "infra"}, {"tier", "silver"}, {"owner", "ci"}}));
  EXPECT_EQ(profile.env, (std::map<std::string, std::string>{{"LANG", "C.UTF-8"}}));
  EXPECT_EQ(profile.driver_spec, (json{{"root", "/tmp/grandparent"},
                                       {"latency", {{"create", "2s"}, {"destroy", "1s"}}},
                                       {"fail", {{"create", 2}}}}));
  // Lists replace.
  EXPECT_EQ(profile.events, (json{{{"type", "http"}, {"url", "https://hub.example/events"}}}));
}

TEST(ProfileExtends, LocationsComeFromTheFileThatSuppliedTheValue) {
  fs::path dir = k_data_dir / "good";
  Profile profile = load_profile(dir / "child.yaml", {});
  EXPECT_EQ(profile.location_of("/stub/latency/create"), (dir / "parent.yaml").string() + ":9:13");
  EXPECT_EQ(profile.location_of("/stub/latency/destroy"),
            (dir / "grandparent.yaml").string() + ":18:14");
  EXPECT_EQ(profile.location_of("/stub/fail/create"), (dir / "child.yaml").string() + ":8:13");
  EXPECT_EQ(profile.location_of("/stub"), (dir / "child.yaml").string() + ":6:1");
  EXPECT_EQ(profile.location_of("/ttl/max"), (dir / "grandparent.yaml").string() + ":5:26");
  EXPECT_EQ(profile.location_of("/events/0/url"), (dir / "child.yaml").string() + ":5:24");
  // The replaced list leaves nothing of the grandparent's second sink behind.
  EXPECT_EQ(profile.locations.count("/events/1"), 0u);
  EXPECT_EQ(profile.locations.count("/name"), 0u);
}

TEST_F(ProfileTest, ParentFoundBesideTheFileBeforeTheSearchPath) {
  TempDir other;
  write_file(other / "base.yaml", "driver: stub\nlabels: { from: search }\n");
  write("base.yaml", "driver: stub\nlabels: { from: beside }\n");
  write("child.yaml", "extends: base\n");
  Profile profile = load("child.yaml", {other.path()});
  EXPECT_EQ(profile.labels.at("from"), "beside");
  EXPECT_EQ(profile.chain, (std::vector<fs::path>{m_dir / "base.yaml"}));
}

TEST_F(ProfileTest, ParentFoundInTheSearchPath) {
  TempDir first;
  TempDir second;
  write_file(second / "base.yml", "driver: stub\nlabels: { from: second }\n");
  write("child.yaml", "extends: base\n");
  Profile profile = load("child.yaml", {first.path(), second.path()});
  EXPECT_EQ(profile.labels.at("from"), "second");
  EXPECT_EQ(profile.chain, (std::vector<fs::path>{second / "base.yml"}));
}

TEST_F(ProfileTest, ParentByRelativePath) {
  write("shared/base.yaml", "driver: stub\n");
  write("team/child.yaml", "extends: ../shared/base.yaml\n");
  Profile profile = load("team/child.yaml");
  EXPECT_EQ(profile.chain, (std::vector<fs::path>{m_dir / "shared/base.yaml"}));
}

TEST_F(ProfileTest, NameNeverResolvesToTheExtendingFile) {
  // A user's ci.yaml can build on the system's ci.yaml of the same name.
  TempDir system;
  write_file(system / "ci.yaml", "driver: stub\nttl: 2h\nlabels: { layer: system }\n");
  write("ci.yaml", "extends: ci\nlabels: { layer: user }\n");
  Profile profile = load("ci.yaml", {m_dir.path(), system.path()});
  EXPECT_EQ(profile.chain, (std::vector<fs::path>{system / "ci.yaml"}));
  EXPECT_EQ(profile.labels.at("layer"), "user");
  EXPECT_EQ(profile.ttl.default_ttl, Seconds(7200));
}

TEST_F(ProfileTest, CycleThroughThreeFilesIsNamed) {
  write("a.yaml", "extends: b\ndriver: stub\n");
  write("b.yaml", "extends: c\n");
  write("c.yaml", "# c\nextends: a\n");
  auto name = [&](const char* file) { return (m_dir / file).string(); };
  EXPECT_EQ(load_error(m_dir / "a.yaml"),
            at("c.yaml", 2, 10) + ": extends cycle: " + name("a.yaml") + " -> " + name("b.yaml") +
                " -> " + name("c.yaml") + " -> " + name("a.yaml"));
}

TEST_F(ProfileTest, CycleMessageUsesThePathsAsGiven) {
  write("a.yaml", "extends: b\ndriver: stub\n");
  write("b.yaml", "extends: a\n");
  struct WorkingDirectory {
    fs::path previous = fs::current_path();
    ~WorkingDirectory() { fs::current_path(previous); }
  } restore;
  fs::current_path(m_dir.path());
  std::string message = load_error("a.yaml");
  EXPECT_EQ(message, "b.yaml:1:10: extends cycle: a.yaml -> b.yaml -> a.yaml");
}

TEST_F(ProfileTest, DriverAndSectionMayComeFromDifferentFiles) {
  write("base.yaml", "driver: stub\n");
  write("child.yaml", "extends: base\nstub: { root: /tmp/x }\n");
  EXPECT_EQ(load("child.yaml").driver_spec, (json{{"root", "/tmp/x"}}));
}

TEST_F(ProfileTest, SwitchingDriverNeedsTheParentSectionCleared) {
  write("base.yaml", "driver: stub\nstub: { root: /tmp/x }\n");
  write("docker.yaml", "extends: base\ndriver: docker\ndocker: { image: debian:12 }\n");
  EXPECT_EQ(load_error(m_dir / "docker.yaml"),
            at("base.yaml", 2, 1) + ": section \"stub\" does not match driver \"docker\"");
  write("cleared.yaml", "extends: base\ndriver: docker\nstub: ~\ndocker: { image: debian:12 }\n");
  Profile profile = load("cleared.yaml");
  EXPECT_EQ(profile.driver_spec, (json{{"image", "debian:12"}}));
  EXPECT_FALSE(profile.resolved.contains("stub"));
}

TEST_F(ProfileTest, MissingDriverNamesTheLoadedFile) {
  write("base.yaml", "ttl: 1h\n");
  write("child.yaml", "extends: base\n");
  EXPECT_EQ(load_error(m_dir / "child.yaml"),
            at("child.yaml", 1, 1) +
                ": no driver: set \"driver:\" in this profile or in a profile it extends");
}

TEST_F(ProfileTest, NullRemovesWhatTheParentSet) {
  write("base.yaml", "driver: stub\nlabels: { team: infra, tier: gold }\nenv: { A: a }\n"
                     "secrets: { token: { env: TOKEN } }\n");
  write("child.yaml", "extends: base\nlabels: { tier: ~ }\nenv: ~\nsecrets: { token: ~ }\n");
  Profile profile = load("child.yaml");
  EXPECT_EQ(profile.labels, (std::map<std::string, std::string>{{"team", "infra"}}));
  EXPECT_TRUE(profile.env.empty());
  EXPECT_TRUE(profile.secrets.empty());
  EXPECT_FALSE(profile.resolved.contains("env"));
  EXPECT_FALSE(profile.resolved.contains("secrets"));
}

TEST_F(ProfileTest, SecretReferenceIsReplacedWhole) {
  write("base.yaml", "driver: stub\nsecrets: { key: { env: KEY } }\n");
  write("child.yaml", "extends: base\nsecrets: { key: { file: /run/key } }\n");
  Profile profile = load("child.yaml");
  EXPECT_EQ(profile.secrets.at("key").kind, SecretRef::Kind::file);
  EXPECT_EQ(profile.secrets.at("key").source, "/run/key");
}

TEST_F(ProfileTest, ScalarReplacesMapAndMapReplacesScalar) {
  write("base.yaml", "driver: stub\nttl: { default: 30m, max: 4h }\n");
  write("short.yaml", "extends: base\nttl: 10m\n");
  Profile short_profile = load("short.yaml");
  EXPECT_EQ(short_profile.ttl.default_ttl, Seconds(600));
  EXPECT_EQ(short_profile.ttl.max_ttl, std::nullopt);
  write("base2.yaml", "driver: stub\nttl: none\n");
  write("capped.yaml", "extends: base2\nttl: { max: 2h }\n");
  Profile capped = load("capped.yaml");
  EXPECT_FALSE(capped.ttl.none);
  EXPECT_EQ(capped.ttl.max_ttl, Seconds(7200));
}

// --- variables -----------------------------------------------------------------------------

TEST_F(ProfileTest, VariablesExpandFromTheEnvironment) {
  ScopedEnv team("SANDBOXER_TEST_TEAM", "infra");
  ScopedEnv cpus("SANDBOXER_TEST_CPUS", "3");
  ScopedEnv empty("SANDBOXER_TEST_EMPTY", "");
  ScopedEnv unset("SANDBOXER_TEST_UNSET", std::nullopt);
  write("vars.yaml", R"(driver: stub
labels:
  team: ${SANDBOXER_TEST_TEAM}
  mixed: team-${SANDBOXER_TEST_TEAM}-${SANDBOXER_TEST_TEAM}
  fallback: ${SANDBOXER_TEST_UNSET:-nobody}
  empty_fallback: ${SANDBOXER_TEST_EMPTY:-was-empty}
  empty_plain: "[${SANDBOXER_TEST_EMPTY}]"
  literal: $${SANDBOXER_TEST_TEAM}
  dollar: cost $5 and $HOME
env:
  BLANK: ${SANDBOXER_TEST_UNSET:-}
stub:
  cpus: ${SANDBOXER_TEST_CPUS}
  quoted_cpus: "${SANDBOXER_TEST_CPUS}"
  list: ["${SANDBOXER_TEST_TEAM}", x] # in a flow list, quote it: "{" opens a map
)");
  Profile profile = load("vars.yaml");
  EXPECT_EQ(profile.labels.at("team"), "infra");
  EXPECT_EQ(profile.labels.at("mixed"), "team-infra-infra");
  EXPECT_EQ(profile.labels.at("fallback"), "nobody");
  EXPECT_EQ(profile.labels.at("empty_fallback"), "was-empty");
  EXPECT_EQ(profile.labels.at("empty_plain"), "[]");
  EXPECT_EQ(profile.labels.at("literal"), "${SANDBOXER_TEST_TEAM}");
  EXPECT_EQ(profile.labels.at("dollar"), "cost $5 and $HOME");
  EXPECT_EQ(profile.env.at("BLANK"), ""); // an expanded value never becomes null
  EXPECT_EQ(profile.driver_spec["cpus"], 3);
  EXPECT_EQ(profile.driver_spec["quoted_cpus"], "3");
  EXPECT_EQ(profile.driver_spec["list"], (json{"infra", "x"}));
}

TEST_F(ProfileTest, MissingVariableIsReportedAtItsScalar) {
  ScopedEnv unset("SANDBOXER_TEST_UNSET", std::nullopt);
  write("missing.yaml", "driver: stub\nlabels:\n  team: ${SANDBOXER_TEST_UNSET}\n");
  EXPECT_EQ(load_error(m_dir / "missing.yaml"),
            at("missing.yaml", 3, 9) +
                ": undefined variable \"SANDBOXER_TEST_UNSET\" (set it or write "
                "${SANDBOXER_TEST_UNSET:-default})");
}

TEST_F(ProfileTest, VariablesExpandInEachFileBeforeMerge) {
  // The parent's missing variable is reported in the parent even though the child overrides it:
  // expansion is per file, before merge.
  ScopedEnv unset("SANDBOXER_TEST_UNSET", std::nullopt);
  write("base.yaml", "driver: stub\nlabels: { team: \"${SANDBOXER_TEST_UNSET}\" }\n");
  write("child.yaml", "extends: base\nlabels: { team: infra }\n");
  EXPECT_EQ(load_error(m_dir / "child.yaml"),
            at("base.yaml", 2, 17) +
                ": undefined variable \"SANDBOXER_TEST_UNSET\" (set it or write "
                "${SANDBOXER_TEST_UNSET:-default})");
}

TEST_F(ProfileTest, ExtendsMayUseAVariable) {
  ScopedEnv parent("SANDBOXER_TEST_PARENT", "base");
  write("base.yaml", "driver: stub\n");
  write("child.yaml", "extends: ${SANDBOXER_TEST_PARENT}\n");
  EXPECT_EQ(load("child.yaml").chain, (std::vector<fs::path>{m_dir / "base.yaml"}));
}

// --- ttl -----------------------------------------------------------------------------------

TEST_F(ProfileTest, TtlForms) {
  struct Case {
    std::string ttl;
    bool none;
    std::optional<Seconds> default_ttl;
    std::optional<Seconds> max_ttl;
  };
  const std::vector<Case> cases = {
      {"none", true, std::nullopt, std::nullopt},
      {"\"none\"", true, std::nullopt, std::nullopt},
      {"45m", false, Seconds(2700), std::nullopt},
      {"1h30m", false, Seconds(5400), std::nullopt},
      {"{ default: 30m, max: 4h }", false, Seconds(1800), Seconds(14400)},
      {"{ default: 4h, max: 4h }", false, Seconds(14400), Seconds(14400)},
      {"{ default: 2h }", false, Seconds(7200), std::nullopt},
      {"{ max: 30m }", false, Seconds(1800), Seconds(1800)}, // default capped by a shorter max
      {"{ max: 1d }", false, Seconds(3600), Seconds(86400)},
      {"{}", false, Seconds(3600), std::nullopt},
      {"~", false, Seconds(3600), std::nullopt},
  };
  for (const auto& c : cases) {
    write("ttl.yaml", "driver: stub\nttl: " + c.ttl + "\n");
    TtlPolicy ttl = load("ttl.yaml").ttl;
    EXPECT_EQ(ttl.none, c.none) << c.ttl;
    EXPECT_EQ(ttl.default_ttl, c.default_ttl) << c.ttl;
    EXPECT_EQ(ttl.max_ttl, c.max_ttl) << c.ttl;
  }
}

TEST_F(ProfileTest, TtlErrors) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"ttl: 3x", ":2:6: ttl: invalid duration \"3x\" (use 90s, 15m, 2h, 1d, 1h30m)"},
      {"ttl: never", ":2:6: ttl: invalid duration \"never\" (use 90s, 15m, 2h, 1d, 1h30m)"},
      {"ttl: true", ":2:6: ttl: invalid duration \"true\" (use 90s, 15m, 2h, 1d, 1h30m)"},
      {"ttl: { default: none }",
       ":2:17: ttl.default: invalid duration \"none\" (use 90s, 15m, 2h, 1d, 1h30m)"},
      {"ttl: { default: [1h] }",
       ":2:8: ttl.default: invalid duration \"[\"1h\"]\" (use 90s, 15m, 2h, 1d, 1h30m)"},
      {"ttl: { max: 1h, default: 61m }", ":2:26: ttl.default 1h1m is longer than ttl.max 1h"},
      {"ttl: { max: 1x }", ":2:13: ttl.max: invalid duration \"1x\" (use 90s, 15m, 2h, 1d, 1h30m)"},
      {"ttl: { deafult: 1h }", ":2:8: ttl: unknown key \"deafult\", did you mean \"default\"?"},
  };
  for (const auto& [ttl, message] : cases) {
    write("ttl.yaml", "driver: stub\n" + ttl + "\n");
    EXPECT_EQ(load_error(m_dir / "ttl.yaml"), (m_dir / "ttl.yaml").string() + message) << ttl;
  }
}

// --- secrets -------------------------------------------------------------------------------

TEST_F(ProfileTest, SecretForms) {
  ScopedEnv home("HOME", "/home/tester");
  write("secrets.yaml", R"(driver: stub
secrets:
  api_key: { env: E2B_API_KEY }
  home_file: { file: ~/.config/e2b/key }
  bare_home: { file: "~" }
  absolute: { file: /run/secrets/token }
  relative: { file: keys/token }
  other_user: { file: ~bob/key }
)");
  Profile profile = load("secrets.yaml");
  auto source = [&](const char* name) { return profile.secrets.at(name).source; };
  EXPECT_EQ(profile.secrets.at("api_key").kind, SecretRef::Kind::env);
  EXPECT_EQ(source("api_key"), "E2B_API_KEY");
  EXPECT_EQ(profile.secrets.at("home_file").kind, SecretRef::Kind::file);
  EXPECT_EQ(source("home_file"), "/home/tester/.config/e2b/key");
  EXPECT_EQ(source("bare_home"), "/home/tester");
  EXPECT_EQ(source("absolute"), "/run/secrets/token");
  EXPECT_EQ(source("relative"), "keys/token");
  EXPECT_EQ(source("other_user"), "~bob/key");
  // The resolved document keeps references, never values.
  EXPECT_EQ(profile.resolved["secrets"]["api_key"], (json{{"env", "E2B_API_KEY"}}));
  EXPECT_EQ(profile.resolved["secrets"]["home_file"],
            (json{{"file", "/home/tester/.config/e2b/key"}}));
}

TEST_F(ProfileTest, SecretValueIsNeverRead) {
  // Even when the variable is set, only its name is kept.
  ScopedEnv key("SANDBOXER_TEST_KEY", "sk-should-not-appear");
  write("secret.yaml", "driver: stub\nsecrets: { key: { env: SANDBOXER_TEST_KEY } }\n");
  Profile profile = load("secret.yaml");
  EXPECT_EQ(profile.resolved.dump().find("sk-should-not-appear"), std::string::npos);
}

TEST_F(ProfileTest, SecretErrors) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"secrets: { key: sk-123 }",
       ":2:17: secrets.key: secrets are references only: write {env: VAR} or {file: PATH}"},
      {"secrets: { key: [a] }",
       ":2:12: secrets.key: secrets are references only: write {env: VAR} or {file: PATH}"},
      {"secrets: { key: {} }",
       ":2:12: secrets.key: write exactly one of {env: VAR} or {file: PATH}"},
      {"secrets: { key: { file: \"\" } }", ":2:25: secrets.key.file: expected a file path"},
      {"secrets: { key: { env: 9LIVES } }",
       ":2:24: secrets.key.env: expected an environment variable name"},
      {"secrets: [key]", ":2:1: secrets: expected a map of name: {env: VAR} or {file: PATH}"},
  };
  for (const auto& [secrets, message] : cases) {
    write("secrets.yaml", "driver: stub\n" + secrets + "\n");
    EXPECT_EQ(load_error(m_dir / "secrets.yaml"), (m_dir / "secrets.yaml").string() + message)
        << secrets;
  }
}

// --- labels, env, events -------------------------------------------------------------------

TEST_F(ProfileTest, LabelKeysMayUseTheDocumentedCharacters) {
  write("labels.yaml", "driver: stub\nlabels: { a.b_c/D-9: x, sandboxer: y, my.sandboxer.x: z }\n");
  EXPECT_EQ(load("labels.yaml").labels.size(), 3u);
}

TEST_F(ProfileTest, EventSinksAreCheckedAndNormalized) {
  write("events.yaml", R"(driver: stub
events:
  - { type: jsonl, path: ~/events.jsonl }
  - type: http
    url: https://hub.example/events
    retries: 5
    timeout: 2s
    headers: { X-Team: infra }
    token: { env: HUB_TOKEN }
  - { type: stderr }
  - { type: exec, command: [notify, --quiet] }
)");
  json events = load("events.yaml").events;
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(events[0]["path"], std::string(std::getenv("HOME")) + "/events.jsonl");
  EXPECT_EQ(events[1], (json{{"type", "http"},
                             {"url", "https://hub.example/events"},
                             {"retries", 5},
                             {"timeout", "2s"},
                             {"headers", {{"X-Team", "infra"}}},
                             {"token", {{"env", "HUB_TOKEN"}}}}));
  EXPECT_EQ(events[3]["command"], (json{"notify", "--quiet"}));
}

TEST_F(ProfileTest, BadEventSinksNameTheFileLineAndWhatToWrite) {
  auto error_of = [&](const std::string& sink) {
    return load_error(write("sink.yaml", "driver: stub\nevents:\n  - " + sink + "\n"));
  };
  EXPECT_EQ(error_of("{ type: http }"),
            at("sink.yaml", 3, 5) +
                ": events[0]: a http sink needs \"url\" (where events are POSTed)");
  EXPECT_EQ(error_of("{ type: http, url: https://h/e, headers: { Authorization: Bearer x } }"),
            at("sink.yaml", 3, 48) +
                ": events[0].headers: no Authorization header inline; use token: {env: VAR} or "
                "{file: PATH}, which is sent as a bearer token");
  EXPECT_EQ(error_of("{ type: http, url: https://h/e, token: abc }"),
            at("sink.yaml", 3, 44) + ": events[0].token: secrets are references only: write "
                                     "{env: VAR} or {file: PATH}");
  EXPECT_EQ(error_of("{ type: jsonl, path: events.jsonl }"),
            at("sink.yaml", 3, 26) + ": events[0].path: expected an absolute path (or ~/...), "
                                     "since commands run from any directory");
  EXPECT_EQ(error_of("{ type: exec, argv: [x] }"),
            at("sink.yaml", 3, 19) +
                ": events[0]: unknown key \"argv\" (known keys: type, command, timeout)");
  EXPECT_EQ(error_of("{ type: stderr, timeout: soon }"),
            at("sink.yaml", 3, 21) + ": events[0]: unknown key \"timeout\" (known keys: type)");
  EXPECT_EQ(error_of("{ type: exec, command: [x], timeout: soon }"),
            at("sink.yaml", 3, 42) +
                ": events[0].timeout: invalid duration \"soon\" (use 500ms, 5s, 1m)");
}

TEST_F(ProfileTest, ConfigFileHoldsGlobalSinksAndDeliverySettings) {
  fs::path file = write("config.yaml", R"(events:
  - { type: jsonl, path: /var/log/sandboxer/events.jsonl }
delivery: { wait: 500ms }
expiring: { window: 15m }
)");
  Config config = load_config(file);
  ASSERT_EQ(config.events.size(), 1u);
  EXPECT_EQ(config.delivery_wait, std::chrono::milliseconds(500));
  EXPECT_EQ(config.expiring_window, Seconds(900));
  fs::path bad = write("bad.yaml", "events: []\ndelivery: { wiat: 2s }\n");
  try {
    load_config(bad);
    FAIL() << "a misspelt key loaded";
  } catch (const ProfileError& e) {
    EXPECT_EQ(std::string(e.what()),
              at("bad.yaml", 2, 13) + ": delivery: unknown key \"wiat\", did you mean \"wait\"?");
  }
}

// --- locations -----------------------------------------------------------------------------

TEST_F(ProfileTest, LocationsOfNestedKeys) {
  write("loc.yaml", R"(driver: stub
ttl:
  default: 30m
labels: { team: infra, app/name: api }
events:
  - type: stderr
stub:
  latency:
    create: 500ms
  command: [a, b]
)");
  Profile profile = load("loc.yaml");
  EXPECT_EQ(profile.locations.at("/driver"), at("loc.yaml", 1, 9)); // a scalar: the value
  EXPECT_EQ(profile.locations.at("/ttl"), at("loc.yaml", 2, 1));    // a map: its key
  EXPECT_EQ(profile.locations.at("/ttl/default"), at("loc.yaml", 3, 12));
  EXPECT_EQ(profile.locations.at("/labels/team"), at("loc.yaml", 4, 17));
  EXPECT_EQ(profile.locations.at("/labels/app~1name"), at("loc.yaml", 4, 34));
  EXPECT_EQ(profile.locations.at("/events/0"), at("loc.yaml", 6, 5));
  EXPECT_EQ(profile.locations.at("/events/0/type"), at("loc.yaml", 6, 11));
  EXPECT_EQ(profile.locations.at("/stub/latency/create"), at("loc.yaml", 9, 13));
  EXPECT_EQ(profile.locations.at("/stub/command/1"), at("loc.yaml", 10, 16));
  // Unknown pointers fall back to the nearest known ancestor, then to the file.
  EXPECT_EQ(profile.location_of("/stub/latency/destroy"), at("loc.yaml", 8, 3));
  EXPECT_EQ(profile.location_of("/stub/latency/create/deeper"), at("loc.yaml", 9, 13));
  EXPECT_EQ(profile.location_of("/docker/image"), (m_dir / "loc.yaml").string());
  EXPECT_EQ(profile.location_of(""), (m_dir / "loc.yaml").string());
}

// --- resolved and hash ---------------------------------------------------------------------

TEST_F(ProfileTest, HashIgnoresKeyOrderAndStyle) {
  write("one.yaml", R"(driver: stub
ttl: { default: 30m, max: 4h }
labels: { team: infra, tier: gold }
stub: { latency: { create: 1s }, root: /tmp/x }
)");
  write("two.yaml", R"(# the same profile, written differently
stub:
  root: /tmp/x
  latency:
    create: "1s"
labels:
  tier: gold
  team: infra
ttl:
  max: 4h
  default: 30m
driver: "stub"
name: one
)");
  Profile one = load("one.yaml");
  Profile two = load("two.yaml");
  EXPECT_EQ(one.resolved, two.resolved);
  EXPECT_EQ(one.hash, two.hash);
  ASSERT_EQ(one.hash.size(), 7u + 64u);
  EXPECT_TRUE(one.hash.starts_with("sha256:"));
}

TEST_F(ProfileTest, HashChangesWithContent) {
  write("a.yaml", "driver: stub\nlabels: { team: infra }\n");
  std::string before = load("a.yaml").hash;
  write("a.yaml", "driver: stub\nlabels: { team: platform }\n");
  std::string after = load("a.yaml").hash;
  EXPECT_NE(before, after);
  write("a.yaml", "driver: stub\nlabels: { team: infra }\n");
  EXPECT_EQ(load("a.yaml").hash, before);
}

TEST_F(ProfileTest, HashCoversInheritedValues) {
  write("base.yaml", "driver: stub\nttl: 1h\n");
  write("child.yaml", "extends: base\n");
  std::string before = load("child.yaml").hash;
  write("base.yaml", "driver: stub\nttl: 2h\n");
  EXPECT_NE(load("child.yaml").hash, before);
}

// --- the example profiles ------------------------------------------------------------------

TEST(ProfileExamples, EveryExampleLoads) {
  std::set<std::string> names;
  for (const auto& entry : fs::directory_iterator(k_examples_dir)) {
    if (entry.path().extension() != ".yaml" && entry.path().extension() != ".yml") {
      continue;
    }
    SCOPED_TRACE(entry.path().string());
    Profile profile;
    ASSERT_NO_THROW(profile = load_profile(entry.path(), {k_examples_dir}));
    EXPECT_FALSE(profile.driver.empty());
    EXPECT_TRUE(profile.resolved.contains(profile.driver)) << "example without its driver section";
    names.insert(entry.path().stem().string());
  }
  for (const char* expected : {"default", "stub", "stub-faulty", "base", "ci", "docker-debian",
                               "compose-remote", "qemu-tiny", "e2b-base", "modal-small"}) {
    EXPECT_TRUE(names.count(expected)) << expected;
  }
}

TEST(ProfileExamples, DefaultIsADockerContainerThatNeedsNoRegistry) {
  Profile profile = load_profile(k_examples_dir / "default.yaml", {});
  EXPECT_EQ(profile.driver, "docker");
  EXPECT_EQ(profile.driver_spec["image"], "sandboxer/busybox:local");
  EXPECT_EQ(profile.driver_spec["pull"], "never");
  EXPECT_EQ(profile.ttl.default_ttl, Seconds(30 * 60));
  EXPECT_EQ(profile.ttl.max_ttl, Seconds(4 * 3600));
  EXPECT_FALSE(profile.labels.empty());
}

TEST(ProfileExamples, StubNeedsNoEngine) {
  Profile profile = load_profile(k_examples_dir / "stub.yaml", {});
  EXPECT_EQ(profile.driver, "stub");
  EXPECT_EQ(profile.driver_spec, json::object());
}

// The shipped ci profile isolates: a container with the checkout (the current directory) at /src.
TEST(ProfileExamples, CiIsAContainerWithTheCheckout) {
  ScopedEnv job("CI_JOB_ID", std::nullopt);
  // ${PWD}: the shell's directory, as a CI job's script has it.
  ScopedEnv pwd("PWD", "/builds/group/project");
  Profile profile = load_profile(k_examples_dir / "ci.yaml", {});
  EXPECT_EQ(profile.driver, "docker");
  EXPECT_EQ(profile.labels.at("ci-job"), "local");
  EXPECT_EQ(profile.ttl.default_ttl, Seconds(45 * 60));
  EXPECT_EQ(profile.env.at("CI"), "true");
  EXPECT_EQ(profile.driver_spec["workdir"], "/src");
  EXPECT_EQ(profile.driver_spec["mounts"][0]["source"], "/builds/group/project");
}

TEST(ProfileExamples, StubFaultyKeepsLatencyAsText) {
  Profile profile = load_profile(k_examples_dir / "stub-faulty.yaml", {});
  EXPECT_EQ(profile.driver_spec,
            (json{{"latency", {{"create", "500ms"}}}, {"fail", {{"create", 2}}}}));
}

TEST(ProfileExamples, CloudExamplesReferenceTheirKeys) {
  Profile e2b = load_profile(k_examples_dir / "e2b-base.yaml", {});
  EXPECT_EQ(e2b.secrets.at("api_key").source, "E2B_API_KEY");
  EXPECT_EQ(e2b.driver_spec["template"], "base");
  Profile modal = load_profile(k_examples_dir / "modal-small.yaml", {});
  EXPECT_EQ(modal.secrets.at("token_id").source, "MODAL_TOKEN_ID");
  EXPECT_EQ(modal.secrets.at("token_secret").source, "MODAL_TOKEN_SECRET");
  Profile docker = load_profile(k_examples_dir / "docker-debian.yaml", {});
  EXPECT_EQ(docker.driver_spec, (json{{"image", "sandboxer/busybox:local"},
                                      {"command", {"sleep", "infinity"}},
                                      {"cpus", 1},
                                      {"memory", "256m"}}));
}

// --- search path ---------------------------------------------------------------------------

// Where the installed profiles are: PREFIX/share/sandboxer/profiles, beside PREFIX/bin.
fs::path shipped_profiles() {
  return fs::read_symlink("/proc/self/exe").parent_path().parent_path() / "share" / "sandboxer" /
         "profiles";
}

TEST(ProfileSearch, SearchPathOrder) {
  ScopedEnv profiles("SANDBOXER_PROFILES", "/a:/b::");
  ScopedEnv xdg("XDG_CONFIG_HOME", "/xdg");
  EXPECT_EQ(profile_search_path(std::string("/cli")),
            (std::vector<fs::path>{"/cli", "/a", "/b", "./profiles", "/xdg/sandboxer/profiles",
                                   "/etc/sandboxer/profiles", shipped_profiles()}));
}

TEST(ProfileSearch, SearchPathFallsBackToHomeConfig) {
  ScopedEnv profiles("SANDBOXER_PROFILES", std::nullopt);
  ScopedEnv xdg("XDG_CONFIG_HOME", "");
  ScopedEnv home("HOME", "/home/tester");
  EXPECT_EQ(profile_search_path(std::nullopt),
            (std::vector<fs::path>{"./profiles", "/home/tester/.config/sandboxer/profiles",
                                   "/etc/sandboxer/profiles", shipped_profiles()}));
}

TEST(ProfileSearch, FirstDirectoryWins) {
  TempDir first;
  TempDir second;
  write_file(first / "ci.yaml", "driver: stub\n");
  write_file(second / "ci.yaml", "driver: stub\n");
  write_file(second / "only.yml", "driver: stub\n");
  write_file(first / "both.yml", "driver: stub\n");
  write_file(first / "both.yaml", "driver: stub\n");
  std::vector<fs::path> search = {first.path(), second.path()};
  EXPECT_EQ(find_profile("ci", search), first / "ci.yaml");
  EXPECT_EQ(find_profile("only", search), second / "only.yml");
  EXPECT_EQ(find_profile("both", search), first / "both.yaml");
}

TEST(ProfileSearch, PathsAreTakenAsFiles) {
  TempDir dir;
  write_file(dir / "ci.yaml", "driver: stub\n");
  EXPECT_EQ(find_profile((dir / "ci.yaml").string(), {}), dir / "ci.yaml");
  // With a ".yaml" ending, the name is a path even without a '/': no search happens.
  try {
    find_profile("ci.yaml", {dir.path()});
    FAIL() << "expected NotFoundError";
  } catch (const NotFoundError& e) {
    EXPECT_EQ(std::string(e.what()),
              "profile file ci.yaml not found (a value with \"/\" or a .yaml/.yml ending is read "
              "as a path; give a bare name to search the profile directories)");
  }
}

TEST(ProfileSearch, NotFoundListsWhereItLookedAndGuesses) {
  TempDir first;
  TempDir second;
  write_file(second / "cj.yaml", "driver: stub\n");
  try {
    find_profile("ci", {first.path(), second.path(), "/nonexistent/dir"});
    FAIL() << "expected NotFoundError";
  } catch (const NotFoundError& e) {
    EXPECT_EQ(e.code(), ExitCode::not_found);
    EXPECT_EQ(std::string(e.what()),
              "profile \"ci\" not found; looked in: " + first.path().string() + ", " +
                  second.path().string() + ", /nonexistent/dir; did you mean \"cj\"?");
  }
  try {
    find_profile("production", {first.path()});
    FAIL() << "expected NotFoundError";
  } catch (const NotFoundError& e) {
    EXPECT_EQ(std::string(e.what()),
              "profile \"production\" not found; looked in: " + first.path().string());
  }
}

TEST(ProfileSearch, ListProfilesFirstOneWins) {
  TempDir first;
  TempDir second;
  write_file(first / "ci.yaml", "driver: stub\n");
  write_file(first / "notes.txt", "not a profile\n");
  fs::create_directories(first / "dir.yaml");
  write_file(second / "ci.yaml", "driver: stub\n");
  write_file(second / "dev.yml", "driver: stub\n");
  write_file(second / "alpha.yaml", "driver: stub\n");
  auto listed = list_profiles({first.path(), "/nonexistent/dir", second.path()});
  EXPECT_EQ(listed, (std::vector<std::pair<std::string, fs::path>>{{"alpha", second / "alpha.yaml"},
                                                                   {"ci", first / "ci.yaml"},
                                                                   {"dev", second / "dev.yml"}}));
}

// --- closest_match -------------------------------------------------------------------------

TEST(ProfileClosestMatch, SuggestsNearWords) {
  const std::vector<std::string> keys = {"name",   "description", "extends", "driver", "ttl",
                                         "labels", "env",         "secrets", "events"};
  EXPECT_EQ(closest_match("ttll", keys), "ttl");
  EXPECT_EQ(closest_match("lables", keys), "labels");
  EXPECT_EQ(closest_match("descripton", keys), "description");
  EXPECT_EQ(closest_match("TTL", keys), "ttl");
  EXPECT_EQ(closest_match("secret", keys), "secrets");
  EXPECT_EQ(closest_match("dokcer", {"docker", "stub"}), "docker");
  EXPECT_EQ(closest_match("imgae", {"image", "command"}), "image");
}

TEST(ProfileClosestMatch, StaysQuietWhenNothingIsClose) {
  EXPECT_EQ(closest_match("flavour", {"name", "driver", "ttl"}), std::nullopt);
  EXPECT_EQ(closest_match("ab", {"e2b"}), std::nullopt);
  EXPECT_EQ(closest_match("x", {"y"}), std::nullopt);
  EXPECT_EQ(closest_match("ttl", {}), std::nullopt);
}

TEST(ProfileClosestMatch, LongWordsAllowAThird) {
  // 12 letters: up to 4 edits, but not 5.
  EXPECT_EQ(closest_match("abcdefghijkl", {"abcdefghwxyz"}), "abcdefghwxyz");
  EXPECT_EQ(closest_match("abcdefghijkl", {"abcdefgvwxyz"}), std::nullopt);
}

// The published profile schema's durations ($defs/duration, lifetime, duration_ms) and the parsers
// must agree on every spelling: a validator that passes what sandboxer refuses (ttl: 45mins) or
// refuses what it takes is the bug of issue 35. So the patterns are read from the schema itself.

json embedded_schema(std::string_view name) {
  for (const auto& file : schemas::embedded()) {
    if (file.name == name) {
      return json::parse(file.text);
    }
  }
  ADD_FAILURE() << "no embedded schema " << name;
  return json::object();
}

// Whether `schema` accepts the string `text`: the keywords these definitions use, evaluated as a
// validator does (a pattern is searched, not matched whole); any other keyword fails the test, so
// that a new one cannot be silently ignored here.
bool accepts(const json& defs, const json& schema, const std::string& text) {
  bool ok = true;
  for (const auto& [keyword, value] : schema.items()) {
    if (keyword == "$ref") {
      const std::string ref = value.get<std::string>();
      ok = ok && ref.starts_with("#/$defs/") && accepts(defs, defs.at(ref.substr(8)), text);
    } else if (keyword == "pattern") {
      ok = ok && std::regex_search(text, std::regex(value.get<std::string>()));
    } else if (keyword == "minLength") {
      ok = ok && text.size() >= value.get<size_t>();
    } else if (keyword == "not") {
      ok = ok && !accepts(defs, value, text);
    } else if (keyword == "anyOf") {
      ok = ok && std::any_of(value.begin(), value.end(),
                             [&](const json& branch) { return accepts(defs, branch, text); });
    } else if (keyword != "type" && keyword != "description") {
      ADD_FAILURE() << "keyword " << keyword << " is not evaluated by this test";
    }
  }
  return ok;
}

TEST(ProfileSchema, DurationPatternsAcceptExactlyWhatTheParsersRead) {
  const json defs = embedded_schema("profile")["$defs"];
  // Past 100 years (36500d) parse_duration refuses a value the pattern cannot count: a bound, like
  // ttl.max, not the grammar, so the table stays below it.
  const std::vector<std::string> table = {
      "1h30m", "90s",    "1w2d",    "30m1h",       "45mins",  "1.5h",    "0s",         "",
      "5",     "1h 30m", " 1h",     "-1h",         "1H",      "+1h",     "1d2h3m4s",   "2w",
      "h",     "1hh",    "1h1h",    "01h",         "00s",     "0h0m",    "0w0d0h0m0s", "1m0s",
      "500ms", "0ms",    "1s500ms", "ms",          "5 ms",    "1m5ms",   "1ms1s",      "36500d",
      "1w1w",  "1s1m",   "${TTL}",  "${TTL:-30m}", "2 hours", "10 secs", "1h\n",       "\n1h"};
  for (const auto& text : table) {
    // A value holding ${VAR} is checked after expansion: the schema lets it through as written.
    const bool expanded = text.find("${") != std::string::npos;
    auto seconds = parse_duration(text);
    EXPECT_EQ(accepts(defs, defs["duration"], text), seconds.has_value() || expanded)
        << "duration \"" << text << "\"";
    EXPECT_EQ(accepts(defs, defs["lifetime"], text),
              (seconds && *seconds >= Seconds(1)) || expanded)
        << "lifetime \"" << text << "\"";
    EXPECT_EQ(accepts(defs, defs["duration_ms"], text),
              parse_duration_ms(text).has_value() || expanded)
        << "duration_ms \"" << text << "\"";
  }
}

// Each driver's schema stands alone (`sandboxer schema drivers/docker`), and so carries its own
// copy of the definitions it uses: the copies are the profile's, and every "#/$defs/..." it
// refers to is its own.
void collect_refs(const json& node, std::vector<std::string>& out) {
  if (node.is_object()) {
    if (node.contains("$ref") && node["$ref"].is_string()) {
      out.push_back(node["$ref"].get<std::string>());
    }
    for (const auto& [key, value] : node.items()) {
      collect_refs(value, out);
    }
  } else if (node.is_array()) {
    for (const auto& value : node) {
      collect_refs(value, out);
    }
  }
}

TEST(ProfileSchema, DriverSchemasCarryTheProfilesDurationDefinitions) {
  const json profile_defs = embedded_schema("profile")["$defs"];
  int drivers = 0;
  for (const auto& file : schemas::embedded()) {
    if (!file.name.starts_with("drivers/")) {
      continue;
    }
    ++drivers;
    const json schema = json::parse(file.text);
    const json defs = schema.value("$defs", json::object());
    for (const auto& [name, definition] : defs.items()) {
      ASSERT_TRUE(profile_defs.contains(name)) << file.name << ": $defs/" << name;
      EXPECT_EQ(definition, profile_defs[name]) << file.name << ": $defs/" << name;
    }
    std::vector<std::string> refs;
    collect_refs(schema, refs);
    for (const auto& ref : refs) {
      ASSERT_TRUE(ref.starts_with("#/$defs/")) << file.name << ": " << ref;
      EXPECT_TRUE(defs.contains(ref.substr(8))) << file.name << ": " << ref << " points nowhere";
    }
  }
  EXPECT_GE(drivers, 5);
}

} // namespace
} // namespace sandboxer
