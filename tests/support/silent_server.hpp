#pragma once

#include <cstdio>
#include <filesystem>
#include <functional>
#include <gtest/gtest.h>
#include <string>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <sandboxer/error.hpp>
#include <sandboxer/http.hpp>

#include "support/temp_dir.hpp"

namespace sandboxer::testing {

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
inline std::string error_of_unanswered(const std::function<void(const http::Request&)>& send) {
  TempDir dir;
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

} // namespace sandboxer::testing
