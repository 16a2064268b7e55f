#include "sdk/copy_streams.hpp"

#include <algorithm>
#include <cstring>

#include <sandboxer/error.hpp>

#include "sdk/protocol/protocol.hpp"

namespace sandboxer::sdk {

void CopyStreams::open(long id) {
  std::lock_guard lock(m_mutex);
  m_ids.insert(id);
  m_open[id] = Stream{};
}

bool CopyStreams::input(long id, const nlohmann::json& params) {
  std::unique_lock lock(m_mutex);
  if (!m_ids.contains(id)) {
    return false;
  }
  auto it = m_open.find(id);
  if (it == m_open.end() || it->second.ended || !it->second.cut.empty()) {
    return true; // its copy_in is over: dropped
  }
  if (params.value("eof", false)) {
    it->second.ended = true;
    m_changed.notify_all();
    return true;
  }
  std::string bytes;
  try {
    bytes = protocol::copy_chunk_of(params);
  } catch (const std::invalid_argument& e) {
    it->second.cut = std::string("sandboxer sent ") + e.what();
    m_changed.notify_all();
    return true;
  }
  // Wait for room; the copy_in may end meanwhile (the map's nodes stay where they are).
  m_changed.wait(lock, [&] {
    auto open = m_open.find(id);
    return open == m_open.end() || !open->second.cut.empty() || open->second.chunks.size() < k_held;
  });
  it = m_open.find(id);
  if (it != m_open.end() && it->second.cut.empty() && !bytes.empty()) {
    it->second.bytes += bytes.size();
    it->second.chunks.push_back(std::move(bytes));
    m_changed.notify_all();
  }
  return true;
}

void CopyStreams::cancel(long id) {
  std::lock_guard lock(m_mutex);
  if (auto it = m_open.find(id); it != m_open.end() && !it->second.ended) {
    it->second.cut = "sandboxer cancelled the copy";
    m_changed.notify_all();
  }
}

void CopyStreams::end_all() {
  std::lock_guard lock(m_mutex);
  for (auto& [id, stream] : m_open) {
    if (!stream.ended && stream.cut.empty()) {
      stream.cut = "sandboxer closed the driver's stdin before the stream's end";
    }
  }
  m_changed.notify_all();
}

size_t CopyStreams::read(long id, char* buffer, size_t size) {
  std::unique_lock lock(m_mutex);
  auto it = m_open.find(id);
  if (it == m_open.end()) {
    throw DriverError(DriverError::Kind::error, "copy_in: no stream for this request");
  }
  Stream& stream = it->second;
  m_changed.wait(lock,
                 [&] { return !stream.chunks.empty() || stream.ended || !stream.cut.empty(); });
  if (!stream.cut.empty()) {
    throw DriverError(DriverError::Kind::error, "copy_in: " + stream.cut);
  }
  if (stream.chunks.empty()) {
    return 0; // ended
  }
  std::string& front = stream.chunks.front();
  size_t n = std::min(size, front.size() - stream.offset);
  std::memcpy(buffer, front.data() + stream.offset, n);
  stream.offset += n;
  if (stream.offset == front.size()) {
    stream.chunks.pop_front();
    stream.offset = 0;
    m_changed.notify_all();
  }
  return n;
}

uint64_t CopyStreams::drain(long id) {
  char buffer[16384];
  while (read(id, buffer, sizeof buffer) > 0) {
  }
  std::lock_guard lock(m_mutex);
  return m_open.at(id).bytes;
}

void CopyStreams::close(long id) {
  std::lock_guard lock(m_mutex);
  m_open.erase(id);
  m_changed.notify_all();
}

} // namespace sandboxer::sdk
