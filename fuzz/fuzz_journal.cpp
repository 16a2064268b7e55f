// A journal segment (docs/ledger-format.md, "The journal"): whatever its bytes, reading, looking
// up, verifying and a retention dry run report problems rather than crash, and a commit that closes
// one more record afterwards leaves every record that was readable still readable, plus the new
// one.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <fstream>

#include <sandboxer/error.hpp>

#include "core/ledger/ledger.hpp"
#include "fuzz/scratch_dir.hpp"

namespace {

using namespace sandboxer;

std::size_t closed_records(const Ledger& ledger) {
  std::size_t count = 0;
  ledger.scan(Records::closed, ReadScope::whole, [&](SandboxRecord&) {
    ++count;
    return true;
  });
  return count;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto state = scratch_dir() / "state";
  std::filesystem::remove_all(state);
  std::filesystem::create_directories(state / "journal");
  {
    std::ofstream out(state / "journal" / "segment-000001.jsonl", std::ios::binary);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
    std::ofstream doc(state / "ledger.json", std::ios::binary);
    doc << R"({"schema_version":2,"ledger_id":"ldg-fuzzfuzzfuzz","event_seq":0,"journal":{"first":1,"segment":1,"offset":)"
        << size << R"(},"closed":{},"sandboxes":[]})"
        << "\n";
  }
  Ledger ledger(state, std::chrono::seconds(1));
  std::size_t before = 0;
  try {
    before = closed_records(ledger);
    ledger.find("sbx-aaaaaaaaaaaa");
    ledger.find("some-name");
    ledger.store().verify();
    ledger.store().prune(*parse_time("2030-01-01T00:00:00Z"), true);
  } catch (const Error&) {
    return 0; // refused as a whole, with a message: fine
  }
  try {
    auto tx = ledger.begin();
    SandboxRecord r;
    r.id = new_sandbox_id();
    r.name = r.id;
    r.driver = "stub";
    r.created_at = *parse_time("2026-12-02T12:00:00Z");
    r.transition(EventKind::destroyed, State::destroyed, r.created_at, "fuzz", "closed");
    tx.data().sandboxes.push_back(r);
    tx.commit();
  } catch (const Error&) {
    return 0;
  }
  if (closed_records(ledger) != before + 1) {
    __builtin_trap();
  }
  return 0;
}
