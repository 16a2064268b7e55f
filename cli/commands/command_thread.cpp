#include "cli/commands/command_thread.hpp"

#include <sandboxer/interrupt.hpp>

namespace sandboxer::commands {
namespace {

// How often the wait looks for a signal: the handler only counts it (its wake pipe is the
// driver's, which forwards the signal).
constexpr auto k_signal_poll = std::chrono::milliseconds(50);

} // namespace

CommandThread::CommandThread(std::function<int()> exec)
    : m_thread([this, exec = std::move(exec)] {
        int status = 0;
        std::exception_ptr failure;
        try {
          status = exec();
        } catch (...) {
          failure = std::current_exception();
        }
        std::lock_guard lock(m_mutex);
        m_status = status;
        m_failure = failure;
        m_done = true;
        m_ended.notify_all();
      }) {}

CommandThread::~CommandThread() {
  if (m_thread.joinable()) {
    m_thread.join();
  }
}

std::optional<int> CommandThread::wait(std::chrono::milliseconds stop_timeout) {
  std::optional<std::chrono::steady_clock::time_point> deadline;
  {
    std::unique_lock lock(m_mutex);
    while (!m_ended.wait_for(lock, k_signal_poll, [&] { return m_done; })) {
      const auto now = std::chrono::steady_clock::now();
      if (!deadline && interrupt::count() > 0) {
        deadline = now + stop_timeout;
      }
      if (deadline && now >= *deadline) {
        return std::nullopt;
      }
    }
  }
  m_thread.join();
  if (m_failure) {
    std::rethrow_exception(m_failure);
  }
  return m_status;
}

bool CommandThread::join_for(std::chrono::milliseconds bound) {
  {
    std::unique_lock lock(m_mutex);
    if (!m_ended.wait_for(lock, bound, [&] { return m_done; })) {
      return false;
    }
  }
  m_thread.join();
  return true;
}

} // namespace sandboxer::commands
