#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include <sandboxer/driver.hpp>

#include "drivers/e2b/files.hpp"

namespace sandboxer::drivers::e2b {

// Runs `argv` in the sandbox through envd's process API (no stdin): stdout to `out` as it comes,
// stderr into `err` (the caller's error message; bounded); returns the exit status.
using RunInSandbox =
    std::function<int(const std::vector<std::string>& argv,
                      const std::function<void(std::string_view)>& out, std::string& err)>;

// `sandboxer cp` natively on E2B (docs/drivers/e2b.md, "Copy"): file contents through envd's
// /files, everything else (listing, directories, links, modes, mtimes) through commands, since
// envd's process API takes no stdin and so cannot run `tar -x`.

// What is at `path`, following links (`find -L -maxdepth 0`); Kind::symlink for a dangling one.
PathInfo stat_in_sandbox(const RunInSandbox& run, const std::string& path);

// Unpacks the tar stream of `source` under request.directory: each file uploaded as it is read
// (in parts of k_upload_part bytes composed by envd when larger), then directories, links, modes
// and mtimes made by batched commands. Memory: one part, plus a few bytes per directory.
void copy_into_sandbox(const Envd& envd, const RunInSandbox& run, const CopyInRequest& request,
                       CopySource& source);

// Lists request.path (`find -printf`, spooled to a temporary file on this machine) and writes its
// tar stream to `sink`, downloading each file into the stream as it arrives. A missing path is
// DriverError::Kind::not_found; a file that changes size while copied is an error.
void copy_out_of_sandbox(const Envd& envd, const RunInSandbox& run, const CopyOutRequest& request,
                         CopySink& sink);

// The largest piece of a file held in memory and sent in one upload.
constexpr std::size_t k_upload_part = 8u << 20;

} // namespace sandboxer::drivers::e2b
