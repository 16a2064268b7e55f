// The libcurl transport itself (Debian's libcurl, opened on demand): TLS is there
// and verified, plain HTTP and errors come back as the drivers expect.
#include <arpa/inet.h>
#include <cstdio>
#include <filesystem>
#include <fmt/format.h>
#include <functional>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <sandboxer/error.hpp>
#include <sandboxer/http.hpp>

#include "support/local_server.hpp"
#include "support/silent_server.hpp"
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
    // certificate was checked against the system's CA store and found untrusted: OpenSSL says "SSL
    // certificate problem: self-signed certificate", GnuTLS "server verification failed". A CA
    // store that cannot be read says "error setting certificate file" instead.
    EXPECT_EQ(e.kind(), DriverError::Kind::error);
    const std::string what = e.what();
    EXPECT_TRUE(what.find("SSL certificate problem") != std::string::npos ||
                what.find("verification failed") != std::string::npos)
        << what;
  }
}

TEST(CurlTransport, AnotherSchemeIsRefusedEvenWhereAServerListens) {
  testing::TempDir dir;
  testing::LocalServer server(tls_server_script(), {dir.path().string()});
  ASSERT_NE(server.port(), 0);
  http::Request request;
  request.url = fmt::format("ftp://127.0.0.1:{}/file", server.port());
  try {
    http::curl_transport().send(request);
    FAIL() << "an ftp:// request went out";
  } catch (const DriverError& e) {
    EXPECT_NE(std::string(e.what()).find("not supported"), std::string::npos) << e.what();
  }
}

// Nothing answering is its own kind (issue 36): a caller that explains it (docker: "the daemon is
// not running") asks for the kind, not for libcurl's wording.
TEST(CurlTransport, NothingListeningIsUnavailableAndNamesTheAddress) {
  testing::TempDir dir;
  http::Request request;
  request.url = "http://localhost/_ping";
  request.unix_socket = (dir / "no.sock").string();
  try {
    http::curl_transport().send(request);
    FAIL() << "a request to a missing socket succeeded";
  } catch (const DriverError& e) {
    EXPECT_EQ(e.kind(), DriverError::Kind::unavailable) << e.what();
    EXPECT_NE(std::string(e.what()).find("no.sock"), std::string::npos) << e.what();
  }
  // A loopback port bound and closed again: nothing listens there now.
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length), 0);
  close(fd);
  request = {};
  request.url = fmt::format("http://127.0.0.1:{}/", ntohs(address.sin_port));
  try {
    http::curl_transport().send(request);
    FAIL() << "a request to a closed port succeeded";
  } catch (const DriverError& e) {
    EXPECT_EQ(e.kind(), DriverError::Kind::unavailable) << e.what();
  }
}

// Issue 13: docker exec's start had a week-long timeout and no bound on the engine's answer, so
// a hung engine made exec wait forever. answer_timeout bounds the headers, not the body.
TEST(CurlTransport, AnAnswerTimeoutBoundsAServerThatNeverAnswers) {
  const std::string error =
      testing::error_of_unanswered([](const http::Request& r) { http::curl_transport().send(r); });
  EXPECT_NE(error.find("no response within 300 ms"), std::string::npos) << error;
}

} // namespace
} // namespace sandboxer
