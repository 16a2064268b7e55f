#include "drivers/modal/logs.hpp"

#include <functional>
#include <mutex>
#include <thread>

#include <sandboxer/interrupt.hpp>
#include <sandboxer/log.hpp>

#include "drivers/modal/log_lines.hpp"
#include "drivers/modal/streams.hpp"

namespace sandboxer::drivers::modal {
namespace {

namespace api = ::modal::client;

// How long Modal holds one SandboxGetLogs stream open waiting for more output (its `timeout`).
// Modal does not end the stream of a running sandbox by itself, so what is there now is what one
// short window brings (a timeout of 0 is not something the SDKs send); following, the SDKs' 55 s,
// then the stream is opened again from its cursor.
constexpr float k_now_window_secs = 2;
constexpr float k_follow_window_secs = 55;
constexpr int k_log_failures = 8;
// How often a wait for the streams looks for a signal.
constexpr auto k_log_wait_slice = std::chrono::milliseconds(200);

// One of a sandbox's two log streams, and where it was left.
struct Stream {
  api::FileDescriptor fd = api::FILE_DESCRIPTOR_STDOUT;
  std::string cursor = "0-0"; // the last entry id received; "0-0" is the start, as libmodal sends
  bool eof = false;           // Modal said it ended: the sandbox finished
  LineCutter cutter;
};

// Reads `stream` from its cursor, window after window until it ends, or for one window without
// `repeat`; each item with output goes to `take`. Transient failures are retried.
void read_windows(const Calls& calls, api::ModalClient::Stub& stub, const std::string& sandbox_id,
                  Stream& stream, float window, bool repeat, Readers& readers,
                  const std::function<void(const LogChunk&)>& take) {
  int failures = 0;
  while (!stream.eof && !readers.stopped()) {
    grpc::ClientContext context;
    // Modal ends the window itself; the deadline is for a server that does not.
    calls.prepare(context, std::chrono::milliseconds(static_cast<long>(window * 1000)) +
                               calls.spec().call_timeout);
    if (!readers.open(&context)) {
      return;
    }
    api::SandboxGetLogsRequest ask;
    ask.set_sandbox_id(sandbox_id);
    ask.set_file_descriptor(stream.fd);
    ask.set_timeout(window);
    ask.set_last_entry_id(stream.cursor);
    auto reader = stub.SandboxGetLogs(&context, ask);
    api::TaskLogsBatch batch;
    while (reader->Read(&batch)) {
      failures = 0;
      // The batch that says eof carries no entry id: the cursor stays on the last entry.
      if (!batch.entry_id().empty()) {
        stream.cursor = batch.entry_id();
      }
      for (const auto& item : batch.items()) {
        if (!item.data().empty()) { // items without data mark the task's state, not output
          take(LogChunk{static_cast<int>(item.file_descriptor()), item.data(), item.timestamp_ns(),
                        item.timestamp()});
        }
      }
      if (batch.eof()) {
        stream.eof = true;
        context.TryCancel(); // what the SDKs do: nothing more comes
        break;
      }
    }
    grpc::Status status = reader->Finish();
    readers.close(&context);
    if (stream.eof || readers.stopped()) {
      return;
    }
    if (status.ok()) {
      if (!repeat) {
        return;
      }
      continue;
    }
    if (!Calls::retryable(status.error_code()) || ++failures >= k_log_failures) {
      throw calls.error("SandboxGetLogs", status);
    }
    spdlog::debug("modal: the log stream of {} dropped ({}); again from entry {}", sandbox_id,
                  log::redact(status.error_message()), stream.cursor);
    std::this_thread::sleep_for(std::chrono::milliseconds(100 * failures));
  }
}

// The lines of `chunk` read from `stream`; Modal's own messages (not the sandbox's output) none.
std::vector<TimedLine> lines_of(Stream& stream, const LogChunk& chunk) {
  auto name = stream_of(chunk.file_descriptor, stream.fd);
  if (!name) {
    spdlog::debug("modal: skipped a log item of descriptor {}: not the sandbox's output",
                  chunk.file_descriptor);
    return {};
  }
  return stream.cutter.feed(*name, chunk);
}

// Waits for the readers, handing over what they have on the way; a signal throws Interrupted
// (and the readers' calls are cancelled as they leave scope).
void wait_for_readers(Readers& readers, const std::function<void()>& hand_over) {
  while (!readers.wait_ended(k_log_wait_slice)) {
    hand_over();
    interrupt::check();
  }
  readers.join();
  hand_over();
}

} // namespace

void read_logs(const Calls& api, ::modal::client::ModalClient::Stub& stub,
               const std::string& sandbox_id, const LogsRequest& request, LogSink& sink) {
  Stream streams[2];
  streams[1].fd = api::FILE_DESCRIPTOR_STDERR;

  // What there is now, from both streams at once: merged by time, then since and tail.
  std::vector<TimedLine> now[2];
  {
    Readers readers;
    for (int i = 0; i < 2; ++i) {
      readers.start([&, i](Readers& self) {
        read_windows(api, stub, sandbox_id, streams[i], k_now_window_secs, false, self,
                     [&](const LogChunk& chunk) {
                       auto lines = lines_of(streams[i], chunk);
                       now[i].insert(now[i].end(), lines.begin(), lines.end());
                     });
      });
    }
    wait_for_readers(readers, [] {});
  }
  const bool following = request.follow && !(streams[0].eof && streams[1].eof);
  std::vector<TimedLine> lines;
  for (int i = 0; i < 2; ++i) {
    lines.insert(lines.end(), now[i].begin(), now[i].end());
    if (!following || streams[i].eof) {
      // A last line without its newline: whole, since no more comes (or none is waited for).
      auto rest = streams[i].cutter.flush();
      lines.insert(lines.end(), rest.begin(), rest.end());
    }
  }
  for (const auto& line : merge_lines(std::move(lines), request)) {
    sink.line(line);
  }
  if (!following) {
    return;
  }

  // Then each line as it comes, until the sandbox has finished.
  LogsRequest since_only;
  since_only.since = request.since;
  std::mutex queue_mutex;
  std::vector<LogLine> queue;
  auto push = [&](Readers& readers, std::vector<TimedLine> ready) {
    if (ready.empty()) {
      return;
    }
    {
      std::lock_guard lock(queue_mutex);
      for (auto& timed : ready) {
        queue.push_back(std::move(timed.line));
      }
    }
    readers.wake();
  };
  Readers readers;
  for (int i = 0; i < 2; ++i) {
    if (streams[i].eof) {
      continue;
    }
    readers.start([&, i](Readers& self) {
      read_windows(api, stub, sandbox_id, streams[i], k_follow_window_secs, true, self,
                   [&](const LogChunk& chunk) { push(self, lines_of(streams[i], chunk)); });
      push(self, streams[i].cutter.flush());
    });
  }
  // The sink is called on this thread only, in the order the lines arrived.
  wait_for_readers(readers, [&] {
    std::vector<LogLine> ready;
    {
      std::lock_guard lock(queue_mutex);
      ready.swap(queue);
    }
    for (const auto& line : select_log_lines(std::move(ready), since_only)) {
      sink.line(line);
    }
  });
}

} // namespace sandboxer::drivers::modal
