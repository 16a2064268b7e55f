// The local store: live document + journal segments, migration from schemas 1 and 2, retention by
// segment, and what a SIGKILL at any instant of an append, a rotation or a migration leaves.
#include <chrono>
#include <csignal>
#include <filesystem>
#include <gtest/gtest.h>
#include <map>
#include <random>
#include <set>
#include <sys/stat.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

#include <sandboxer/error.hpp>

#include "core/ledger/chain.hpp"
#include "core/ledger/ledger.hpp"
#include "support/temp_dir.hpp"

namespace sandboxer {
namespace {

using namespace std::chrono_literals;
using json = nlohmann::json;
using testing::read_file;
using testing::TempDir;
using testing::write_file;
namespace fs = std::filesystem;

TimePoint day(int n, int hour = 12) {
  return *parse_time("2026-11-01T00:00:00Z") + std::chrono::hours(24 * n + hour);
}

SandboxRecord record(const std::string& name, State state, TimePoint at) {
  SandboxRecord r;
  r.id = new_sandbox_id();
  r.name = name;
  r.driver = "stub";
  r.created_at = at;
  r.transition(EventKind::created, State::creating, at, "t", "create");
  r.transition(EventKind::ready, State::running, at, "t", "created");
  if (!is_live(state)) {
    r.transition(state == State::failed ? EventKind::failed : EventKind::destroyed, state, at, "t",
                 "closed");
  }
  return r;
}

// Adds one record closed on day `n` (and returns its id).
std::string add_closed(const Ledger& ledger, const std::string& name, int n,
                       State state = State::destroyed) {
  auto tx = ledger.begin();
  tx.data().sandboxes.push_back(record(name, state, day(n)));
  const std::string id = tx.data().sandboxes.back().id;
  tx.commit();
  return id;
}

std::vector<SandboxRecord> all_closed(const Ledger& ledger) {
  std::vector<SandboxRecord> out;
  ledger.scan(Records::closed, ReadScope::whole, [&](SandboxRecord& r) {
    out.push_back(r);
    return true;
  });
  return out;
}

std::vector<std::string> segments(const fs::path& state) {
  std::vector<std::string> names;
  if (fs::exists(state / "journal")) {
    for (const auto& entry : fs::directory_iterator(state / "journal")) {
      names.push_back(entry.path().filename().string());
    }
  }
  std::sort(names.begin(), names.end());
  return names;
}

TEST(LedgerStore, ClosedRecordsLeaveTheLiveDocumentForOneSegmentPerDay) {
  TempDir dir;
  Ledger ledger(dir / "state", 1s);
  const auto a = add_closed(ledger, "a", 0);
  const auto b = add_closed(ledger, "b", 0, State::failed);
  const auto c = add_closed(ledger, "c", 1);
  {
    auto tx = ledger.begin();
    tx.data().sandboxes.push_back(record("live", State::running, day(1)));
    tx.commit();
  }
  EXPECT_EQ(ledger.read().sandboxes.size(), 1u);
  EXPECT_EQ(segments(dir / "state"),
            (std::vector<std::string>{"segment-000001.jsonl", "segment-000002.jsonl"}));
  const auto closed = all_closed(ledger);
  ASSERT_EQ(closed.size(), 3u);
  EXPECT_EQ(closed[0].id, a);
  EXPECT_EQ(closed[1].id, b);
  EXPECT_EQ(closed[2].id, c);
  EXPECT_EQ(ledger.find(b)->state, State::failed);
  EXPECT_EQ(ledger.find("c")->id, c);
  EXPECT_EQ(ledger.read().closed_counts,
            (std::map<std::string, std::uint64_t>{{"destroyed", 2}, {"failed", 1}}));
  EXPECT_TRUE(ledger.store().verify().problems.empty());
}

TEST(LedgerStore, ARecordWithSnapshotsStaysLiveUntilTheLastGoes) {
  TempDir dir;
  Ledger ledger(dir / "state", 1s);
  auto r = record("kept", State::destroyed, day(0));
  r.snapshots.push_back({"snp-aaaaaaaaaaaa", "s1", "ref", 1, day(0)});
  {
    auto tx = ledger.begin();
    tx.data().sandboxes.push_back(r);
    tx.commit();
  }
  EXPECT_EQ(ledger.read().sandboxes.size(), 1u) << "its snapshots are still on the backend";
  {
    auto tx = ledger.begin();
    tx.find(r.id)->snapshots.clear();
    tx.commit();
  }
  EXPECT_TRUE(ledger.read().sandboxes.empty());
  EXPECT_EQ(all_closed(ledger).size(), 1u);
}

TEST(LedgerStore, AReopenedRecordComesBackLiveAndItsNewestCopyWins) {
  TempDir dir;
  Ledger ledger(dir / "state", 1s);
  const auto id = add_closed(ledger, "x", 0);
  {
    auto tx = ledger.begin();
    SandboxRecord* found = tx.find(id);
    ASSERT_NE(found, nullptr);
    found->transition(EventKind::orphan_found, State::orphaned, day(1), "reaper", "found again");
    tx.commit();
  }
  EXPECT_EQ(ledger.read().sandboxes.at(0).id, id);
  EXPECT_TRUE(all_closed(ledger).empty()) << "the live copy hides the closed one";
  {
    auto tx = ledger.begin();
    tx.find(id)->transition(EventKind::destroyed, State::destroyed, day(1), "reaper", "gone");
    tx.commit();
  }
  const auto closed = all_closed(ledger);
  ASSERT_EQ(closed.size(), 1u) << "one record, though the journal holds two copies";
  EXPECT_EQ(closed[0].history.size(), 5u);
  EXPECT_EQ(ledger.find(id)->history.size(), 5u);
  EXPECT_TRUE(ledger.store().verify().problems.empty());
}

// Found by fuzz_journal: a damaged newer copy hid the readable older one.
TEST(LedgerStore, ADamagedNewerCopyDoesNotHideTheOlderOne) {
  TempDir dir;
  Ledger ledger(dir / "state", 1s);
  const auto id = add_closed(ledger, "x", 0);
  for (auto [kind, state] : {std::pair{EventKind::orphan_found, State::orphaned},
                             std::pair{EventKind::destroyed, State::destroyed}}) {
    auto tx = ledger.begin();
    tx.find(id)->transition(kind, state, day(0), "reaper", "again");
    tx.commit();
  }
  const auto segment = dir / "state" / "journal" / "segment-000001.jsonl";
  std::string text = read_file(segment);
  const auto second = text.rfind("{\"id\":");
  text[text.find("\"state\"", second) + 1] = '\\'; // same length: the committed end stays right
  write_file(segment, text);
  const auto closed = all_closed(ledger);
  ASSERT_EQ(closed.size(), 1u);
  EXPECT_EQ(closed[0].history.size(), 3u) << "the first copy";
  ASSERT_TRUE(ledger.find(id));
  EXPECT_EQ(ledger.find(id)->history.size(), 3u);
}

TEST(LedgerStore, AnUnchangedClosedRecordIsNotWrittenAgain) {
  TempDir dir;
  Ledger ledger(dir / "state", 1s);
  const auto id = add_closed(ledger, "x", 0);
  const auto before = fs::file_size(dir / "state" / "journal" / "segment-000001.jsonl");
  {
    auto tx = ledger.begin();
    ASSERT_NE(tx.find(id), nullptr);
    tx.commit();
  }
  EXPECT_EQ(fs::file_size(dir / "state" / "journal" / "segment-000001.jsonl"), before);
}

TEST(LedgerStore, BytesPastTheCommittedEndAreNeitherReadNorKept) {
  TempDir dir;
  Ledger ledger(dir / "state", 1s);
  add_closed(ledger, "a", 0);
  const auto segment = dir / "state" / "journal" / "segment-000001.jsonl";
  const std::string committed = read_file(segment);
  write_file(segment, committed + R"({"id":"sbx-halfwritten","na)");
  EXPECT_EQ(all_closed(ledger).size(), 1u);
  EXPECT_TRUE(ledger.store().verify().problems.empty());
  add_closed(ledger, "b", 0);
  const std::string now = read_file(segment);
  EXPECT_TRUE(now.starts_with(committed));
  EXPECT_EQ(now.find("halfwritten"), std::string::npos);
  EXPECT_EQ(all_closed(ledger).size(), 2u);
}

TEST(LedgerStore, ACorruptLineIsNamedAndTheRestStillRead) {
  TempDir dir;
  Ledger ledger(dir / "state", 1s);
  add_closed(ledger, "a", 0);
  const auto b = add_closed(ledger, "b", 0);
  const auto c = add_closed(ledger, "c", 0);
  const auto segment = dir / "state" / "journal" / "segment-000001.jsonl";
  std::string text = read_file(segment);
  const auto at = text.find(b);
  const auto line = text.rfind('\n', at) + 1;
  text[at + 2] = '"'; // a quote inside the id: the line no longer parses
  write_file(segment, text);
  EXPECT_EQ(all_closed(ledger).size(), 2u);
  const auto report = ledger.store().verify();
  // One edit, one problem: that the next line no longer links to the changed one is the same
  // edit, not reported again.
  ASSERT_EQ(report.problems.size(), 1u);
  EXPECT_NE(report.problems[0].where.find(segment.string() + " at byte "), std::string::npos);
  EXPECT_GE(std::stoul(report.problems[0].where.substr(report.problems[0].where.rfind(' ') + 1)),
            line);
  EXPECT_TRUE(ledger.find(c));
}

TEST(LedgerStore, AMissingOrForeignSegmentIsReported) {
  TempDir dir;
  Ledger ledger(dir / "state", 1s);
  add_closed(ledger, "a", 0);
  const auto kept = add_closed(ledger, "b", 1);
  const auto first = dir / "state" / "journal" / "segment-000001.jsonl";
  const std::string text = read_file(first);
  fs::remove(first);
  auto report = ledger.store().verify();
  ASSERT_EQ(report.problems.size(), 1u);
  EXPECT_NE(report.problems[0].what.find("is missing"), std::string::npos);
  EXPECT_EQ(all_closed(ledger).at(0).id, kept);
  std::string foreign = text;
  foreign.replace(foreign.find("ldg-"), 16, "ldg-someoneelse0");
  write_file(first, foreign);
  report = ledger.store().verify();
  ASSERT_EQ(report.problems.size(), 1u);
  EXPECT_NE(report.problems[0].what.find("belongs to ledger ldg-someoneelse0"), std::string::npos);
}

// Found by fuzz_journal: a segment whose committed end is not a line's end (damaged) had the next
// record glued to the broken line, unreadable.
TEST(LedgerStore, ARecordClosedAfterADamagedEndIsReadable) {
  TempDir dir;
  Ledger ledger(dir / "state", 1s);
  add_closed(ledger, "a", 0);
  const auto segment = dir / "state" / "journal" / "segment-000001.jsonl";
  write_file(segment, read_file(segment) + R"({"id":"sbx-cut)");
  auto doc = json::parse(read_file(dir / "state" / "ledger.json"));
  doc["journal"]["offset"] = fs::file_size(segment);
  write_file(dir / "state" / "ledger.json", doc.dump() + "\n");
  const auto b = add_closed(ledger, "b", 0);
  EXPECT_EQ(all_closed(ledger).size(), 2u);
  EXPECT_TRUE(ledger.find(b));
  // The cut line is still reported, once; the records on either side of it still link to each
  // other.
  EXPECT_EQ(ledger.store().verify().problems.size(), 1u) << "the cut line is still reported";
}

// A current segment that is not readable as this ledger's (another ledger's, a newer schema's):
// the next records go to a new segment rather than where no reader would see them.
TEST(LedgerStore, AnUnreadableCurrentSegmentIsNotAppendedTo) {
  TempDir dir;
  Ledger ledger(dir / "state", 1s);
  add_closed(ledger, "a", 0);
  const auto segment = dir / "state" / "journal" / "segment-000001.jsonl";
  std::string text = read_file(segment);
  const std::string ours = "\"sandboxer_journal\":" + std::to_string(LedgerData::k_schema_version);
  text.replace(text.find(ours), ours.size(), "\"sandboxer_journal\":9");
  write_file(segment, text);
  const auto b = add_closed(ledger, "b", 0);
  EXPECT_TRUE(ledger.find(b));
  EXPECT_EQ(segments(dir / "state").size(), 2u);
}

// A record closed failed, then reopened by a destroy and closed again, is journaled twice but is
// one record: one count in `closed` (reap's metrics), one record in verify's totals.
TEST(LedgerStore, ARecordClosedTwiceIsCountedOnce) {
  TempDir dir;
  Ledger ledger(dir / "state", 1s);
  const auto id = add_closed(ledger, "f", 0, State::failed);
  const TimePoint at = day(0, 13);
  {
    auto tx = ledger.begin();
    SandboxRecord* r = tx.find(id);
    ASSERT_TRUE(r);
    r->transition(EventKind::destroying, State::destroying, at, "t", "destroy requested");
    tx.commit();
  }
  EXPECT_EQ(ledger.read().closed_counts["failed"], 0u) << "a reopened record is not closed";
  {
    auto tx = ledger.begin();
    SandboxRecord* r = tx.find(id);
    ASSERT_TRUE(r);
    r->transition(EventKind::destroyed, State::destroyed, at, "t", "destroy requested");
    tx.commit();
  }
  auto counts = ledger.read().closed_counts;
  EXPECT_EQ(counts["failed"], 0u);
  EXPECT_EQ(counts["destroyed"], 1u);
  // Closed again straight from failed to destroyed, in one transaction: the count moves.
  const auto other = add_closed(ledger, "g", 0, State::failed);
  {
    auto tx = ledger.begin();
    SandboxRecord* r = tx.find(other);
    ASSERT_TRUE(r);
    r->transition(EventKind::destroyed, State::destroyed, at, "t", "forgotten");
    tx.commit();
  }
  counts = ledger.read().closed_counts;
  EXPECT_EQ(counts["failed"], 0u);
  EXPECT_EQ(counts["destroyed"], 2u);
  const auto report = ledger.store().verify();
  EXPECT_TRUE(report.problems.empty());
  EXPECT_EQ(report.records, 2u);
  const auto newest = ledger.find(id);
  ASSERT_TRUE(newest);
  EXPECT_EQ(newest->state, State::destroyed);
}

TEST(LedgerStore, PruningASupersededCopyLeavesTheCountsAlone) {
  TempDir dir;
  Ledger ledger(dir / "state", 1s);
  const auto x = add_closed(ledger, "x", 0, State::failed);
  add_closed(ledger, "y", 0);
  {
    auto tx = ledger.begin(); // x reopened and destroyed days later: its newest copy is younger
    SandboxRecord* r = tx.find(x);
    ASSERT_TRUE(r);
    r->transition(EventKind::destroying, State::destroying, day(5), "t", "destroy requested");
    r->transition(EventKind::destroyed, State::destroyed, day(5), "t", "destroyed");
    tx.commit();
  }
  add_closed(ledger, "z", 5, State::failed);
  auto counts = ledger.read().closed_counts;
  EXPECT_EQ(counts["failed"], 1u);
  EXPECT_EQ(counts["destroyed"], 2u);
  const auto pruned = ledger.store().prune(day(3), false);
  EXPECT_EQ(pruned.records.size(), 2u) << "x's failed copy and y";
  counts = ledger.read().closed_counts;
  EXPECT_EQ(counts["failed"], 1u) << "z is still failed; x's pruned copy was superseded";
  EXPECT_EQ(counts["destroyed"], 1u) << "x's newer copy survives; y went";
}

TEST(LedgerStore, PruneDropsWholeSegmentsOnly) {
  TempDir dir;
  Ledger ledger(dir / "state", 1s);
  const auto old1 = add_closed(ledger, "a", 0);
  const auto old2 = add_closed(ledger, "b", 0);
  const auto young = add_closed(ledger, "c", 5);
  const auto dry = ledger.store().prune(day(3), true);
  EXPECT_EQ(dry.records.size(), 2u);
  EXPECT_EQ(all_closed(ledger).size(), 3u) << "a dry run removes nothing";
  const auto pruned = ledger.store().prune(day(3), false);
  ASSERT_EQ(pruned.records.size(), 2u);
  EXPECT_EQ(pruned.units, 1u);
  EXPECT_EQ(pruned.records[0].id, old1);
  EXPECT_EQ(pruned.records[1].id, old2);
  EXPECT_EQ(segments(dir / "state"), std::vector<std::string>{"segment-000002.jsonl"});
  EXPECT_FALSE(ledger.find(old1));
  EXPECT_TRUE(ledger.find(young));
  EXPECT_EQ(ledger.read().closed_counts.at("destroyed"), 1u);
  // Everything, the current segment too: the next close starts a new one.
  EXPECT_EQ(ledger.store().prune(day(9), false).records.size(), 1u);
  EXPECT_TRUE(segments(dir / "state").empty());
  add_closed(ledger, "d", 9);
  EXPECT_EQ(segments(dir / "state"), std::vector<std::string>{"segment-000003.jsonl"});
  EXPECT_EQ(all_closed(ledger).size(), 1u);
  EXPECT_TRUE(ledger.store().verify().problems.empty());
}

// The latest closing a prune removed is kept in the live document, for reports over older times.
TEST(LedgerStore, PruneRecordsTheLatestClosingItRemoved) {
  TempDir dir;
  Ledger ledger(dir / "state", 1s);
  add_closed(ledger, "a", 0);
  add_closed(ledger, "b", 1);
  add_closed(ledger, "c", 5);
  EXPECT_FALSE(ledger.read().pruned_before) << "nothing pruned yet";
  ledger.store().prune(day(0, 6), false);
  EXPECT_FALSE(ledger.read().pruned_before) << "nothing was old enough";
  ASSERT_EQ(ledger.store().prune(day(3), false).records.size(), 2u);
  EXPECT_EQ(ledger.read().pruned_before, day(1));
  add_closed(ledger, "d", 6);
  EXPECT_EQ(ledger.read().pruned_before, day(1)) << "a commit keeps it";
  ledger.store().prune(day(5, 13), false);
  EXPECT_EQ(ledger.read().pruned_before, day(5));
  EXPECT_EQ(json::parse(read_file(dir / "state" / "ledger.json"))["pruned_before"],
            "2026-11-06T12:00:00Z");
}

// The journal's chain survives retention: a head kept before a prune is either still checkable
// or said to be older than what was kept, never taken for a forgery; the chain goes on from where
// it was when every segment went.
TEST(LedgerStore, TheJournalChainOutlivesRetention) {
  TempDir dir;
  Ledger ledger(dir / "state", 1s);
  add_closed(ledger, "a", 0);
  const ChainHead first = ledger.store().head().head;
  add_closed(ledger, "b", 0);
  add_closed(ledger, "c", 5);
  const LedgerHead before = ledger.store().head();
  EXPECT_EQ(before.head.lines, 3u);
  EXPECT_EQ(before.retained_from, 0u);
  EXPECT_TRUE(ledger.store().verify(first).problems.empty());
  ASSERT_EQ(ledger.store().prune(day(3), false).units, 1u);
  EXPECT_EQ(ledger.store().head().retained_from, 2u);
  EXPECT_TRUE(ledger.store().verify(before.head).problems.empty());
  auto report = ledger.store().verify(first);
  ASSERT_EQ(report.problems.size(), 1u);
  EXPECT_NE(report.problems[0].what.find("before the retained journal"), std::string::npos);
  ledger.store().prune(day(9), false);
  EXPECT_TRUE(segments(dir / "state").empty());
  EXPECT_EQ(ledger.store().head().head.text(), before.head.text()) << "nothing closed since";
  add_closed(ledger, "d", 9);
  EXPECT_EQ(ledger.store().head().head.lines, 4u);
  EXPECT_TRUE(ledger.store().verify(before.head).problems.empty());
  EXPECT_FALSE(ledger.store().verify(first).problems.empty());
}

TEST(LedgerStore, AHeadIsReadOnlyInItsOwnForm) {
  EXPECT_FALSE(parse_chain_head("sha256:" + std::string(64, 'a')));
  EXPECT_FALSE(parse_chain_head("x:sha256:" + std::string(64, 'a')));
  EXPECT_FALSE(parse_chain_head("1:sha256:" + std::string(63, 'a')));
  EXPECT_FALSE(parse_chain_head("1:sha256:" + std::string(64, 'A')));
  EXPECT_FALSE(parse_chain_head("99999999999999999999:sha256:" + std::string(64, 'a')));
  const auto head = parse_chain_head("12:sha256:" + std::string(64, 'a'));
  ASSERT_TRUE(head);
  EXPECT_EQ(head->lines, 12u);
  EXPECT_EQ(head->text(), "12:sha256:" + std::string(64, 'a'));
}

TEST(LedgerStore, VerifyFindsAnAlteredEntryAndTheRecordCarriesOn) {
  TempDir dir;
  Ledger ledger(dir / "state", 1s);
  std::string id;
  {
    auto tx = ledger.begin();
    tx.data().sandboxes.push_back(record("live", State::running, day(0)));
    id = tx.data().sandboxes.back().id;
    tx.commit();
  }
  auto doc = json::parse(read_file(dir / "state" / "ledger.json"));
  doc["sandboxes"][0]["history"][0]["actor"] = "mallory";
  write_file(dir / "state" / "ledger.json", doc.dump() + "\n");
  auto report = ledger.store().verify();
  ASSERT_EQ(report.problems.size(), 1u);
  EXPECT_EQ(report.problems[0].sandbox, id);
  EXPECT_EQ(report.problems[0].index, 1);
  // A later commit links to the head on record: the edit stays visible.
  {
    auto tx = ledger.begin();
    tx.find(id)->transition(EventKind::extended, State::running, day(0), "t", "extended");
    tx.commit();
  }
  report = ledger.store().verify();
  ASSERT_EQ(report.problems.size(), 1u);
  EXPECT_EQ(report.problems[0].index, 1);
}

// ---------------------------------------------------------------------------------------------
// Migration from schema 1

// A schema-1 ledger as the previous version wrote it: `live` running records and `closed`
// destroyed ones spread over `days` days, histories without event kinds or chains.
std::string schema1_ledger(int live, int closed, int days) {
  json sandboxes = json::array();
  auto add = [&](int i, bool is_closed) {
    SandboxRecord r = record("r" + std::to_string(i), is_closed ? State::destroyed : State::running,
                             day(i % days));
    r.history.front().details = {{"ttl", "1h"}, {"ttl_max", "4h"}, {"snapshots_keep", 2}};
    json j = r;
    j.erase("policy");
    j.erase("chain_head");
    for (auto& entry : j["history"]) {
      entry.erase("prev");
      entry.erase("event");
      entry.erase("event_id");
    }
    sandboxes.push_back(j);
  };
  for (int i = 0; i < live + closed; ++i) {
    add(i, i >= live);
  }
  return json{{"schema_version", 1}, {"ledger_id", "ldg-migration0001"}, {"sandboxes", sandboxes}}
             .dump() +
         "\n";
}

TEST(LedgerMigration, FirstWriteMigratesAndKeepsTheOldFile) {
  TempDir dir;
  const std::string v1 = schema1_ledger(3, 20, 4);
  write_file(dir / "state" / "ledger.json", v1);
  Ledger ledger(dir / "state", 1s);
  EXPECT_EQ(ledger.read().sandboxes.size(), 3u) << "reading schema 1 works and writes nothing";
  EXPECT_EQ(read_file(dir / "state" / "ledger.json"), v1);
  EXPECT_EQ(ledger.read().sandboxes[0].policy.ttl, std::chrono::hours(1));
  EXPECT_EQ(ledger.read().sandboxes[0].policy.snapshots_keep, 2u);
  EXPECT_FALSE(ledger.store().verify().problems.empty()) << "schema 1 has no chains yet";

  ledger.begin().commit();
  EXPECT_EQ(read_file(dir / "state" / "ledger.v1.json"), v1);
  EXPECT_EQ(json::parse(read_file(dir / "state" / "ledger.json"))["schema_version"],
            LedgerData::k_schema_version);
  EXPECT_EQ(segments(dir / "state").size(), 4u) << "one segment per day of closing";
  const auto closed = all_closed(ledger);
  EXPECT_EQ(closed.size(), 20u);
  EXPECT_EQ(closed[0].history[2].event, EventKind::destroyed);
  EXPECT_EQ(closed[0].history[0].details["ttl"], "1h") << "history is evidence: kept as it was";
  EXPECT_EQ(ledger.read().closed_counts.at("destroyed"), 20u);
  const auto report = ledger.store().verify();
  EXPECT_TRUE(report.problems.empty()) << report.problems.at(0).what;
  EXPECT_EQ(report.records, 23u);
  EXPECT_FALSE(fs::exists(dir / "state" / "journal.migrating"));
}

// SIGKILL at random instants of a migration: ledger.json is the untouched schema-1 file or a
// complete schema-2 ledger, never anything between, and the next write finishes the job.
TEST(LedgerCrash, KilledMigrationLeavesTheOldOrTheNewLedger) {
  TempDir dir;
  const std::string v1 = schema1_ledger(50, 1500, 12);
  const auto state = dir / "state";
  auto reset = [&] {
    fs::remove_all(state);
    write_file(state / "ledger.json", v1);
  };
  reset();
  const auto start = std::chrono::steady_clock::now();
  Ledger(state, 5s).begin().commit();
  const auto took = std::chrono::duration_cast<std::chrono::microseconds>(
                        std::chrono::steady_clock::now() - start)
                        .count();
  const unsigned seed = std::random_device()();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 random(seed);
  std::uniform_int_distribution<long> delay_us(0, took + 1000);
  int old_seen = 0, new_seen = 0;
  for (int round = 0; round < 16; ++round) {
    reset();
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      try {
        Ledger(state, 5s).begin().commit();
      } catch (...) {
      }
      ::_exit(0);
    }
    std::this_thread::sleep_for(std::chrono::microseconds(delay_us(random)));
    ::kill(child, SIGKILL);
    ASSERT_EQ(::waitpid(child, nullptr, 0), child);
    Ledger ledger(state, 5s);
    if (read_file(state / "ledger.json") == v1) {
      ++old_seen;
      EXPECT_EQ(ledger.read().sandboxes.size(), 50u);
    } else {
      ++new_seen;
      const auto report = ledger.store().verify();
      EXPECT_TRUE(report.problems.empty()) << report.problems.at(0).what;
      EXPECT_EQ(report.records, 1550u);
    }
    ledger.begin().commit(); // finishes (or redoes) the migration
    EXPECT_EQ(all_closed(ledger).size(), 1500u) << "round " << round;
    EXPECT_TRUE(ledger.store().verify().problems.empty());
    EXPECT_EQ(read_file(state / "ledger.v1.json"), v1);
  }
  EXPECT_GT(old_seen + new_seen, 0);
}

// ---------------------------------------------------------------------------------------------
// Migration from schema 2

// The version this sandboxer writes, as it appears at the start of its files.
const std::string k_now = std::to_string(LedgerData::k_schema_version);
const std::string k_document_prefix = "{\"schema_version\":" + k_now + ",";
const std::string k_segment_prefix = "{\"sandboxer_journal\":" + k_now + ",";

// Turns a ledger this version wrote into what schema 2 wrote: the two differ only in the version
// numbers of the live document and of each segment's header (same width: no offset moves), as
// long as no record uses what schema 3 added. Returns the segments' bytes.
std::map<std::string, std::string> downgrade_to_v2(const fs::path& state) {
  auto replace_prefix = [](const fs::path& file, const std::string& from, const std::string& to) {
    std::string text = read_file(file);
    EXPECT_TRUE(text.starts_with(from)) << file << ": " << text.substr(0, 40);
    text.replace(0, from.size(), to);
    write_file(file, text);
    ::chmod(file.c_str(), 0600);
  };
  replace_prefix(state / "ledger.json", k_document_prefix, R"({"schema_version":2,)");
  std::map<std::string, std::string> bytes;
  for (const auto& name : segments(state)) {
    replace_prefix(state / "journal" / name, k_segment_prefix, R"({"sandboxer_journal":2,)");
    bytes[name] = read_file(state / "journal" / name);
  }
  fs::remove(state / "ledger.json.bak");
  return bytes;
}

// A schema-2 ledger with `live` running records and closed ones in three segments (days 0-2).
std::map<std::string, std::string> schema2_ledger(const fs::path& state, int live) {
  Ledger ledger(state, 5s);
  for (int n = 0; n < 3; ++n) {
    add_closed(ledger, "closed-" + std::to_string(n) + "a", n);
    add_closed(ledger, "closed-" + std::to_string(n) + "b", n, State::failed);
  }
  auto tx = ledger.begin();
  for (int i = 0; i < live; ++i) {
    tx.data().sandboxes.push_back(record("live-" + std::to_string(i), State::running, day(2)));
  }
  tx.commit();
  return downgrade_to_v2(state);
}

std::map<std::string, std::string> segment_bytes(const fs::path& state) {
  std::map<std::string, std::string> bytes;
  for (const auto& name : segments(state)) {
    bytes[name] = read_file(state / "journal" / name);
  }
  return bytes;
}

TEST(LedgerMigration, Schema2IsReadAsItIsAndVerifies) {
  TempDir dir;
  const auto state = dir / "state";
  const auto v2_segments = schema2_ledger(state, 2);
  ASSERT_EQ(v2_segments.size(), 3u);
  const std::string v2 = read_file(state / "ledger.json");
  Ledger ledger(state, 1s);
  EXPECT_EQ(ledger.read().sandboxes.size(), 2u);
  EXPECT_EQ(all_closed(ledger).size(), 6u) << "the schema-2 segments are read";
  EXPECT_TRUE(ledger.find("closed-0a"));
  const auto report = ledger.store().verify();
  EXPECT_TRUE(report.problems.empty()) << report.problems.at(0).what;
  EXPECT_EQ(report.records, 8u);
  EXPECT_EQ(ledger.store().head().retained_from, 0u) << "the oldest segment's header is read";
  EXPECT_EQ(read_file(state / "ledger.json"), v2) << "reading never writes";
  EXPECT_EQ(segment_bytes(state), v2_segments);
  EXPECT_FALSE(fs::exists(state / "ledger.v2.json"));
}

// The trap of a version bump: a schema-2 ledger is not a schema-1 one, and its journal is kept
// byte for byte (docs/ledger-format.md, "Migration from schema 2").
TEST(LedgerMigration, FirstWriteMigratesSchema2KeepingTheJournal) {
  TempDir dir;
  const auto state = dir / "state";
  const auto v2_segments = schema2_ledger(state, 2);
  const std::string v2 = read_file(state / "ledger.json");
  Ledger ledger(state, 1s);
  const LedgerHead head = ledger.store().head();
  const auto counts = ledger.read().closed_counts;

  ledger.begin().commit();
  const json document = json::parse(read_file(state / "ledger.json"));
  EXPECT_EQ(document["schema_version"], LedgerData::k_schema_version);
  EXPECT_EQ(read_file(state / "ledger.v2.json"), v2);
  EXPECT_EQ(segment_bytes(state), v2_segments) << "the journal is kept byte for byte";
  EXPECT_EQ(document["journal"], json::parse(v2)["journal"]);
  EXPECT_EQ(document["sandboxes"], json::parse(v2)["sandboxes"]) << "no record changes";
  EXPECT_EQ(ledger.read().closed_counts, counts);
  EXPECT_EQ(all_closed(ledger).size(), 6u);
  auto report = ledger.store().verify();
  EXPECT_TRUE(report.problems.empty()) << report.problems.at(0).what;
  const LedgerHead after = ledger.store().head();
  EXPECT_EQ(after.ledger_id, head.ledger_id);
  EXPECT_EQ(after.head.text(), head.head.text());
  EXPECT_EQ(after.retained_from, head.retained_from);

  // The next closing, on the day of the schema-2 tail segment, opens a schema-3 segment rather
  // than mixing schemas in one.
  add_closed(ledger, "after", 2);
  auto now = segment_bytes(state);
  ASSERT_EQ(now.size(), 4u);
  for (const auto& [name, bytes] : v2_segments) {
    EXPECT_EQ(now.at(name), bytes) << name;
  }
  EXPECT_TRUE(now.at("segment-000004.jsonl").starts_with(k_segment_prefix));
  report = ledger.store().verify(head.head);
  EXPECT_TRUE(report.problems.empty()) << report.problems.at(0).what;
  EXPECT_EQ(report.records, 9u);
  EXPECT_EQ(ledger.store().head().head.lines, head.head.lines + 1);
  EXPECT_TRUE(ledger.find("after"));
  EXPECT_EQ(ledger.store().migrate(), "ledger " + (state / "ledger.json").string() +
                                          " is already at schema_version " + k_now);

  // Retention drops schema-2 segments like any other.
  EXPECT_EQ(ledger.store().prune(day(1, 13), false).units, 2u);
  EXPECT_TRUE(ledger.store().verify().problems.empty());
}

TEST(LedgerMigration, LedgerMigrateTakesSchema2ToSchema3) {
  TempDir dir;
  const auto state = dir / "state";
  const auto v2_segments = schema2_ledger(state, 1);
  Ledger ledger(state, 1s);
  const std::string said = ledger.store().migrate();
  EXPECT_NE(said.find("migrated from schema_version 2 to " + k_now), std::string::npos) << said;
  EXPECT_NE(said.find("3 segment(s)"), std::string::npos) << said;
  EXPECT_NE(said.find("ledger.v2.json"), std::string::npos) << said;
  EXPECT_EQ(json::parse(read_file(state / "ledger.json"))["schema_version"],
            LedgerData::k_schema_version);
  EXPECT_EQ(segment_bytes(state), v2_segments);
  EXPECT_TRUE(ledger.store().verify().problems.empty());
}

// Schema 1 goes straight to the current schema, its segments begun at it.
TEST(LedgerMigration, Schema1GoesStraightToTheCurrentSchema) {
  TempDir dir;
  write_file(dir / "state" / "ledger.json", schema1_ledger(1, 4, 2));
  Ledger ledger(dir / "state", 1s);
  ledger.begin().commit();
  EXPECT_EQ(json::parse(read_file(dir / "state" / "ledger.json"))["schema_version"],
            LedgerData::k_schema_version);
  for (const auto& [name, bytes] : segment_bytes(dir / "state")) {
    EXPECT_TRUE(bytes.starts_with(k_segment_prefix)) << name;
  }
  EXPECT_FALSE(fs::exists(dir / "state" / "ledger.v2.json"));
}

// A segment of a newer schema is named and skipped, never taken for damage.
TEST(LedgerMigration, ANewerSegmentIsNotRead) {
  TempDir dir;
  const auto state = dir / "state";
  Ledger ledger(state, 1s);
  add_closed(ledger, "a", 0);
  std::string text = read_file(state / "journal" / "segment-000001.jsonl");
  text.replace(0, 23, R"({"sandboxer_journal":9,)");
  write_file(state / "journal" / "segment-000001.jsonl", text);
  const auto report = ledger.store().verify();
  bool named = false;
  for (const auto& problem : report.problems) {
    named = named || problem.what.find("has schema version 9, newer than this sandboxer "
                                       "understands (" +
                                       k_now + "); its records are not read: upgrade sandboxer") !=
                         std::string::npos;
  }
  EXPECT_TRUE(named) << (report.problems.empty() ? "no problem" : report.problems[0].what);
}

// SIGKILL at random instants of a 2 -> 3 migration: ledger.json is the schema-2 file or the
// schema-3 one, the journal is untouched either way, and the next write finishes the job.
TEST(LedgerCrash, KilledSchema2MigrationLeavesTheOldOrTheNewLedger) {
  TempDir dir;
  const auto pristine = dir / "pristine";
  const auto v2_segments = schema2_ledger(pristine, 3000);
  const std::string v2 = read_file(pristine / "ledger.json");
  const auto state = dir / "state";
  auto reset = [&] {
    fs::remove_all(state);
    fs::copy(pristine, state, fs::copy_options::recursive);
  };
  reset();
  const auto start = std::chrono::steady_clock::now();
  Ledger(state, 5s).begin().commit();
  const auto took = std::chrono::duration_cast<std::chrono::microseconds>(
                        std::chrono::steady_clock::now() - start)
                        .count();
  const unsigned seed = std::random_device()();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 random(seed);
  std::uniform_int_distribution<long> delay_us(0, took + 1000);
  int old_seen = 0, new_seen = 0;
  for (int round = 0; round < 16; ++round) {
    reset();
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      try {
        Ledger(state, 5s).begin().commit();
      } catch (...) {
      }
      ::_exit(0);
    }
    std::this_thread::sleep_for(std::chrono::microseconds(delay_us(random)));
    ::kill(child, SIGKILL);
    ASSERT_EQ(::waitpid(child, nullptr, 0), child);
    Ledger ledger(state, 5s);
    const std::string now = read_file(state / "ledger.json");
    if (now == v2) {
      ++old_seen;
    } else {
      ++new_seen;
      EXPECT_EQ(json::parse(now)["schema_version"], LedgerData::k_schema_version)
          << "round " << round;
      EXPECT_EQ(read_file(state / "ledger.v2.json"), v2) << "round " << round;
    }
    EXPECT_EQ(segment_bytes(state), v2_segments) << "round " << round;
    auto report = ledger.store().verify();
    EXPECT_TRUE(report.problems.empty()) << report.problems.at(0).what;
    EXPECT_EQ(report.records, 3006u);
    ledger.begin().commit(); // finishes (or redoes) the migration
    EXPECT_EQ(json::parse(read_file(state / "ledger.json"))["schema_version"],
              LedgerData::k_schema_version);
    EXPECT_EQ(read_file(state / "ledger.v2.json"), v2);
    EXPECT_EQ(segment_bytes(state), v2_segments);
    EXPECT_EQ(all_closed(ledger).size(), 6u) << "round " << round;
    EXPECT_TRUE(ledger.store().verify().problems.empty());
  }
  EXPECT_GT(old_seen + new_seen, 0);
}

