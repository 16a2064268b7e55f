// What an external driver writes on its stdout is untrusted: sandboxer splits it into lines and
// reads each as a JSON-RPC message (sdk/protocol/). Neither may crash, hang or throw.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/lifecycle/checked_driver.hpp"
#include "sdk/json/limits.hpp"
#include "sdk/protocol/protocol.hpp"

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
    // What the engine then checks of a create's answer (core/lifecycle/checked_driver.cpp).
    if (message.type == Message::Type::result && message.value.is_object()) {
      const auto& value = message.value;
      if (value.contains("backend_id") && value["backend_id"].is_string()) {
        sandboxer::backend_id_problem(value["backend_id"].get<std::string>());
      }
      if (value.contains("info")) {
        sandboxer::json_limits::problem_of(value["info"], sandboxer::json_limits::k_max_info_bytes);
      }
    }
  }
  read_message(lines.rest(), 1);
  return 0;
}
