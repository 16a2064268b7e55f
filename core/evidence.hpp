#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "core/ledger/record.hpp"

namespace sandboxer {

// One self-contained JSON document about a sandbox (docs/evidence.md): the whole record as the
// ledger keeps it, and, derived from its history, who made it from which profile, every state
// transition, every exec with its exit code, snapshots, event ids and the hash chain. Anyone can
// check it with the Python program in docs/evidence.md, without sandboxer.
nlohmann::json evidence_document(const SandboxRecord& record, const std::string& ledger_id,
                                 const std::string& ledger_location, TimePoint generated_at);

} // namespace sandboxer
