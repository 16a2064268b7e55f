// The profile loader (YAML -> typed profile): any file either loads or is refused with an Error
// naming file:line:col; no crash, no unbounded time or memory (alias cycles and expansions).
#include <cstddef>
#include <cstdint>
#include <fstream>

#include <sandboxer/error.hpp>

#include "core/profile/profile.hpp"
#include "fuzz/scratch_dir.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto file = scratch_dir() / "fuzzed.yaml";
  {
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  try {
    sandboxer::load_profile(file, {scratch_dir()});
  } catch (const sandboxer::Error&) {
  }
  return 0;
}
