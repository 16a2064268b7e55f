#pragma once
// Checks the journal's chain (docs/ledger-format.md, "The journal's chain") as verify reads it,
// segment by segment and line by line, without keeping the lines.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/ledger/document.hpp"
#include "core/ledger/journal.hpp"
#include "core/ledger/ledger_store.hpp"

namespace sandboxer::ledger_journal {

class ChainWalk {
public:
  ChainWalk(VerifyReport& report, std::string ledger_id, std::optional<ChainHead> kept)
      : m_report(report), m_ledger_id(std::move(ledger_id)), m_kept(std::move(kept)) {}

  // Before the segment's lines: where its header says it joins the chain.
  void segment(std::uint64_t segment, const std::optional<SegmentStart>& start,
               const std::string& where);
  // `reported`: the line's record was already reported (it does not parse, or its own chain
  // or seal is broken): the break it makes in the journal's chain is that same edit, not
  // reported twice.
  void line(std::string_view text, const std::string& where, bool reported);
  // After the last segment: the chain must end where the live document says.
  void finish(const JournalTail& tail, const std::string& where);

private:
  void problem(std::string_view line, const std::string& where, std::string what);
  void check_kept(const std::string& hash, const std::string& where);

  VerifyReport& m_report;
  std::string m_ledger_id;
  std::optional<ChainHead> m_kept;
  bool m_kept_checked = false;
  std::optional<std::string> m_running; // the hash the next line links to; unset before the chain
  std::uint64_t m_lines = 0;
  std::optional<std::uint64_t> m_retained_from;
  bool m_last_reported = false; // the line before was reported already
};

} // namespace sandboxer::ledger_journal
