#include "core/ledger/journal_chain.hpp"

#include <fmt/format.h>

namespace sandboxer::ledger_journal {

void ChainWalk::problem(std::string_view line, const std::string& where, std::string what) {
  m_report.problems.push_back({std::string(id_of_line(line)), -1, where, std::move(what)});
}

void ChainWalk::check_kept(const std::string& hash, const std::string& where) {
  if (!m_kept || m_kept_checked || m_kept->lines != m_lines) {
    return;
  }
  m_kept_checked = true;
  if (hash != m_kept->hash) {
    problem({}, where,
            fmt::format("the kept head {} is not on the journal's chain: after line {} the "
                        "chain is at {}. The closed history up to there was rewritten",
                        m_kept->text(), m_lines, hash));
  }
}

void ChainWalk::segment(std::uint64_t segment, const std::optional<SegmentStart>& start,
                        const std::string& where) {
  if (!start) {
    return; // its header is unreadable: read_segment reports it
  }
  if (start->prev.empty()) {
    if (m_running) {
      problem({}, where,
              fmt::format("segment {} has no place in the journal's chain, but the segments "
                          "before it are chained: it was replaced",
                          segment));
    }
    return; // older than the chain
  }
  if (m_running && (*m_running != start->prev || m_lines != start->lines)) {
    problem({}, where,
            fmt::format("segment {} starts after line {} at {}, but the lines before it end "
                        "after line {} at {}: closed records were removed, added or changed "
                        "between segments",
                        segment, start->lines, start->prev, m_lines, *m_running));
  }
  if (!m_retained_from) {
    m_retained_from = start->lines;
  }
  m_running = start->prev;
  m_lines = start->lines;
  check_kept(*m_running, where);
}

void ChainWalk::line(std::string_view text, const std::string& where, bool reported) {
  const bool explained = m_last_reported;
  m_last_reported = reported;
  const std::string_view prev = prev_of_line(text);
  if (prev.empty()) {
    if (m_running && !reported) {
      problem(text, where,
              "this closed record has no journal_prev, but the lines before it are chained: it "
              "was added or rewritten");
    }
    return; // written before the chain
  }
  if (!m_running) {
    // The first line chained in a segment that began before the chain did.
    m_running = genesis(m_ledger_id);
    m_retained_from = 0;
    check_kept(*m_running, where);
  }
  if (prev != *m_running && !explained) {
    problem(text, where,
            fmt::format("journal_prev is {}, expected {}: a closed record before this one was "
                        "removed, added, reordered or changed",
                        prev, *m_running));
  }
  m_running = line_hash(text);
  ++m_lines;
  check_kept(*m_running, where);
}

void ChainWalk::finish(const JournalTail& tail, const std::string& where) {
  if (tail.head.empty()) {
    if (m_running) {
      problem({}, where,
              "the live document has no journal head, but the journal is chained: the head "
              "was removed");
    }
  } else {
    const std::string ends = m_running.value_or(genesis(m_ledger_id));
    if ((ends != tail.head && !m_last_reported) || m_lines != tail.lines) {
      problem({}, where,
              fmt::format("the journal's chain ends after line {} at {}, but the live document's "
                          "head is line {} at {}: closed records at the end were removed or "
                          "changed",
                          m_lines, ends, tail.lines, tail.head));
    }
  }
  if (!m_kept || m_kept_checked) {
    return;
  }
  const std::uint64_t retained = m_retained_from.value_or(m_lines);
  if (m_kept->lines < retained) {
    problem({}, where,
            fmt::format("the kept head {} is at line {}, before the retained journal (lines "
                        "after {}; retention pruned the rest): it cannot be checked",
                        m_kept->text(), m_kept->lines, retained));
  } else if (m_kept->lines > m_lines) {
    problem({}, where,
            fmt::format("the kept head {} is at line {}, but the journal's chain has only {} "
                        "line(s): closed records were removed",
                        m_kept->text(), m_kept->lines, m_lines));
  } else if (m_kept->hash != genesis(m_ledger_id)) {
    problem({}, where,
            fmt::format("the kept head {} is not on the journal's chain: it is not this "
                        "ledger's, or the closed history was rewritten",
                        m_kept->text()));
  }
}

} // namespace sandboxer::ledger_journal
