#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

// The guest agent's protocol on a virtio-serial port (docs/drivers/vm-packer.md, "Guest agent").
// Shared by the agent in the guest and the driver on the host, so the two ends cannot drift.
// A frame: a 4-byte big-endian body length, then the body: 1 type byte, a 4-byte big-endian
// channel (one exec), the payload. Nothing here allocates more than k_max_payload per frame.
namespace sandboxer::vm_agent {

class WireError : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

enum class FrameType : std::uint8_t {
  hello = 'H',       // host: 8 random bytes; the agent forgets the connection's past and answers
  hello_ack = 'h',   // agent: the same 8 bytes
  start = 'S',       // host: a StartRequest on a new channel
  stdin_data = 'I',  // host: bytes for the command's stdin; empty: end of input
  resize = 'R',      // host: a TerminalSize (rows, cols as two u16)
  signal = 'K',      // host: a signal number (u8) for the command's process group
  stdout_data = 'O', // agent: output
  stderr_data = 'E', // agent: output
  exit = 'X',        // agent: an ExitReport; the channel is done
};

struct Frame {
  FrameType type = FrameType::hello;
  std::uint32_t channel = 0;
  std::string payload;
};

constexpr std::size_t k_header_size = 9;
constexpr std::size_t k_max_payload = 1 << 20;
constexpr std::size_t k_nonce_size = 8;

std::string encode(const Frame& frame);

// Cuts a byte stream into frames. Bad input (an unknown type, a length over the limit) throws
// WireError; the reader is then unusable.
class FrameReader {
public:
  void feed(std::string_view bytes);
  std::optional<Frame> next();
  // Drops everything up to the first occurrence of `marker` and returns true, or keeps the last
  // marker.size() - 1 bytes and returns false: how a new connection skips a stale stream.
  bool skip_to(std::string_view marker);
  std::size_t buffered() const { return m_buffer.size() - m_offset; }

private:
  std::string m_buffer;
  std::size_t m_offset = 0;
};

struct StartRequest {
  std::vector<std::string> argv;
  std::vector<std::pair<std::string, std::string>> env;
  std::string workdir; // empty: the agent's default (/root)
  bool tty = false;
  bool attach_stdin = false;
  std::uint16_t rows = 0, cols = 0;
};
std::string encode_start(const StartRequest& request);
StartRequest decode_start(std::string_view payload);

struct ExitReport {
  enum class Kind : std::uint8_t { exited = 0, signaled = 1, not_found = 2, not_startable = 3 };
  Kind kind = Kind::exited;
  std::int32_t value = 0; // exit code or signal number
  std::string message;    // why it could not start
};
std::string encode_exit(const ExitReport& report);
ExitReport decode_exit(std::string_view payload);

std::string encode_size(std::uint16_t rows, std::uint16_t cols);
std::pair<std::uint16_t, std::uint16_t> decode_size(std::string_view payload);

} // namespace sandboxer::vm_agent
