// `sandboxer ledger export|import`: a whole ledger as JSON Lines, to move it between stores (the
// local files and a fleet's PostgreSQL) keeping ids, histories and their hash chains.
#include "cli/commands/ledger_move.hpp"

#include <fmt/format.h>
#include <fstream>
#include <map>
#include <spdlog/spdlog.h>

#include "cli/commands/commands.hpp"
#include "core/errors.hpp"
#include "core/ledger/chain.hpp"
#include "core/ledger/document.hpp"
#include "sdk/files.hpp"

namespace sandboxer::commands {
namespace {

// 2: records of ledger schema 3 (paused ones, pause policies), which a reader of version 1 would
// take for corrupt; 3: of schema 4 (pool members). Versions 1 and 2 hold records of schemas 2 and
// 3, which this reader still reads.
constexpr int k_export_version = 3;
constexpr int k_oldest_export_version = 1;

struct ExportHeader {
  std::string ledger_id;
  std::uint64_t event_seq = 0;
};

ExportHeader parse_header(const std::string& line, const std::string& where) {
  try {
    auto doc = nlohmann::json::parse(line);
    const int version = doc.is_object() ? doc.value("sandboxer_ledger_export", 0) : 0;
    if (version > k_export_version) {
      throw UsageError(fmt::format("{}: a sandboxer ledger export of version {}, newer than this "
                                   "sandboxer reads ({}); upgrade sandboxer",
                                   where, version, k_export_version));
    }
    if (version < k_oldest_export_version) {
      throw UsageError(fmt::format("{}: not a sandboxer ledger export (version {}..{}): the "
                                   "first line is its header",
                                   where, k_oldest_export_version, k_export_version));
    }
    return {doc.at("ledger_id").get<std::string>(), doc.at("event_seq").get<std::uint64_t>()};
  } catch (const nlohmann::json::exception& e) {
    throw UsageError(fmt::format("{}: not a sandboxer ledger export header: {}", where, e.what()));
  }
}

} // namespace

ExitCode run_export(Context& context, const std::optional<std::string>& output) {
  const Ledger& ledger = context.ledger();
  LedgerData live = ledger.read(ReadScope::summary);
  std::string text = nlohmann::json({{"sandboxer_ledger_export", k_export_version},
                                     {"ledger_id", live.ledger_id},
                                     {"event_seq", live.event_seq},
                                     {"from", ledger.location()}})
                         .dump() +
                     "\n";
  std::size_t records = 0;
  ledger.scan(Records::all, ReadScope::whole, [&](SandboxRecord& record) {
    text += ledger_format::journal_line(record);
    ++records;
    return true;
  });
  if (output && *output != "-") {
    write_file_atomically(*output, text);
    spdlog::info("exported {} record(s) of ledger {} to {}", records, live.ledger_id, *output);
  } else {
    std::fwrite(text.data(), 1, text.size(), stdout);
  }
  return ExitCode::ok;
}

ExitCode run_import(Context& context, const std::string& input) {
  std::ifstream in(input);
  if (!in) {
    throw UsageError(fmt::format("ledger import: cannot read {}", input));
  }
  std::string line;
  if (!std::getline(in, line)) {
    throw UsageError(fmt::format("{}: empty; expected a 'sandboxer ledger export'", input));
  }
  ExportHeader header = parse_header(line, input + ":1");
  // Every record is read and checked before anything is written: a bad line changes nothing.
  std::vector<SandboxRecord> records;
  for (long number = 2; std::getline(in, line); ++number) {
    if (line.empty()) {
      continue;
    }
    SandboxRecord record;
    const std::string where = fmt::format("{}:{}", input, number);
    try {
      ledger_format::read_journal_line(line, record, ReadScope::whole);
    } catch (const ledger_format::ShapeError& e) {
      throw UsageError(fmt::format("{}: not a ledger record: {}", where, e.describe()));
    } catch (const ledger_format::SyntaxError& e) {
      throw UsageError(fmt::format("{}: not JSON at byte {}: {}", where, e.offset, e.message));
    }
    if (auto broken = chain::verify(record)) {
      throw Error(ExitCode::unverified,
                  fmt::format("{}: sandbox {}: its hash chain breaks at history[{}]; nothing was "
                              "imported",
                              where, record.id, broken->index));
    }
    records.push_back(std::move(record));
  }

  const Ledger& ledger = context.ledger();
  std::map<std::string, std::string> present; // id -> chain head
  ledger.scan(Records::all, ReadScope::whole, [&](SandboxRecord& record) {
    present[record.id] = record.chain_head;
    return true;
  });
  auto tx = ledger.begin();
  if (present.empty()) {
    tx->adopt(header.ledger_id, header.event_seq);
  } else if (tx->ledger_id() != header.ledger_id) {
    throw UsageError(fmt::format("ledger {} is ledger {}, and {} was exported from ledger {}: "
                                 "importing would merge two ledgers; import into an empty one",
                                 ledger.location(), tx->ledger_id(), input, header.ledger_id));
  }
  std::size_t added = 0, same = 0;
  std::vector<std::string> differing;
  for (auto& record : records) {
    auto it = present.find(record.id);
    if (it == present.end()) {
      present[record.id] = record.chain_head;
      tx->insert(std::move(record));
      ++added;
    } else if (it->second == record.chain_head) {
      ++same;
    } else {
      differing.push_back(record.id);
    }
  }
  if (!differing.empty()) {
    throw Error(ExitCode::partial,
                fmt::format("ledger import: {} record(s) are in both ledgers with different "
                            "histories (the first: {}); nothing was imported",
                            differing.size(), differing.front()));
  }
  tx.commit();
  nlohmann::json data = {{"ledger", ledger.location()},
                         {"ledger_id", header.ledger_id},
                         {"imported", added},
                         {"already_present", same}};
  context.out().print(data, [&] {
    return Table{{},
                 {{fmt::format("imported {} record(s) into {} ({} already there)", added,
                               ledger.location(), same)}}};
  });
  return ExitCode::ok;
}

} // namespace sandboxer::commands
