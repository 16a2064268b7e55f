// The e2b driver's pure parts: its spec, endpoints, key check, Connect framing and HTTP helpers.
// The driver against the fake E2B server is in test_drivers_e2b_fake.cpp.
#include <cstdlib>
#include <gtest/gtest.h>

#include <sandboxer/base64.hpp>
#include <sandboxer/error.hpp>

#include "drivers/e2b/api.hpp"
#include "drivers/e2b/connect.hpp"
#include "drivers/e2b/spec.hpp"
#include "support/catalog.hpp"

namespace sandboxer::drivers::e2b {
namespace {

using nlohmann::json;

// Sets (or unsets) an environment variable for one test and restores it afterwards.
class ScopedEnv {
public:
  ScopedEnv(const char* name, const char* value) : m_name(name) {
    if (const char* old = std::getenv(name)) {
      m_old = old;
    }
    value ? setenv(name, value, 1) : unsetenv(name);
  }
  ~ScopedEnv() { m_old ? setenv(m_name, m_old->c_str(), 1) : unsetenv(m_name); }

private:
  const char* m_name;
  std::optional<std::string> m_old;
};

std::string pointer_of(const json& section) {
  try {
    parse_spec(section);
  } catch (const SpecError& e) {
    return e.pointer() + ": " + e.what();
  }
  return "no error";
}

TEST(E2bSpec, DefaultsAreFilledInAndRoundTrip) {
  json normalized = testing::builtin_catalog().find("e2b").parse_spec(json::object());
  EXPECT_EQ(normalized["template"], "base");
  EXPECT_EQ(normalized["on_expiry"], "kill");
  EXPECT_EQ(normalized["ttl_grace"], "1m");
  EXPECT_FALSE(normalized.contains("api_url"));
  json full = {{"template", "code-interpreter-v1"},
               {"env", {{"A", "1"}}},
               {"metadata", {{"team", "infra"}}},
               {"on_expiry", "pause"},
               {"internet_access", false},
               {"api_url", "http://127.0.0.1:8080/"},
               {"retries", 2}};
  json once = testing::builtin_catalog().find("e2b").parse_spec(full);
  EXPECT_EQ(once["api_url"], "http://127.0.0.1:8080");
  EXPECT_EQ(once["internet_access"], false);
  EXPECT_EQ(testing::builtin_catalog().find("e2b").parse_spec(once), once);
}

TEST(E2bSpec, BadValuesNameTheirKey) {
  EXPECT_EQ(pointer_of({{"cpu", 2}}).substr(0, 5), "/cpu:");
  EXPECT_NE(pointer_of({{"memory", "1g"}}).find("from the template"), std::string::npos);
  EXPECT_EQ(pointer_of({{"on_expiry", "stop"}}), "/on_expiry: expected kill or pause, not stop");
  EXPECT_EQ(pointer_of({{"internet_access", "yes"}}), "/internet_access: expected true or false");
  EXPECT_NE(pointer_of({{"templat", "base"}}).find("did you mean"), std::string::npos);
  EXPECT_EQ(pointer_of({{"metadata", {{"sandboxer.id", "x"}}}}).substr(0, 23),
            "/metadata/sandboxer.id:");
  EXPECT_NE(pointer_of({{"api_url", "http://api.example.com"}}).find("loopback"),
            std::string::npos);
  EXPECT_NE(pointer_of({{"api_url", "ftp://x"}}).find("https://"), std::string::npos);
  EXPECT_EQ(pointer_of({{"api_url", "http://localhost:9/"}}), "no error");
  EXPECT_EQ(pointer_of({{"retries", 11}}).substr(0, 9), "/retries:");
}

TEST(E2bEndpoints, FollowTheSdkOrderProfileThenEnvironmentThenPublic) {
  ScopedEnv url("E2B_API_URL", nullptr);
  ScopedEnv domain("E2B_DOMAIN", nullptr);
  Endpoints endpoints = resolve_endpoints(parse_spec(json::object()));
  EXPECT_EQ(endpoints.api_url, "https://api.e2b.app");
  EXPECT_EQ(envd_base(endpoints, "iabc", std::nullopt), "https://49983-iabc.e2b.app");
  EXPECT_EQ(envd_base(endpoints, "iabc", "eu.e2b.app"), "https://49983-iabc.eu.e2b.app");
  {
    ScopedEnv set_domain("E2B_DOMAIN", "e2b.example.org");
    EXPECT_EQ(resolve_endpoints(parse_spec(json::object())).api_url, "https://api.e2b.example.org");
    ScopedEnv set_url("E2B_API_URL", "http://127.0.0.1:3000/");
    EXPECT_EQ(resolve_endpoints(parse_spec(json::object())).api_url, "http://127.0.0.1:3000");
    EXPECT_EQ(resolve_endpoints(parse_spec({{"api_url", "https://mine.example"}})).api_url,
              "https://mine.example");
  }
  ScopedEnv plain("E2B_API_URL", "http://api.example.com");
  EXPECT_THROW(resolve_endpoints(parse_spec(json::object())), DriverError);
}

TEST(E2bKey, MalformedKeysAreRefusedWithoutQuotingThem) {
  EXPECT_NO_THROW(check_api_key("e2b_0123456789abcdef0123456789abcdef01234567"));
  for (std::string bad : {"", "sk-0123456789abcdef0123456789", "e2b_short",
                          "e2b_0123456789abcdef 0123456789abcdef", "e2b_0123456789abcdef\n"}) {
    try {
      check_api_key(bad);
      ADD_FAILURE() << "accepted a malformed key";
    } catch (const DriverError& e) {
      EXPECT_EQ(e.code(), ExitCode::usage);
      if (!bad.empty()) {
        EXPECT_EQ(std::string(e.what()).find(bad), std::string::npos) << e.what();
      }
    }
  }
}

TEST(E2bConnect, EnvelopesSurviveArbitrarySplits) {
  std::string stream = connect::envelope({{"event", {{"start", {{"pid", 7}}}}}}) +
                       connect::envelope({{"event", {{"end", {{"exitCode", 3}}}}}}) +
                       connect::envelope(json::object(), connect::k_end_stream);
  EXPECT_EQ(static_cast<unsigned char>(stream[0]), 0);
  EXPECT_EQ(static_cast<unsigned char>(stream[4]),
            std::string(R"({"event":{"start":{"pid":7}}})").size());
  for (size_t piece : {1, 2, 5, 7, 1000}) {
    std::vector<std::pair<int, json>> seen;
    connect::Decoder decoder(
        [&](std::uint8_t flags, const json& m) { seen.emplace_back(flags, m); });
    for (size_t at = 0; at < stream.size(); at += piece) {
      EXPECT_TRUE(decoder.feed(std::string_view(stream).substr(at, piece)));
    }
    ASSERT_EQ(seen.size(), 3u) << "piece " << piece;
    EXPECT_EQ(seen[0].second["event"]["start"]["pid"], 7);
    EXPECT_EQ(seen[2].first, connect::k_end_stream);
    EXPECT_TRUE(decoder.ended());
  }
  connect::Decoder plain([](std::uint8_t, const json&) { FAIL(); });
  EXPECT_FALSE(plain.feed(R"({"code":"unauthenticated","message":"no"})"));
  EXPECT_TRUE(plain.malformed());
  EXPECT_EQ(plain.raw(), R"({"code":"unauthenticated","message":"no"})");
}

TEST(E2bConnect, Base64RoundTrips) {
  for (const std::string& text :
       std::vector<std::string>{"", "a", "ab", "abc", "abcd", std::string("\0\xff\x10", 3)}) {
    EXPECT_EQ(base64_decode(base64_encode(text)), text);
  }
  EXPECT_EQ(base64_encode("user:"), "dXNlcjo=");
  EXPECT_THROW(base64_decode("a*b"), std::invalid_argument);
}

TEST(E2bApi, RetryAfterAndErrorBodies) {
  http::Response response;
  response.headers["retry-after"] = "3";
  EXPECT_EQ(retry_after(response, std::chrono::seconds(60)), std::chrono::seconds(3));
  EXPECT_EQ(retry_after(response, std::chrono::seconds(1)), std::chrono::seconds(1));
  response.headers = {{"ratelimit-reset", "2"}};
  EXPECT_EQ(retry_after(response, std::chrono::seconds(60)), std::chrono::seconds(2));
  response.headers = {{"retry-after", "Wed, 21 Oct 2015 07:28:00 GMT"}};
  EXPECT_EQ(retry_after(response, std::chrono::seconds(60)), std::chrono::milliseconds(0));
  response.headers = {{"retry-after", "soon"}};
  EXPECT_EQ(retry_after(response, std::chrono::seconds(60)), std::nullopt);

  response.body = R"({"code":400,"message":"bad\nthing","error_code":"sandbox_create_failed"})";
  EXPECT_EQ(error_text(response), "bad thing (code 400, sandbox_create_failed)");
  response.body = "<html>\nbad gateway";
  EXPECT_EQ(error_text(response), "<html>");
  EXPECT_EQ(url_escape("a=b&c d/é"), "a%3Db%26c%20d%2F%C3%A9");
}

} // namespace
} // namespace sandboxer::drivers::e2b
