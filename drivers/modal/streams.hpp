#pragma once

#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <grpcpp/grpcpp.h>
#include <mutex>
#include <thread>
#include <vector>

namespace sandboxer::drivers::modal {

// Server streams read on their own threads (exec's stdout and stderr, the two streams of logs):
// each registers the context of its call in flight, so that stop() cancels them all. The first
// failure stops the others; when a Readers leaves scope, however the caller ends, its streams are
// cancelled and its threads joined.
class Readers {
public:
  Readers() = default;
  Readers(const Readers&) = delete;
  Readers& operator=(const Readers&) = delete;
  ~Readers();

  // Runs `read(*this)` on a thread.
  void start(std::function<void(Readers&)> read);

  // Registers the context of a call in flight; false when stop() already ran.
  bool open(grpc::ClientContext* context);
  void close(grpc::ClientContext* context);
  bool stopped();
  // Cancels every call in flight; the readers see stopped() and end.
  void stop();

  // Waits until every reader has ended, for at most `slice` or until wake(); true when all ended.
  bool wait_ended(std::chrono::milliseconds slice);
  // Ends a wait_ended() early: a reader has something for the caller.
  void wake();

  // Waits for every reader; rethrows the first failure.
  void join();

  std::mutex& io_mutex() { return m_io_mutex; }

private:
  std::mutex m_mutex;
  std::condition_variable m_changed;
  std::mutex m_io_mutex;
  std::vector<grpc::ClientContext*> m_contexts;
  std::vector<std::thread> m_threads;
  std::exception_ptr m_failure;
  int m_running = 0;
  bool m_stopped = false;
  bool m_woken = false;
};

} // namespace sandboxer::drivers::modal
