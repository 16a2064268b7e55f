// What an external driver writes on its stdout is untrusted: sandboxer splits it into lines and
// reads each as a JSON-RPC message (src/protocol/). Neither may crash, hang or throw.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "src/protocol/protocol.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace sandboxer::protocol;
  std::string_view input(reinterpret_cast<const char*>(data), size);
  LineBuffer lines;
  // Fed in two pieces, as reads cut a stream anywhere.
  lines.feed(input.substr(0, size / 2));
  lines.feed(input.substr(size / 2));
  std::string line;
  while (lines.next(line)) {
    Message message = read_message(line, 1);
    if (message.type == Message::Type::result && message.value.is_object() &&
        message.value.contains("capabilities")) {
      capabilities_of(message.value["capabilities"]);
    }
  }
  read_message(lines.rest(), 1);
  return 0;
}
