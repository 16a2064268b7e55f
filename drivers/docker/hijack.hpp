#pragma once

#include <memory>
#include <string>

#include <sandboxer/http.hpp>

namespace sandboxer::drivers::docker {

// A connection taken over after the response headers: the Docker Engine "hijacks" it for the
// bidirectional stream of an attach or an exec with stdin.
struct RawStream {
  int fd = -1;
  long status = 0;
  std::string initial; // bytes of the stream that arrived with the headers
  RawStream() = default;
  RawStream(const RawStream&) = delete;
  RawStream& operator=(const RawStream&) = delete;
  ~RawStream();
};

// Sends `request` (http:// over TCP or `unix_socket`; no TLS) and hands over the connection once
// the response headers are read. Throws DriverError when it cannot connect or the status is not 101
// or 200.
std::unique_ptr<RawStream> hijack(const http::Request& request);

} // namespace sandboxer::drivers::docker
