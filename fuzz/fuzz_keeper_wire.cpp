// What arrives on the connection keeper's socket is read by the keeper (requests) and by every
// command (replies) (pg/keeper_wire.hpp). A damaged frame must be refused with a
// WireError, never crash, hang or allocate without bound; one that decodes encodes back to itself.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "pg/keeper_wire.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace sandboxer::ledger::pg::wire;
  if (size < 1) {
    return 0;
  }
  std::string_view body(reinterpret_cast<const char*>(data) + 1, size - 1);
  try {
    if (data[0] % 3 == 0) {
      Request request = decode_request(body);
      if (decode_request(encode(request)).statements.size() != request.statements.size()) {
        std::abort();
      }
    } else if (data[0] % 3 == 1) {
      Reply reply = decode_reply(body);
      if (encode(decode_reply(encode(reply))) != encode(reply)) {
        std::abort();
      }
    } else if (body.size() >= 4) {
      frame_length(body.data());
    }
  } catch (const WireError&) {
  }
  return 0;
}
