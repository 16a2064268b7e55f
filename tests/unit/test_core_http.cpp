// The libcurl transport itself, whichever way it was built (cmake/static_curl.cmake): TLS is there
// and verified, plain HTTP and errors come back as the drivers expect.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <sandboxer/error.hpp>
#include <sandboxer/http.hpp>

#include "support/local_server.hpp"
#include "support/temp_dir.hpp"

namespace sandboxer {
namespace {

std::string tls_server_script() {
  return std::string(SANDBOXER_SOURCE_DIR) + "/tests/support/tls_server.py";
}

TEST(CurlTransport, HttpsToAnUntrustedCertificateIsRefused) {
  testing::TempDir dir;
  testing::LocalServer server(tls_server_script(), {dir.path().string()});
  ASSERT_NE(server.port(), 0);
  http::Request request;
  request.url = fmt::format("https://127.0.0.1:{}/", server.port());
  try {
    http::curl_transport().send(request);
    FAIL() << "a self-signed certificate was accepted";
  } catch (const DriverError& e) {
    // The handshake happened (a libcurl without TLS says "Protocol https not supported") and the
    // certificate was checked against the system's CA store.
    EXPECT_EQ(e.kind(), DriverError::Kind::error);
    EXPECT_NE(std::string(e.what()).find("certificate"), std::string::npos) << e.what();
  }
}

TEST(CurlTransport, AnotherSchemeIsRefusedWithoutAConnection) {
  http::Request request;
  request.url = "ftp://127.0.0.1:1/file";
  EXPECT_THROW(http::curl_transport().send(request), DriverError);
}

TEST(CurlTransport, NothingListeningIsAnErrorThatNamesTheAddress) {
  testing::TempDir dir;
  http::Request request;
  request.url = "http://localhost/_ping";
  request.unix_socket = (dir / "no.sock").string();
  try {
    http::curl_transport().send(request);
    FAIL() << "a request to a missing socket succeeded";
  } catch (const DriverError& e) {
    EXPECT_NE(std::string(e.what()).find("no.sock"), std::string::npos) << e.what();
  }
}

} // namespace
} // namespace sandboxer
