#pragma once

#include <string>
#include <sys/types.h>
#include <vector>

namespace sandboxer::testing {

// A test server: `python3 SCRIPT ARGS...`, which listens on a loopback port the kernel picks and
// prints "PORT=<n>" on its first line. Stopped (SIGTERM, then reaped) when the object goes.
class LocalServer {
public:
  LocalServer(const std::string& script, const std::vector<std::string>& args);
  ~LocalServer();
  LocalServer(const LocalServer&) = delete;
  LocalServer& operator=(const LocalServer&) = delete;

  // 0 when the server did not say (the test has failed already).
  int port() const { return m_port; }

private:
  pid_t m_pid = -1;
  int m_port = 0;
};

} // namespace sandboxer::testing
