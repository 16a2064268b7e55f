#pragma once

#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>

namespace sandboxer::commands {

// The command of a `run`, executed on a thread of its own so that the wait for it can be bounded
// after a signal: the driver's exec forwards the signal to the command, and when the command has
// not ended --stop-timeout later, the run goes on without it (its destroy ends the command).
class CommandThread {
public:
  explicit CommandThread(std::function<int()> exec);
  // Joins: a caller that gave up on the thread (join_for false) exits the process before this.
  ~CommandThread();
  CommandThread(const CommandThread&) = delete;
  CommandThread& operator=(const CommandThread&) = delete;

  // The command's status; nullopt when a signal came and the command had not ended
  // `stop_timeout` after it. The exec's own failure (an Error, Interrupted) is rethrown here.
  std::optional<int> wait(std::chrono::milliseconds stop_timeout);
  // Whether the thread ended within `bound` (and was joined); its outcome no longer matters.
  bool join_for(std::chrono::milliseconds bound);

private:
  std::mutex m_mutex;
  std::condition_variable m_ended;
  bool m_done = false;
  int m_status = 0;
  std::exception_ptr m_failure;
  std::thread m_thread; // last: started once the rest is ready
};

} // namespace sandboxer::commands
