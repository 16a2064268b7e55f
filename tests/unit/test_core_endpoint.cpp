// Where a driver may send a credential: https anywhere, plain http to this machine only.
#include <gtest/gtest.h>

#include <sandboxer/endpoint.hpp>
#include <sandboxer/error.hpp>

namespace sandboxer {
namespace {

std::string verdict(const std::string& url) {
  try {
    return checked_endpoint(url, "api_url", "API key");
  } catch (const DriverError& e) {
    EXPECT_EQ(e.kind(), DriverError::Kind::invalid_spec);
    return e.what();
  }
}

TEST(Endpoint, HttpsAnywhereWithoutTrailingSlashes) {
  EXPECT_EQ(verdict("https://api.example.com//"), "https://api.example.com");
  EXPECT_EQ(verdict("https://10.0.0.1:8443/v1/"), "https://10.0.0.1:8443/v1");
}

TEST(Endpoint, PlainHttpOnlyToLoopback) {
  EXPECT_EQ(verdict("http://127.0.0.1:9/"), "http://127.0.0.1:9");
  EXPECT_EQ(verdict("http://127.1.2.3"), "http://127.1.2.3");
  EXPECT_EQ(verdict("http://localhost:80/x"), "http://localhost:80/x");
  EXPECT_EQ(verdict("http://[::1]:9"), "http://[::1]:9");
  EXPECT_EQ(verdict("http://10.1.2.3:443"),
            "api_url http://10.1.2.3:443: plain http is allowed only to a loopback address (a "
            "local test server); use https:// so the API key is encrypted");
  // A loopback address in the user part, the path or a name does not make the host loopback.
  EXPECT_NE(verdict("http://evil.example/127.0.0.1"), "http://evil.example/127.0.0.1");
  EXPECT_NE(verdict("http://127.0.0.1@evil.example"), "http://127.0.0.1@evil.example");
  EXPECT_NE(verdict("http://127.0.0.1:9@evil.example"), "http://127.0.0.1:9@evil.example");
  EXPECT_NE(verdict("http://127.evil.example"), "http://127.evil.example");
  EXPECT_NE(verdict("http://[::2]:9"), "http://[::2]:9");
  EXPECT_NE(verdict("http://localhost.evil.example"), "http://localhost.evil.example");
}

TEST(Endpoint, OtherSchemesAreRefused) {
  EXPECT_EQ(verdict("ftp://127.0.0.1"), "api_url \"ftp://127.0.0.1\": expected an https:// URL");
  EXPECT_EQ(verdict("api.example.com"), "api_url \"api.example.com\": expected an https:// URL");
}

TEST(Endpoint, EnvOrEmpty) {
  ::setenv("SANDBOXER_TEST_ENDPOINT", "x", 1);
  EXPECT_EQ(env_or_empty("SANDBOXER_TEST_ENDPOINT"), "x");
  ::unsetenv("SANDBOXER_TEST_ENDPOINT");
  EXPECT_EQ(env_or_empty("SANDBOXER_TEST_ENDPOINT"), "");
}

} // namespace
} // namespace sandboxer
