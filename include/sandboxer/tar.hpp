#pragma once

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <string_view>

// Tar streams, the form files travel in between this machine and a sandbox (`sandboxer cp`,
// docs/cp.md): read as they arrive and written as they are made, so that memory stays bounded
// whatever the size. The reader takes what the tools at the other end write: POSIX ustar, pax
// extended headers (Docker's archive endpoint, GNU tar --posix), GNU long names (BusyBox and GNU
// tar), and base-256 sizes. A stream from a sandbox is untrusted: every field is bounded and
// checked, and a malformed stream is an error naming its byte offset, never a crash
// (fuzz/fuzz_tar.cpp).
namespace sandboxer::tar {

enum class Type {
  file,
  directory,
  symlink,
  hardlink, // `link` names an earlier entry of the same stream
  other,    // a device, a fifo: reported, never made on the host
};

struct Entry {
  std::string path; // relative as written in the stream, without a trailing '/'
  Type type = Type::file;
  uint32_t mode = 0644; // permission bits (07777)
  int64_t mtime = 0;    // seconds since the epoch
  uint64_t size = 0;    // bytes of content (files only)
  std::string link;     // symlink target, or the hardlink's earlier path
  int64_t uid = 0;
  int64_t gid = 0;
};

// A malformed or truncated stream; `offset` is where in the stream it was found.
class Error : public std::runtime_error {
public:
  Error(uint64_t offset, const std::string& message);
  uint64_t offset() const { return m_offset; }

private:
  uint64_t m_offset;
};

// What a Reader finds, in order: begin, the content of a file in chunks, end.
class Sink {
public:
  virtual ~Sink() = default;
  virtual void begin(const Entry& entry) = 0;
  virtual void data(std::string_view chunk) = 0;
  virtual void end() = 0;
};

// A push parser: feed() the stream in pieces of any size, then finish().
class Reader {
public:
  explicit Reader(Sink& sink);
  void feed(std::string_view bytes);
  // The stream ended: throws Error unless it ended between entries (with or without the two
  // zero blocks that close an archive; tools differ).
  void finish();
  uint64_t offset() const { return m_offset; }
  bool ended() const { return m_state == State::closed; }

private:
  enum class State { header, content, padding, extension, closed };
  void on_header();
  void on_extension_done();
  void fail(const std::string& message) const;

  Sink& m_sink;
  State m_state = State::header;
  uint64_t m_offset = 0;
  std::string m_block;      // the header block being gathered
  uint64_t m_remaining = 0; // content (or extension) bytes still to come
  uint64_t m_padding = 0;   // zero bytes after the content, up to a block
  int m_zero_blocks = 0;
  char m_extension_type = 0; // 'x', 'g', 'L' or 'K' while one is gathered
  std::string m_extension;
  // Values a pax header or a GNU long name set for the next entry.
  std::string m_next_path;
  std::string m_next_link;
  std::string m_pax_size;
  std::string m_pax_mtime;
  std::string m_pax_uid;
  std::string m_pax_gid;
};

// A stream writer: begin() an entry, data() its content (exactly entry.size bytes), end(); then
// finish(). Names or links that ustar cannot hold get a pax header, as Docker's own writer does.
class Writer {
public:
  explicit Writer(std::function<void(std::string_view)> out);
  void begin(const Entry& entry);
  void data(std::string_view chunk);
  void end();
  void finish();
  uint64_t written() const { return m_written; }

private:
  void emit(std::string_view bytes);
  void header(const Entry& entry, char type, const std::string& name, const std::string& link,
              uint64_t size);

  std::function<void(std::string_view)> m_out;
  uint64_t m_written = 0;
  uint64_t m_remaining = 0;
  uint64_t m_size = 0;
  bool m_open = false;
};

} // namespace sandboxer::tar
