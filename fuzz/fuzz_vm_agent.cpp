// What the vm-packer driver reads from a guest, which may be anything its image runs: the guest
// agent's frames (agent/wire.hpp), and a Packer manifest. Bad bytes are a WireError or a
// ManifestError, never a crash, a hang or an allocation past the frame limit.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "drivers/vm-packer/agent/wire.hpp"
#include "drivers/vm-packer/manifest.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace sandboxer::vm_agent;
  std::string input(reinterpret_cast<const char*>(data), size);
  FrameReader reader;
  try {
    // In two pieces, as a socket may deliver it.
    reader.feed(std::string_view(input).substr(0, size / 2));
    reader.skip_to(std::string_view(input).substr(0, 9));
    reader.feed(std::string_view(input).substr(size / 2));
    while (auto frame = reader.next()) {
      try {
        if (frame->type == FrameType::start) {
          decode_start(frame->payload);
        } else if (frame->type == FrameType::exit) {
          decode_exit(frame->payload);
        } else if (frame->type == FrameType::resize) {
          decode_size(frame->payload);
        }
      } catch (const WireError&) {
      }
    }
  } catch (const WireError&) {
  }
  auto manifest = nlohmann::json::parse(input, nullptr, false);
  try {
    sandboxer::drivers::vm_packer::packer_image(manifest, "/m");
  } catch (const sandboxer::drivers::vm_packer::ManifestError&) {
  }
  return 0;
}
