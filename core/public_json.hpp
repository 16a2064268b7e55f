#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "core/ledger/ledger.hpp"

namespace sandboxer {

// The documented, stable JSON of a record (docs/json-output.md): what commands print and what
// lifecycle events carry as data. History is included on request. write_public_json appends the
// same text to `out` without building a document (for `list`).
void write_public_json(std::string& out, const SandboxRecord& record, TimePoint now,
                       bool with_history);
nlohmann::json public_json(const SandboxRecord& record, TimePoint now, bool with_history);
nlohmann::json snapshot_json(const SandboxRecord& owner, const SnapshotRecord& snapshot);

} // namespace sandboxer