// SIGKILL at random instants of a writer that closes a record in every commit, on a new day every
// other commit (so that it rotates segments too): the ledger always reads, verifies, and holds
// every record it committed, exactly once.
TEST(LedgerCrash, KilledAppendOrRotationLosesNothingCommitted) {
  TempDir dir;
  const auto state = dir / "state";
  Ledger ledger(state, 5s);
  {
    auto tx = ledger.begin();
    auto counter = record("counter", State::running, day(0));
    counter.env["closed"] = "0";
    tx.data().sandboxes.push_back(counter);
    tx.commit();
  }
  // One iteration of the writer below, timed here: a commit that appends to the journal.
  const auto start = std::chrono::steady_clock::now();
  add_closed(ledger, "warm-up", 0);
  const auto iteration = std::chrono::duration_cast<std::chrono::microseconds>(
      std::chrono::steady_clock::now() - start);
  const unsigned seed = std::random_device()();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 random(seed);
  std::uniform_int_distribution<long> delay_us(2 * iteration.count(),
                                               20 * iteration.count() + 5000);
  int last = 0;
  for (int round = 0; round < 20; ++round) {
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      try {
        Ledger writer(state, 5s);
        while (true) {
          auto tx = writer.begin();
          auto& counter = tx.data().sandboxes.at(0);
          const int n = std::stoi(counter.env.at("closed")) + 1;
          counter.env["closed"] = std::to_string(n);
          tx.data().sandboxes.push_back(
              record("closed-" + std::to_string(n), State::destroyed, day(n / 2)));
          tx.commit();
        }
      } catch (...) {
      }
      ::_exit(3);
    }
    std::this_thread::sleep_for(std::chrono::microseconds(delay_us(random)));
    ::kill(child, SIGKILL);
    ASSERT_EQ(::waitpid(child, nullptr, 0), child);

    const LedgerData data = ledger.read();
    const int n = std::stoi(data.sandboxes.at(0).env.at("closed"));
    EXPECT_GE(n, last);
    last = n;
    const auto closed = all_closed(ledger);
    ASSERT_EQ(closed.size(), static_cast<size_t>(n) + 1) << "round " << round; // + warm-up
    std::set<std::string> names;
    for (const auto& r : closed) {
      names.insert(r.name);
    }
    EXPECT_EQ(names.size(), closed.size()) << "a record appears twice";
    EXPECT_EQ(data.closed_counts.at("destroyed"), static_cast<std::uint64_t>(n) + 1);
    const auto report = ledger.store().verify();
    EXPECT_TRUE(report.problems.empty())
        << report.problems.at(0).where << ": " << report.problems.at(0).what;
  }
  EXPECT_GT(last, 2) << "the writer hardly committed: the test proved little";
  EXPECT_GT(segments(state).size(), 1u) << "no rotation happened";
}

} // namespace
} // namespace sandboxer
