// The libcurl transport itself (Debian's libcurl, opened on demand): TLS is there
// and verified, plain HTTP and errors come back as the drivers expect.
#include <cstdio>
#include <filesystem>
#include <fmt/format.h>
#include <functional>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

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

// A unix socket that accepts connections (the kernel completes them) and never answers: a hung
// engine.
class SilentServer {
public:
  explicit SilentServer(const std::filesystem::path& path) : m_path(path) {
    m_fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::snprintf(address.sun_path, sizeof address.sun_path, "%s", path.c_str());
    EXPECT_EQ(::bind(m_fd, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
    EXPECT_EQ(::listen(m_fd, 8), 0);
  }
  ~SilentServer() { ::close(m_fd); }
  SilentServer(const SilentServer&) = delete;
  SilentServer& operator=(const SilentServer&) = delete;

private:
  std::filesystem::path m_path;
  int m_fd = -1;
};

// Sends `send` a request for an exec start to a server that never answers, with a 300 ms
// answer_timeout and an hour for the whole request; returns the error it must end with.
std::string error_of_unanswered(const std::function<void(const http::Request&)>& send) {
  testing::TempDir dir;
  SilentServer server(dir / "hung.sock");
  http::Request request;
  request.method = "POST";
  request.url = "http://docker/v1.41/exec/x/start";
  request.unix_socket = (dir / "hung.sock").string();
  request.timeout = std::chrono::hours(1);
  request.answer_timeout = std::chrono::milliseconds(300);
  try {
    send(request);
  } catch (const DriverError& e) {
    return e.kind() == DriverError::Kind::timeout ? e.what()
                                                  : "not a timeout: " + std::string(e.what());
  }
  return "a request nobody answered succeeded";
}

// Issue 13: docker exec's start had a week-long timeout and no bound on the engine's answer, so
// a hung engine made exec wait forever. answer_timeout bounds the headers, not the body.
TEST(CurlTransport, AnAnswerTimeoutBoundsAServerThatNeverAnswers) {
  const std::string error =
      error_of_unanswered([](const http::Request& r) { http::curl_transport().send(r); });
  EXPECT_NE(error.find("no response within 300 ms"), std::string::npos) << error;
}

TEST(RawStream, AnUpgradeNobodyAnswersTimesOut) {
  const std::string error = error_of_unanswered([](const http::Request& r) { http::hijack(r); });
  EXPECT_NE(error.find("no response within 300 ms"), std::string::npos) << error;
}

} // namespace
} // namespace sandboxer
