#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

// The tar streams of the copy_in requests a served driver is handling (sdk/serve.cpp): the thread
// that reads stdin hands each `input` chunk here, and the driver's copy_in reads it out. A stream
// holds at most k_held chunks: beyond that the stdin thread waits, sandboxer's writes wait on the
// full pipe, and memory stays bounded whatever the size of the copy.
namespace sandboxer::sdk {

class CopyStreams {
public:
  static constexpr size_t k_held = 4;

  // The stdin thread, when it queues a copy_in request: its chunks come next.
  void open(long id);
  // The stdin thread: an `input` or `cancel` notification. False when `id` is no copy_in's (an
  // exec's stdin, then). Chunks of a stream whose copy_in is done are dropped.
  bool input(long id, const nlohmann::json& params);
  void cancel(long id);
  // The stdin thread: stdin ended; every open stream is cut.
  void end_all();
  // The driver's copy_in: up to `size` next bytes, 0 at the stream's end. Throws DriverError when
  // the stream was cut (sandboxer cancelled, stdin ended, a malformed chunk).
  size_t read(long id, char* buffer, size_t size);
  // After the driver's copy_in returned: the rest of the stream read and dropped (the tar blocks
  // after its last entry), and the bytes of the whole stream.
  uint64_t drain(long id);
  // The copy_in is done, well or not: later chunks are dropped.
  void close(long id);

private:
  struct Stream {
    std::deque<std::string> chunks;
    size_t offset = 0; // into chunks.front()
    bool ended = false;
    std::string cut; // why the stream will not end, or empty
    uint64_t bytes = 0;
  };
  std::mutex m_mutex;
  std::condition_variable m_changed;
  std::map<long, Stream> m_open;
  std::set<long> m_ids; // every copy_in's id: its late chunks are never taken for an exec's stdin
};

} // namespace sandboxer::sdk
