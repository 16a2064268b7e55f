#pragma once
// `sandboxer ledger export|import` (ledger_move.cpp).

#include <optional>
#include <string>

#include "cli/commands/commands.hpp"

namespace sandboxer::commands {

// Every record, live and closed, as JSON Lines after a header line: to `output` (atomically) or
// stdout.
ExitCode run_export(Context& context, const std::optional<std::string>& output);
// Adds the records of an export that the ledger lacks, in one transaction; records already there
// with the same chain head are left alone (an import is idempotent). An empty ledger takes the
// export's ledger id.
ExitCode run_import(Context& context, const std::string& input);

} // namespace sandboxer::commands
