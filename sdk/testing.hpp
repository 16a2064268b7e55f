#pragma once
// Hooks for sandboxer's own tests, kept out of the public SDK (include/sandboxer/): a driver
// built against the installed SDK cannot reach them.

namespace sandboxer {

// From now on, system_clock() reads SANDBOXER_FAKE_NOW (an RFC 3339 time) when it is set, so
// end-to-end tests of expiry run at a chosen instant. Only test builds call this (the
// sandboxer-testclock executable and the unit tests): the installed `sandboxer` never does, so an
// environment variable cannot make it reap what has not expired.
void allow_fake_now();

} // namespace sandboxer

namespace sandboxer::interrupt {

// For tests: forget the signals received so far.
void reset_for_tests();
// For tests: act as if `signal` had arrived.
void simulate(int signal);

} // namespace sandboxer::interrupt
