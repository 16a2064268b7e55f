// Warm pools through the engine on the stub (docs/pools.md): a fill never overfills, also with
// fillers side by side; a member is claimed once with many creates at once; the census that fill,
// `pool status` and `reap --dry-run` share; the driver is told which sandboxes are members.
#include <gtest/gtest.h>
#include <set>
#include <thread>

#include "core/lifecycle/lifecycle.hpp"
#include "core/lifecycle/rules.hpp"
#include "support/catalog.hpp"
#include "support/fake_clock.hpp"
#include "support/recording_hook.hpp"
#include "support/temp_dir.hpp"

namespace sandboxer {
namespace {

using namespace std::chrono_literals;
using lifecycle_rules::pool_census;

class Pool : public ::testing::Test {
protected:
  Pool()
      : clock(*parse_time("2026-12-02T12:00:00Z")), ledger(dir / "state", Seconds(5)),
        engine(ledger, testing::builtin_catalog(), clock, hook, "tester") {}

  Profile profile(const std::string& stub_section = "{ latency: {} }", int size = 3) {
    testing::write_file(dir / "warm.yaml",
                        "driver: stub\nttl: { default: 30m }\nlabels: { team: core }\n"
                        "pool: { size: " +
                            std::to_string(size) + ", max_age: 1h }\nstub: " + stub_section + "\n");
    return load_profile(dir / "warm.yaml", {});
  }
  std::vector<SandboxRecord> members() {
    std::vector<SandboxRecord> found;
    for (const auto& record : ledger.read().sandboxes) {
      if (record.state == State::pooled) {
        found.push_back(record);
      }
    }
    return found;
  }

  testing::TempDir dir;
  testing::FakeClock clock;
  Ledger ledger;
  testing::RecordingHook hook;
  Engine engine;
};

TEST_F(Pool, FillMakesTheMissingMembersOnly) {
  const Profile warm = profile();
  PoolFill first = engine.fill_pool(warm, 2);
  EXPECT_EQ(first.missing, 3);
  EXPECT_EQ(first.made, 3);
  EXPECT_TRUE(first.errors.empty());
  PoolFill second = engine.fill_pool(warm, 2);
  EXPECT_EQ(second.ready, 3);
  EXPECT_EQ(second.made, 0);
  EXPECT_EQ(members().size(), 3u);
}

TEST_F(Pool, FillersSideBySideNeverOverfill) {
  const Profile warm = profile("{ latency: { create: 20ms } }", 4);
  std::vector<std::thread> fillers;
  std::vector<PoolFill> fills(4);
  for (size_t i = 0; i < fills.size(); ++i) {
    fillers.emplace_back([&, i] { fills[i] = engine.fill_pool(warm, 3); });
  }
  for (auto& filler : fillers) {
    filler.join();
  }
  int made = 0;
  for (const auto& fill : fills) {
    made += fill.made;
    EXPECT_TRUE(fill.errors.empty());
  }
  EXPECT_EQ(made, 4);
  EXPECT_EQ(members().size(), 4u);
}

TEST_F(Pool, EachMemberIsClaimedOnceByManyCreatesAtOnce) {
  const Profile warm = profile();
  engine.fill_pool(warm);
  std::set<std::string> pooled;
  for (const auto& member : members()) {
    pooled.insert(member.id);
  }
  std::vector<std::thread> creates;
  std::vector<CreateOutcome> outcomes(12);
  for (size_t i = 0; i < outcomes.size(); ++i) {
    creates.emplace_back([&, i] { outcomes[i] = engine.create(warm, {}); });
  }
  for (auto& create : creates) {
    create.join();
  }
  std::set<std::string> ids, claimed;
  for (const auto& outcome : outcomes) {
    ids.insert(outcome.record.id);
    EXPECT_EQ(outcome.record.state, State::running);
    if (outcome.record.pool) {
      EXPECT_TRUE(outcome.record.pool->claimed_at.has_value());
      claimed.insert(outcome.record.id);
    }
  }
  EXPECT_EQ(ids.size(), outcomes.size()) << "a sandbox handed out twice";
  EXPECT_EQ(claimed, pooled);
  EXPECT_TRUE(members().empty());
}

TEST_F(Pool, NoPoolCreatesCold) {
  const Profile warm = profile();
  engine.fill_pool(warm);
  CreateOptions options;
  options.no_pool = true;
  CreateOutcome cold = engine.create(warm, options);
  EXPECT_FALSE(cold.record.pool.has_value());
  EXPECT_EQ(members().size(), 3u);
}

TEST_F(Pool, CensusCountsReadyFillingStaleAndExpired) {
  const Profile warm = profile();
  engine.fill_pool(warm);
  const SandboxRecord wanted = engine.record_from(warm);
  const std::string key = lifecycle_rules::pool_key_of(wanted);
  const std::string spec = lifecycle_rules::pool_spec_hash(wanted);
  auto records = ledger.read().sandboxes;
  auto census = pool_census(records, key, spec, clock.now());
  EXPECT_EQ(census.ready, 3);
  EXPECT_EQ(census.filling, 0);
  EXPECT_TRUE(census.stale.empty());
  EXPECT_EQ(census.oldest, clock.now());

  // Another spec: all three stale. Past max_age: expired, not ready.
  EXPECT_EQ(pool_census(records, key, "sha256:other", clock.now()).stale.size(), 3u);
  auto later = pool_census(records, key, spec, clock.now() + 61min);
  EXPECT_EQ(later.ready, 0);
  EXPECT_EQ(later.expired, 3);
  // Another pool's records are not counted; a claimed member leaves the census.
  EXPECT_EQ(pool_census(records, "other", spec, clock.now()).ready, 0);
  engine.create(warm, {});
  EXPECT_EQ(pool_census(ledger.read().sandboxes, key, spec, clock.now()).ready, 2);
}

TEST_F(Pool, PlanFillChangesNothing) {
  const Profile warm = profile();
  PoolFill plan = engine.plan_fill(warm);
  EXPECT_EQ(plan.missing, 3);
  EXPECT_EQ(plan.made, 0);
  EXPECT_TRUE(ledger.read().sandboxes.empty());
  engine.fill_pool(warm);
  EXPECT_EQ(engine.plan_fill(profile("{ latency: { create: 1ms } }")).recycled, 3);
}

TEST_F(Pool, TheDriverIsToldWhichSandboxesAreMembers) {
  const Profile warm = profile();
  SandboxRecord record = engine.record_from(warm);
  record.id = "sbx-aaaaaaaaaaaa";
  EXPECT_FALSE(lifecycle_rules::create_request(record, "ldg-x").pool_member);
  record.pool = PoolMembership{"warm", "sha256:x", std::nullopt, std::nullopt, ""};
  EXPECT_TRUE(lifecycle_rules::create_request(record, "ldg-x").pool_member);
  record.pool->claimed_at = clock.now();
  EXPECT_FALSE(lifecycle_rules::create_request(record, "ldg-x").pool_member);
}

} // namespace
} // namespace sandboxer
