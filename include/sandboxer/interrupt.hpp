#pragma once

#include <chrono>
#include <string>

#include <sandboxer/error.hpp>

// SIGINT, SIGTERM and SIGHUP (a Ctrl-C, a CI job's cancel, a closed terminal) end an operation in
// an orderly way: the signal is noted, the operation's waits and backend calls notice it and throw
// Interrupted, and the engine undoes or records what was under way. A third signal ends the
// process at once, for a cleanup that hangs.
namespace sandboxer::interrupt {

// Installs the handlers (main, once).
void install();
// The last signal received, or 0.
int last_signal();
// How many signals were received so far: a loop that forwards them compares with what it saw.
int count();
// A fd that becomes readable at each signal (never read it: poll it), or -1 before install().
int wake_fd();
// Empties the wake fd, so that a loop which handled the signals so far can poll it again.
void drain_wake_fd();
// Whether the operation should stop now: a signal came and no Shield is up on this thread.
bool requested();
// Throws Interrupted when requested().
void check();
// Sleeps for `duration`, or throws Interrupted as soon as requested().
void sleep_for(std::chrono::milliseconds duration);
// "SIGINT", "SIGTERM", ...
std::string signal_name(int signal);

// While one is alive on this thread, requested() is false: cleanup after an interruption (undoing
// a create, recording the outcome) runs to its end instead of being interrupted itself.
class Shield {
public:
  Shield();
  ~Shield();
  Shield(const Shield&) = delete;
  Shield& operator=(const Shield&) = delete;
};

// While one is alive on this thread, the first `signals` signals are not a request: work that a
// first signal lets go on (`run`'s copy-out after the command ended) stops at the next one.
class Tolerance {
public:
  explicit Tolerance(int signals);
  ~Tolerance();
  Tolerance(const Tolerance&) = delete;
  Tolerance& operator=(const Tolerance&) = delete;

private:
  int m_previous;
};

} // namespace sandboxer::interrupt

namespace sandboxer {

// An operation stopped by a signal. Exit code 128 + the signal (130 for SIGINT, 143 for SIGTERM).
class Interrupted : public Error {
public:
  explicit Interrupted(int signal);
  int signal() const { return m_signal; }

private:
  int m_signal;
};

} // namespace sandboxer
