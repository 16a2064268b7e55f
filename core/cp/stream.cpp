#include "core/cp/stream.hpp"

#include <fmt/format.h>

namespace sandboxer::cp {
namespace {

// What the producer may be ahead of the reader.
constexpr size_t k_buffer_bytes = 4 * 1024 * 1024;

// The producer's way out once nobody reads any more.
struct Abandoned {};

std::string joined(const std::vector<std::string>& parts, size_t from) {
  std::string name;
  for (size_t i = from; i < parts.size(); ++i) {
    name += (name.empty() ? "" : "/") + parts[i];
  }
  return name;
}

} // namespace

std::vector<std::string> name_components(const std::string& name) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (start <= name.size()) {
    const size_t slash = name.find('/', start);
    std::string part = name.substr(start, slash == std::string::npos ? slash : slash - start);
    if (!part.empty() && part != ".") {
      parts.push_back(std::move(part));
    }
    if (slash == std::string::npos) {
      break;
    }
    start = slash + 1;
  }
  return parts;
}

std::string normal_name(const std::string& name) {
  return joined(name_components(name), 0);
}

Digests::Digests(std::function<std::string(const std::string& name)> place)
    : m_place(std::move(place)) {}

void Digests::begin(const tar::Entry& entry) {
  ++m_entries;
  m_file.reset();
  if (entry.type == tar::Type::file) {
    m_file = std::make_unique<Sha256>();
    m_name = normal_name(entry.path);
    m_size = 0;
  }
}

void Digests::data(std::string_view chunk) {
  if (m_file) {
    m_file->update(chunk);
    m_size += chunk.size();
    m_bytes += chunk.size();
  }
}

void Digests::end() {
  if (!m_file) {
    return;
  }
  std::string hex = m_file->hex();
  m_file.reset();
  ++m_files;
  if (m_digests.size() < k_max_file_digests) {
    m_digests.push_back({m_place(m_name), m_size, hex});
  }
  m_by_name[m_name] = std::move(hex);
}

void Tee::begin(const tar::Entry& entry) {
  m_first.begin(entry);
  m_second.begin(entry);
}
void Tee::data(std::string_view chunk) {
  m_first.data(chunk);
  m_second.data(chunk);
}
void Tee::end() {
  m_first.end();
  m_second.end();
}

Renamer::Renamer(tar::Sink& next, std::string expected_first, std::string top)
    : m_next(next), m_expected_first(std::move(expected_first)), m_top(std::move(top)) {}

std::string Renamer::renamed(const std::string& name) const {
  std::vector<std::string> parts = name_components(name);
  if (parts.empty() || parts.front() != m_expected_first) {
    throw tar::Error(0, fmt::format("the stream holds \"{}\", outside the \"{}\" that was asked "
                                    "for: refused",
                                    name, m_expected_first));
  }
  std::string rest = joined(parts, 1);
  if (m_top.empty()) {
    return rest.empty() ? "." : rest;
  }
  return rest.empty() ? m_top : m_top + "/" + rest;
}

void Renamer::begin(const tar::Entry& entry) {
  tar::Entry renamed_entry = entry;
  renamed_entry.path = renamed(entry.path);
  if (entry.type == tar::Type::hardlink) {
    renamed_entry.link = renamed(entry.link);
  }
  if (renamed_entry.path == ".") {
    if (entry.type != tar::Type::directory) {
      throw tar::Error(0, fmt::format("\"{}\" is not a directory: its contents cannot be copied "
                                      "alone",
                                      entry.path));
    }
    m_skipping = true; // the destination directory itself: it is there already
    return;
  }
  m_skipping = false;
  m_next.begin(renamed_entry);
}

Meter::Meter(tar::Sink& sink, std::function<void(uint64_t)> progress)
    : m_reader(sink), m_progress(std::move(progress)) {}

void Meter::pass(std::string_view bytes) {
  m_sha256.update(bytes);
  m_stream_bytes += bytes.size();
  m_reader.feed(bytes);
  if (m_progress) {
    m_progress(m_stream_bytes);
  }
}

void Meter::finish() {
  m_reader.finish();
}

ProducedSource::ProducedSource(Producer producer, Meter& meter) : m_meter(meter) {
  m_thread = std::thread([this, producer = std::move(producer)] {
    try {
      producer([this](std::string_view bytes) { push(bytes); });
    } catch (const Abandoned&) {
    } catch (...) {
      std::lock_guard lock(m_mutex);
      m_failure = std::current_exception();
    }
    std::lock_guard lock(m_mutex);
    m_done = true;
    m_changed.notify_all();
  });
}

ProducedSource::~ProducedSource() {
  {
    std::lock_guard lock(m_mutex);
    m_abandoned = true;
    m_changed.notify_all();
  }
  m_thread.join();
}

void ProducedSource::push(std::string_view bytes) {
  if (bytes.empty()) {
    return; // an empty piece would read as the end of the stream
  }
  // Digested and parsed here, beside the driver's sending rather than before it: on a large
  // file the two SHA-256 passes would otherwise hold up every read.
  m_meter.pass(bytes);
  std::unique_lock lock(m_mutex);
  m_changed.wait(lock, [&] { return m_abandoned || m_buffered < k_buffer_bytes; });
  if (m_abandoned) {
    throw Abandoned{};
  }
  m_pieces.emplace_back(bytes);
  m_buffered += bytes.size();
  m_changed.notify_all();
}

size_t ProducedSource::read(char* buffer, size_t size) {
  size_t given = 0;
  {
    std::unique_lock lock(m_mutex);
    m_changed.wait(lock, [&] { return m_done || !m_pieces.empty(); });
    if (m_pieces.empty()) {
      if (m_failure) {
        std::rethrow_exception(m_failure);
      }
      m_exhausted = true;
      return 0;
    }
    while (given < size && !m_pieces.empty()) {
      const std::string& front = m_pieces.front();
      const size_t n = std::min(size - given, front.size() - m_offset);
      std::copy_n(front.data() + m_offset, n, buffer + given);
      given += n;
      m_offset += n;
      if (m_offset == front.size()) {
        m_buffered -= front.size();
        m_pieces.pop_front();
        m_offset = 0;
      }
    }
    m_changed.notify_all();
  }
  return given;
}

} // namespace sandboxer::cp
