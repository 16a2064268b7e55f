#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <sandboxer/driver.hpp>
#include <sandboxer/tar.hpp>

#include "core/sha256.hpp"

// The pieces every copy's stream passes through, whichever way it goes and whichever path
// (native or over exec) carries it: what it holds is counted and digested as it passes, so that
// the history says which bytes went in or came out (docs/cp.md, "Evidence").
namespace sandboxer::cp {

// At most this many files get their own digest in a copy's history entry; the stream's digest
// covers them all (docs/cp.md).
inline constexpr size_t k_max_file_digests = 256;

struct FileDigest {
  std::string path; // in the sandbox, absolute
  uint64_t size = 0;
  std::string sha256; // hex
};

// A stream name's components, "." and empty ones dropped (".." kept: callers that write refuse it).
std::vector<std::string> name_components(const std::string& name);

// The normalized form of a stream name: "." components and a leading "./" dropped.
std::string normal_name(const std::string& name);

// Counts what a stream holds and digests each regular file; `place` gives the path a stream name
// stands for in the sandbox.
class Digests : public tar::Sink {
public:
  explicit Digests(std::function<std::string(const std::string& name)> place);
  void begin(const tar::Entry& entry) override;
  void data(std::string_view chunk) override;
  void end() override;

  uint64_t files() const { return m_files; }     // regular files
  uint64_t entries() const { return m_entries; } // files, directories, links
  uint64_t bytes() const { return m_bytes; }     // of the files' contents
  const std::vector<FileDigest>& digests() const { return m_digests; }
  bool truncated() const { return m_files > m_digests.size(); }
  // Every file's digest by its stream name, for --verify (not bounded by k_max_file_digests).
  const std::map<std::string, std::string>& by_name() const { return m_by_name; }

private:
  std::function<std::string(const std::string&)> m_place;
  std::unique_ptr<Sha256> m_file;
  std::string m_name;
  uint64_t m_size = 0;
  uint64_t m_files = 0;
  uint64_t m_entries = 0;
  uint64_t m_bytes = 0;
  std::vector<FileDigest> m_digests;
  std::map<std::string, std::string> m_by_name;
};

// Hands every entry to two sinks.
class Tee : public tar::Sink {
public:
  Tee(tar::Sink& first, tar::Sink& second) : m_first(first), m_second(second) {}
  void begin(const tar::Entry& entry) override;
  void data(std::string_view chunk) override;
  void end() override;

private:
  tar::Sink& m_first;
  tar::Sink& m_second;
};

// Hands entries on with the stream's first component (the copied file's base name) replaced by
// `top` (docker cp's rename), or dropped when `top` is empty (SRC/. : the contents alone). An
// entry outside that first component is refused: a stream asked for one path holds only it.
class Renamer : public tar::Sink {
public:
  Renamer(tar::Sink& next, std::string expected_first, std::string top);
  void begin(const tar::Entry& entry) override;
  void data(std::string_view chunk) override {
    if (!m_skipping) {
      m_next.data(chunk);
    }
  }
  void end() override {
    if (!m_skipping) {
      m_next.end();
    }
  }
  // The name an entry of the stream gets ("." for the destination itself).
  std::string renamed(const std::string& name) const;

private:
  tar::Sink& m_next;
  std::string m_expected_first;
  std::string m_top;
  bool m_skipping = false;
};

// The whole stream: its bytes digested and parsed as they pass (a stream that does not parse is
// an error, named by its byte offset), each piece reported to `progress`.
class Meter {
public:
  Meter(tar::Sink& sink, std::function<void(uint64_t stream_bytes)> progress);
  void pass(std::string_view bytes);
  void finish(); // the stream ended: it must end whole
  uint64_t stream_bytes() const { return m_stream_bytes; }
  std::string sha256() { return m_sha256.hex(); }

private:
  tar::Reader m_reader;
  Sha256 m_sha256;
  uint64_t m_stream_bytes = 0;
  std::function<void(uint64_t)> m_progress;
};

// A CopySource fed by a producer thread that pushes the stream (core/cp/pack's writer), through a
// bounded buffer: the stream is made as the driver reads it, never held whole. The meter sees each
// piece on the producer's thread (its progress callback is called there). A failure of the
// producer or the meter is rethrown by read() once what came before it was read.
class ProducedSource : public CopySource {
public:
  using Producer = std::function<void(const std::function<void(std::string_view)>& emit)>;
  ProducedSource(Producer producer, Meter& meter);
  ~ProducedSource() override; // stops the producer if the reader gave up
  size_t read(char* buffer, size_t size) override;
  // The reader saw the end (read() returned 0): a driver that answers before that cut the copy.
  bool exhausted() const { return m_exhausted; }

private:
  void push(std::string_view bytes);

  Meter& m_meter;
  std::mutex m_mutex;
  std::condition_variable m_changed;
  std::deque<std::string> m_pieces;
  size_t m_offset = 0; // into m_pieces.front()
  size_t m_buffered = 0;
  bool m_done = false;
  bool m_abandoned = false;
  bool m_exhausted = false;
  std::exception_ptr m_failure;
  std::thread m_thread;
};

} // namespace sandboxer::cp
