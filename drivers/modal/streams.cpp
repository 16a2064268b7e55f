#include "drivers/modal/streams.hpp"

namespace sandboxer::drivers::modal {

Readers::~Readers() {
  stop();
  for (auto& thread : m_threads) {
    if (thread.joinable()) {
      thread.join();
    }
  }
}

void Readers::start(std::function<void(Readers&)> read) {
  {
    std::lock_guard lock(m_mutex);
    ++m_running;
  }
  m_threads.emplace_back([this, read = std::move(read)] {
    bool failed = false;
    try {
      read(*this);
    } catch (...) {
      failed = true;
      std::lock_guard lock(m_mutex);
      if (!m_failure) {
        m_failure = std::current_exception();
      }
    }
    if (failed) {
      stop(); // the others' outcome no longer matters
    }
    std::lock_guard lock(m_mutex);
    --m_running;
    m_changed.notify_all();
  });
}

bool Readers::open(grpc::ClientContext* context) {
  std::lock_guard lock(m_mutex);
  if (m_stopped) {
    return false;
  }
  m_contexts.push_back(context);
  return true;
}

void Readers::close(grpc::ClientContext* context) {
  std::lock_guard lock(m_mutex);
  std::erase(m_contexts, context);
}

bool Readers::stopped() {
  std::lock_guard lock(m_mutex);
  return m_stopped;
}

void Readers::stop() {
  std::lock_guard lock(m_mutex);
  m_stopped = true;
  for (auto* context : m_contexts) {
    context->TryCancel();
  }
  m_changed.notify_all();
}

bool Readers::wait_ended(std::chrono::milliseconds slice) {
  std::unique_lock lock(m_mutex);
  m_changed.wait_for(lock, slice, [&] { return m_running == 0 || m_woken; });
  m_woken = false;
  return m_running == 0;
}

void Readers::wake() {
  std::lock_guard lock(m_mutex);
  m_woken = true;
  m_changed.notify_all();
}

void Readers::join() {
  for (auto& thread : m_threads) {
    thread.join();
  }
  m_threads.clear();
  if (m_failure) {
    std::rethrow_exception(m_failure);
  }
}

} // namespace sandboxer::drivers::modal
