#include "pg/closings.hpp"

#include <fmt/format.h>
#include <set>
#include <unordered_map>

#include "core/errors.hpp"
#include "core/ledger/journal.hpp"
#include "core/ledger/journal_chain.hpp"
#include "core/sha256.hpp"

namespace sandboxer::ledger::pg {
namespace {

// A closing as the line it is hashed as: the journal's form, `journal_prev` last.
std::string closing_text(const std::string& seq, const std::string& id, const std::string& kind,
                         const std::string& digest, const std::string& prev) {
  return fmt::format(R"({{"id":"{}","seq":{},"kind":"{}","digest":"{}","journal_prev":"{}"}})", id,
                     seq, kind, digest, prev);
}

} // namespace

std::vector<Connection::Statement> chain_closings(ChainPosition& position,
                                                  const std::string& ledger_id,
                                                  const std::string& kind,
                                                  const std::vector<ClosedRow>& rows) {
  std::vector<Connection::Statement> out;
  const std::string lines_before = std::to_string(position.lines);
  for (const auto& row : rows) {
    const std::string prev =
        position.head.empty() ? ledger_journal::genesis(ledger_id) : position.head;
    const std::string seq = std::to_string(position.lines + 1);
    const std::string digest = sha256_digest(row.text);
    out.push_back({"INSERT INTO sandboxer.closings (seq, sandbox_id, kind, digest, prev) VALUES "
                   "($1, $2, $3, $4, $5)",
                   {seq, row.id, kind, digest, prev}});
    position.head = ledger_journal::line_hash(closing_text(seq, row.id, kind, digest, prev));
    ++position.lines;
  }
  out.push_back({"UPDATE sandboxer.ledger_meta SET chain_head = $1, chain_lines = $2 WHERE "
                 "chain_lines = $3",
                 {position.head, std::to_string(position.lines), lines_before}});
  return out;
}

void check_closings(Connection& connection, const std::string& where, VerifyReport& report,
                    const std::optional<ChainHead>& kept) {
  auto meta = connection.query(
      "SELECT ledger_id, chain_head, chain_lines, chain_since FROM sandboxer.ledger_meta");
  if (meta.values.empty()) {
    report.problems.push_back({"", -1, where, "the ledger_meta row is missing"});
    return;
  }
  const auto& m = meta.values[0];
  const std::string ledger_id = m[0].value_or("");
  ledger_journal::ChainWalk walk(report, ledger_id, kept);
  struct Latest {
    std::string kind;
    std::string digest;
    std::string seq;
  };
  std::unordered_map<std::string, Latest> latest;
  auto closings = connection.query(
      "SELECT seq, sandbox_id, kind, digest, prev FROM sandboxer.closings ORDER BY seq");
  std::uint64_t expected_seq = 1;
  for (const auto& row : closings.values) {
    const std::string seq = row[0].value_or("");
    const std::string id = row[1].value_or("");
    const std::string place = fmt::format("{} closings row {}", where, seq);
    if (seq != std::to_string(expected_seq)) {
      report.problems.push_back(
          {id, -1, place,
           fmt::format("closing {} comes where {} should: closings were removed", seq,
                       expected_seq)});
    }
    expected_seq = std::stoull(seq) + 1;
    walk.line(closing_text(seq, id, row[2].value_or(""), row[3].value_or(""), row[4].value_or("")),
              place, false);
    latest[id] = {row[2].value_or(""), row[3].value_or(""), seq};
  }
  ledger_format::JournalTail tail;
  tail.head = m[1].value_or("");
  tail.lines = std::stoull(m[2].value_or("0"));
  walk.finish(tail, where + " ledger_meta");

  // Every closed row is what its last closing hashed; every closed record on the chain is there.
  const std::string since = m[3].value_or("0");
  auto rows = connection.query(
      "SELECT id, resident, record, position > $1::bigint FROM sandboxer.sandboxes", {since});
  std::set<std::string> present;
  for (const auto& row : rows.values) {
    const std::string id = row[0].value_or("");
    present.insert(id);
    if (row[1].value_or("") == "t") {
      continue; // live, or reopened: its history chain speaks for it
    }
    const std::string place = fmt::format("{} sandboxes row {}", where, id);
    auto it = latest.find(id);
    if (it == latest.end()) {
      if (row[3].value_or("") == "t") {
        report.problems.push_back(
            {id, -1, place,
             "this closed record is not on the chain of closed records: it was added or closed "
             "by hand"});
      }
    } else if (it->second.kind == "closed" &&
               it->second.digest != sha256_digest(row[2].value_or(""))) {
      report.problems.push_back(
          {id, -1, place,
           fmt::format("this closed record differs from what closing {} hashed: it was changed "
                       "after it was closed",
                       it->second.seq)});
    }
  }
  for (const auto& [id, last] : latest) {
    if (last.kind == "closed" && !present.contains(id)) {
      report.problems.push_back(
          {id, -1, fmt::format("{} closings row {}", where, last.seq),
           "this record was closed (closing " + last.seq +
               ") and is not in the ledger, and no pruning removed it: it was deleted"});
    }
  }
}

LedgerHead chain_head(Connection& connection) {
  auto meta = connection.query("SELECT ledger_id, chain_head, chain_lines FROM "
                               "sandboxer.ledger_meta");
  if (meta.values.empty()) {
    throw LedgerError(fmt::format("ledger {} has no ledger_meta row: the schema was damaged",
                                  connection.where()));
  }
  const auto& m = meta.values[0];
  LedgerHead head;
  head.ledger_id = m[0].value_or("");
  head.head.hash = m[1].value_or("");
  head.head.lines = std::stoull(m[2].value_or("0"));
  if (head.head.hash.empty()) {
    head.head.hash = ledger_journal::genesis(head.ledger_id);
  }
  return head;
}

} // namespace sandboxer::ledger::pg
