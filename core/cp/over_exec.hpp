#pragma once

#include <sandboxer/driver.hpp>

// `sandboxer cp` for a driver without a native copy (Capabilities::copy false) but with exec and
// stdin: the sandbox's own `tar` reads or writes the stream, and `ls` tells what is at a path
// (docs/cp.md, "Paths"). Each is one exec, run through the driver directly: the copy's history
// entry is `files.copied`, not the execs it took.
namespace sandboxer::cp {

PathInfo stat_over_exec(Driver& driver, const SandboxHandle& sandbox, const std::string& path);
void copy_in_over_exec(Driver& driver, const SandboxHandle& sandbox, const CopyInRequest& request,
                       CopySource& source);
void copy_out_over_exec(Driver& driver, const SandboxHandle& sandbox, const CopyOutRequest& request,
                        CopySink& sink);

} // namespace sandboxer::cp
