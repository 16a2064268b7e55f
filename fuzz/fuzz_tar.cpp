// A tar stream that comes out of a sandbox (`sandboxer cp ID:SRC DEST`, docs/cp.md) is written by
// whatever runs there. The reader must neither crash, hang nor hold more than its bounds on any
// bytes, fed in any pieces; a bad stream is a tar::Error, nothing else. The first input byte
// picks the piece size, so that headers split across feeds are covered.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include <sandboxer/tar.hpp>

namespace {

class CountingSink : public sandboxer::tar::Sink {
public:
  void begin(const sandboxer::tar::Entry& entry) override {
    if (m_open || entry.path.empty()) {
      __builtin_trap();
    }
    m_open = true;
  }
  void data(std::string_view chunk) override {
    if (!m_open || chunk.empty()) {
      __builtin_trap();
    }
  }
  void end() override {
    if (!m_open) {
      __builtin_trap();
    }
    m_open = false;
  }

private:
  bool m_open = false;
};

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) {
    return 0;
  }
  const std::size_t piece = 1 + data[0] % 64 * 37;
  std::string_view stream(reinterpret_cast<const char*>(data + 1), size - 1);
  CountingSink sink;
  sandboxer::tar::Reader reader(sink);
  try {
    for (std::size_t at = 0; at < stream.size(); at += piece) {
      reader.feed(stream.substr(at, piece));
    }
    reader.finish();
  } catch (const sandboxer::tar::Error&) {
  }
  return 0;
}
