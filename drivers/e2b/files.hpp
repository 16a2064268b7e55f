#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include <sandboxer/http.hpp>

namespace sandboxer::drivers::e2b {

// One sandbox's envd, for its file API (shared/specs/e2b-envd-openapi.yml, /files): where it is,
// the sandbox's access token and the user files are made as. The token goes only in the
// X-Access-Token header (it is registered for redaction); the API key never goes to envd.
struct Envd {
  http::Transport* transport = nullptr;
  std::string base; // envd_base(): no trailing slash
  std::string sandbox_id;
  std::string token; // empty when the sandbox was made without `secure`
  std::string user;  // `username`: owner of uploads, home of relative paths
  std::chrono::milliseconds request_timeout{30000};
  int retries = 4;
  std::function<void(std::chrono::milliseconds)> sleep; // interruptible; tests may shorten it
};

// The deadline of a transfer of `bytes`: the request timeout plus time for the bytes at a slow
// link's pace (256 KiB/s), so that a large file is not cut while a stalled one still ends.
std::chrono::milliseconds transfer_deadline(const Envd& envd, std::uint64_t bytes);

// POST /files?path=: writes `content` as the file at `path` (absolute), replacing it; envd makes
// missing parent directories. Retried on 429/502/503/504 and on a lost connection (writing the same
// bytes again is harmless). Throws DriverError with envd's own message, e.g. "not enough disk space
// available (HTTP 507)".
void upload_file(const Envd& envd, const std::string& path, std::string_view content);

// POST /files/compose: `parts` (absolute paths, in order) concatenated into `destination`; envd
// deletes the parts. How files larger than one upload travel.
void compose_files(const Envd& envd, const std::vector<std::string>& parts,
                   const std::string& destination);

// GET /files?path=: the file's bytes handed to `on_chunk` as they arrive; `expected_size` sets the
// deadline. Not retried: bytes already handed over cannot be taken back. A missing file is
// DriverError::Kind::not_found.
void download_file(const Envd& envd, const std::string& path, std::uint64_t expected_size,
                   const std::function<void(std::string_view)>& on_chunk);

} // namespace sandboxer::drivers::e2b
