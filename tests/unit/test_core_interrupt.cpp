// Interrupted work (interrupt.hpp): waits stop, cleanup under a Shield runs on, subprocesses are
// stopped or get the signal forwarded, and an interrupted create leaves nothing on the backend.
#include <csignal>
#include <gtest/gtest.h>
#include <thread>

#include <sandboxer/interrupt.hpp>
#include <sandboxer/proc.hpp>

#include "core/lifecycle/lifecycle.hpp"
#include "sdk/testing.hpp"
#include "support/catalog.hpp"
#include "support/fake_clock.hpp"
#include "support/recording_hook.hpp"
#include "support/temp_dir.hpp"

namespace sandboxer {
namespace {

using namespace std::chrono_literals;

// Every test starts and ends with no signal on record: the flag is process-wide.
class Interrupt : public ::testing::Test {
protected:
  Interrupt() { interrupt::reset_for_tests(); }
  ~Interrupt() override {
    if (m_later.joinable()) {
      m_later.join();
    }
    interrupt::reset_for_tests();
  }
  // Acts as if `signal` arrived `after` from now, from another thread (as a real one would).
  void signal_later(int signal, std::chrono::milliseconds after) {
    m_later = std::thread([=] {
      std::this_thread::sleep_for(after);
      interrupt::simulate(signal);
    });
  }

private:
  std::thread m_later;
};

TEST_F(Interrupt, SleepStopsAtTheSignal) {
  signal_later(SIGTERM, 100ms);
  const auto started = std::chrono::steady_clock::now();
  try {
    interrupt::sleep_for(30s);
    FAIL() << "the sleep went on";
  } catch (const Interrupted& e) {
    EXPECT_EQ(e.signal(), SIGTERM);
    EXPECT_EQ(static_cast<int>(e.code()), 143);
    EXPECT_STREQ(e.what(), "interrupted by SIGTERM");
  }
  EXPECT_LT(std::chrono::steady_clock::now() - started, 10s);
}

TEST_F(Interrupt, AShieldLetsCleanupRunToItsEnd) {
  interrupt::simulate(SIGINT);
  EXPECT_THROW(interrupt::check(), Interrupted);
  {
    interrupt::Shield cleanup;
    EXPECT_FALSE(interrupt::requested());
    EXPECT_NO_THROW(interrupt::sleep_for(10ms));
  }
  EXPECT_TRUE(interrupt::requested());
}

TEST_F(Interrupt, ASubprocessIsStoppedAndTheRunThrows) {
  proc::Command command;
  command.argv = {"sleep", "30"};
  signal_later(SIGINT, 200ms);
  const auto started = std::chrono::steady_clock::now();
  EXPECT_THROW(proc::run(command), Interrupted);
  EXPECT_LT(std::chrono::steady_clock::now() - started, 10s);
}

TEST_F(Interrupt, AUserCommandGetsTheSignalAndEndsItsOwnWay) {
  proc::Command command;
  command.argv = {"sh", "-c", "trap 'exit 7' INT; echo ready; while :; do sleep 0.05; done"};
  command.on_interrupt = proc::Command::OnInterrupt::forward;
  signal_later(SIGINT, 300ms);
  auto result = proc::run(command);
  EXPECT_EQ(result.status(), 7);
  EXPECT_EQ(result.interrupted_by, SIGINT);
}

class InterruptedCreate : public Interrupt {
protected:
  InterruptedCreate()
      : clock(*parse_time("2026-12-02T12:00:00Z")), ledger(dir / "state", Seconds(5)),
        engine(ledger, testing::builtin_catalog(), clock, hook, "tester") {}
  testing::TempDir dir;
  testing::FakeClock clock;
  Ledger ledger;
  testing::RecordingHook hook;
  Engine engine;
};

TEST_F(InterruptedCreate, RemovesWhatTheBackendMadeAndRecordsWhy) {
  testing::write_file(dir / "p.yaml", "driver: stub\nstub: { latency: { ready: 30s } }\n");
  Profile profile = load_profile(dir / "p.yaml", {});
  signal_later(SIGINT, 300ms);
  EXPECT_THROW(engine.create(profile, {}), Interrupted);
  ASSERT_TRUE(engine.failed_record().has_value());
  SandboxRecord r = engine.get(engine.failed_record()->id);
  EXPECT_EQ(r.state, State::failed);
  EXPECT_EQ(r.history.back().details.value("interrupted", ""), "SIGINT");
  EXPECT_NE(r.error->find("removed the 1 backend resource"), std::string::npos) << *r.error;
  EXPECT_FALSE(std::filesystem::exists(dir / "state" / "drivers" / "stub" / "sandboxes" / r.id));
}

} // namespace
} // namespace sandboxer
