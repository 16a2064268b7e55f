// The modal driver's parts that need no server: its spec, the server URL rules and the token
// checks done before the gRPC module is loaded. The driver against tests/fake_modal is
// tests/e2e/test_modal*.sh.
#include <cstdlib>
#include <gtest/gtest.h>

#include <sandboxer/error.hpp>

#include "drivers/modal/modal_factory.hpp"
#include "drivers/modal/spec.hpp"

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

} // namespace
} // namespace sandboxer::drivers::modal
