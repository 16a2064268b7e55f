// The sandboxer executable; cli/commands/run_main.cpp does the work. Built twice: as sandboxer,
// and as sandboxer-testclock (SANDBOXER_TEST_CLOCK) for the end-to-end tests of expiry.
#include "cli/commands/run_main.hpp"

int main(int argc, char** argv) {
  sandboxer::commands::MainOptions options;
#ifdef SANDBOXER_TEST_CLOCK
  options.allow_fake_now = true;
#endif
  return sandboxer::commands::run_main(argc, argv, options);
}
