#pragma once

#include <sandboxer/driver.hpp>

// `sandboxer cp` over a driver's exec with stdin: the sandbox's own `tar` reads or writes the
// stream, and `ls` tells what is at a path (docs/cp.md, "Paths"). Each is one exec, run through
// the driver directly: the copy's history entry is `files.copied`, not the execs it took. The core
// uses these for a driver without a native copy (Capabilities::copy false); a native driver may
// use them for the part its backend has no call for (compose-ssh's stat, --follow).
namespace sandboxer {

PathInfo stat_over_exec(Driver& driver, const SandboxHandle& sandbox, const std::string& path);
void copy_in_over_exec(Driver& driver, const SandboxHandle& sandbox, const CopyInRequest& request,
                       CopySource& source);
void copy_out_over_exec(Driver& driver, const SandboxHandle& sandbox, const CopyOutRequest& request,
                        CopySink& sink);

} // namespace sandboxer
