#pragma once

namespace sandboxer::commands {

struct MainOptions {
  // SANDBOXER_FAKE_NOW sets the clock: only sandboxer-testclock, never the installed binary.
  bool allow_fake_now = false;
};

// The whole of `sandboxer ARGS...`: returns the process's exit code (docs/exit-codes.md).
int run_main(int argc, char** argv, const MainOptions& options);

} // namespace sandboxer::commands
