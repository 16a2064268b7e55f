// The strict JSON reader (sdk/json/reader.hpp), which reads the ledger and driver specs: any
// input either reads or is a SyntaxError; nothing else may escape, crash or recurse unbounded.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "sdk/json/reader.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using sandboxer::json_text::JsonReader;
  using sandboxer::json_text::SyntaxError;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  bool read = false;
  try {
    JsonReader reader(text);
    reader.any();
    reader.finish();
    read = true;
  } catch (const SyntaxError&) {
  }
  // skip() validates as strictly as any(): whatever one accepts, so does the other.
  bool skipped = false;
  try {
    JsonReader reader(text);
    reader.skip();
    reader.finish();
    skipped = true;
  } catch (const SyntaxError&) {
  }
  if (read != skipped) {
    __builtin_trap();
  }
  return 0;
}
