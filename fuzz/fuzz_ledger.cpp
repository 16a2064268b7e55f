// The ledger reader: any file either reads (whole and as a summary) or is refused with an Error;
// and what it reads, a commit writes back readable ("no commit writes what the reader rejects").
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <fstream>

#include <sandboxer/error.hpp>

#include "core/ledger/ledger.hpp"
#include "fuzz/scratch_dir.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto state = scratch_dir() / "state";
  std::filesystem::create_directories(state);
  {
    std::ofstream out(state / "ledger.json", std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  sandboxer::Ledger ledger(state, std::chrono::seconds(1));
  try {
    ledger.read(sandboxer::ReadScope::summary);
  } catch (const sandboxer::Error&) {
  }
  sandboxer::LedgerData whole;
  try {
    whole = ledger.read();
  } catch (const sandboxer::Error&) {
    return 0;
  }
  try {
    auto transaction = ledger.begin();
    transaction.commit();
  } catch (const sandboxer::Error&) {
    return 0; // refused before writing (an unwritable time, say): fine, nothing was written
  }
  // Whatever was committed must read again, with the same records.
  if (ledger.read().sandboxes.size() != whole.sandboxes.size()) {
    __builtin_trap();
  }
  return 0;
}
