#include <atomic>
#include <chrono>
#include <csignal>
#include <fcntl.h>
#include <fstream>
#include <functional>
#include <gtest/gtest.h>
#include <memory>
#include <string>
#include <sys/file.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

#include <sandboxer/error.hpp>
#include <sandboxer/lock_file.hpp>

#include "core/ledger/ledger.hpp"
#include "support/temp_dir.hpp"

namespace sandboxer {
namespace {

using namespace std::chrono_literals;
using testing::read_file;
using testing::TempDir;

std::string self_command() {
  std::ifstream in("/proc/self/comm");
  std::string line;
  std::getline(in, line);
  return line;
}

std::string host() {
  char buffer[256] = {};
  ::gethostname(buffer, sizeof(buffer) - 1);
  return buffer;
}

// How a live holder on this machine is named, and what the waiter is told to do.
std::string live(long pid, const std::string& waited) {
  return "locked by pid " + std::to_string(pid) + " (" + self_command() + ") on " + host() +
         ", which is still running; " + waited + "; wait for it to finish, or raise --lock-timeout";
}

// The message of the LockTimeoutError that `run` throws, and how long it took.
std::pair<std::string, std::chrono::milliseconds> timeout_of(const std::function<void()>& run) {
  const auto start = std::chrono::steady_clock::now();
  try {
    run();
  } catch (const LockTimeoutError& e) {
    EXPECT_EQ(e.code(), ExitCode::lock_timeout);
    return {e.what(), std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::steady_clock::now() - start)};
  }
  ADD_FAILURE() << "no LockTimeoutError was thrown";
  return {"", 0ms};
}

TEST(LockFile, HolderWritesPidAndCommand) {
  TempDir dir;
  LockFile lock(dir / "x.lock", 1s, "test lock");
  auto guard = lock.acquire();
  EXPECT_TRUE(guard.held());
  EXPECT_EQ(read_file(dir / "x.lock"),
            "pid " + std::to_string(::getpid()) + " " + self_command() + "\nhost " + host() + "\n");
}

TEST(LockFile, TimeoutNamesTheHolder) {
  TempDir dir;
  LockFile first(dir / "x.lock", 1s, "reaper lock " + (dir / "x.lock").string());
  auto guard = first.acquire();
  LockFile second(dir / "x.lock", 1s, "reaper lock " + (dir / "x.lock").string());
  const auto [message, took] = timeout_of([&] { second.acquire(); });
  EXPECT_EQ(message,
            "reaper lock " + (dir / "x.lock").string() + " is " + live(::getpid(), "waited 1s"));
  EXPECT_GE(took, 950ms);
  EXPECT_LT(took, 3s);
}

TEST(LockFile, ZeroTimeoutTriesOnce) {
  TempDir dir;
  LockFile lock(dir / "x.lock", 0s, "test lock");
  auto guard = lock.acquire();
  const auto [message, took] = timeout_of([&] { lock.acquire(); });
  EXPECT_NE(message.find("waited 0s"), std::string::npos) << message;
  EXPECT_LT(took, 500ms);
}

TEST(LockFile, ReleasedWhenTheGuardIsDestroyed) {
  TempDir dir;
  LockFile lock(dir / "x.lock", 0s, "test lock");
  {
    auto guard = lock.acquire();
    EXPECT_FALSE(lock.try_acquire().held());
  }
  auto again = lock.try_acquire();
  EXPECT_TRUE(again.held());
}

TEST(LockFile, GuardMoves) {
  TempDir dir;
  LockFile lock(dir / "x.lock", 0s, "test lock");
  LockFile::Guard outer;
  EXPECT_FALSE(outer.held());
  {
    auto inner = lock.acquire();
    outer = std::move(inner);
    EXPECT_FALSE(inner.held()); // NOLINT(bugprone-use-after-move): the point of the test
  }
  EXPECT_TRUE(outer.held());
  EXPECT_FALSE(lock.try_acquire().held());
  LockFile::Guard moved(std::move(outer));
  EXPECT_TRUE(moved.held());
  moved = LockFile::Guard();
  EXPECT_TRUE(lock.try_acquire().held());
}

TEST(LockFile, ExcludesOtherThreads) {
  TempDir dir;
  LockFile lock(dir / "x.lock", 0s, "test lock");
  std::atomic<bool> held{false};
  std::atomic<bool> release{false};
  std::thread holder([&] {
    auto guard = lock.acquire();
    held = true;
    while (!release) {
      std::this_thread::sleep_for(1ms);
    }
  });
  while (!held) {
    std::this_thread::sleep_for(1ms);
  }
  EXPECT_FALSE(lock.try_acquire().held());
  EXPECT_FALSE(timeout_of([&] { lock.acquire(); }).first.empty());
  release = true;
  holder.join();
  EXPECT_TRUE(lock.try_acquire().held());
}

TEST(LockFile, WaitsForAHolderThatFinishesInTime) {
  TempDir dir;
  LockFile lock(dir / "x.lock", 5s, "test lock");
  auto guard = std::make_unique<LockFile::Guard>(lock.acquire());
  std::thread releaser([&] {
    std::this_thread::sleep_for(200ms);
    guard.reset();
  });
  const auto start = std::chrono::steady_clock::now();
  auto mine = lock.acquire();
  EXPECT_TRUE(mine.held());
  EXPECT_GE(std::chrono::steady_clock::now() - start, 150ms);
  releaser.join();
}

TEST(LockFile, UnknownHolder) {
  TempDir dir;
  const auto path = dir / "x.lock";
  // A holder that has not written its pid yet (or is not a LockFile at all).
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::flock(fd, LOCK_EX), 0);
  LockFile lock(path, 0s, "test lock");
  EXPECT_EQ(timeout_of([&] { lock.acquire(); }).first,
            "test lock is locked by another process (its pid is not recorded in " + path.string() +
                " yet); waited 0s; retry, or raise --lock-timeout");
  ::close(fd);
}

// Locks `path` as another holder would, having written `line` (its holder line) into it.
int hold(const std::filesystem::path& path, const std::string& line) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  EXPECT_GE(fd, 0);
  EXPECT_EQ(::flock(fd, LOCK_EX), 0);
  EXPECT_EQ(::write(fd, line.data(), line.size()), static_cast<ssize_t>(line.size()));
  return fd;
}

// Issue 35: a holder whose pid no longer runs is said to be gone, with what still holds the file.
TEST(LockFile, GoneHolderIsSaidToBeGone) {
  TempDir dir;
  const auto path = dir / "x.lock";
  const pid_t gone = ::fork();
  ASSERT_GE(gone, 0);
  if (gone == 0) {
    ::_exit(0);
  }
  ASSERT_EQ(::waitpid(gone, nullptr, 0), gone);
  const int fd = hold(path, "pid " + std::to_string(gone) + " sandboxer\nhost " + host() + "\n");
  LockFile lock(path, 0s, "test lock");
  EXPECT_EQ(timeout_of([&] { lock.acquire(); }).first,
            "test lock is locked, but its holder pid " + std::to_string(gone) + " (sandboxer) on " +
                host() + " is gone: a process it started still has " + path.string() +
                " open ('fuser -v " + path.string() +
                "' names it); waited 0s; end that process, or raise --lock-timeout");
  ::close(fd);
}

// A holder on another machine (a state dir on a shared file system) cannot be checked from here.
TEST(LockFile, HolderOnAnotherMachineIsNotGuessedAt) {
  TempDir dir;
  const auto path = dir / "x.lock";
  const int fd = hold(path, "pid 4242 sandboxer\nhost elsewhere.example\n");
  LockFile lock(path, 0s, "test lock");
  EXPECT_EQ(timeout_of([&] { lock.acquire(); }).first,
            "test lock is locked by pid 4242 (sandboxer) on elsewhere.example, another machine "
            "(whether it still runs cannot be seen from here); waited 0s; retry, or raise "
            "--lock-timeout");
  ::close(fd);
}

TEST(LockFile, UnopenablePathIsAnError) {
  TempDir dir;
  LockFile lock(dir / "missing-dir" / "x.lock", 0s, "test lock");
  try {
    lock.acquire();
    ADD_FAILURE() << "no error";
  } catch (const LockTimeoutError&) {
    ADD_FAILURE() << "not a timeout";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "cannot open lock file " +
                                         (dir / "missing-dir" / "x.lock").string() +
                                         ": No such file or directory");
  }
}

// ---------------------------------------------------------------------------------------------
// The ledger's lock

TEST(LockLedger, ForkedHolderIsNamedAndItsDeathReleasesTheLock) {
  TempDir dir;
  const auto state = dir / "state";
  Ledger ledger(state, 1s);
  ledger.ensure_id();
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    try {
      auto transaction = Ledger(state, 5s).begin();
      [[maybe_unused]] auto written = ::write(ready[1], "x", 1);
      while (true) {
        ::pause();
      }
    } catch (...) {
    }
    ::_exit(3);
  }
  ::close(ready[1]);
  char byte = 0;
  ASSERT_EQ(::read(ready[0], &byte, 1), 1) << "the child did not get the lock";
  ::close(ready[0]);

  const auto [message, took] = timeout_of([&] { ledger.begin(); });
  EXPECT_EQ(message, "ledger " + (ledger.state_dir() / "ledger.json").string() + " is " +
                         live(child, "waited 1s"));
  EXPECT_GE(took, 950ms);
  // Reads take no lock.
  EXPECT_NO_THROW(ledger.read());

  ::kill(child, SIGKILL);
  ASSERT_EQ(::waitpid(child, nullptr, 0), child);
  const auto start = std::chrono::steady_clock::now();
  auto transaction = ledger.begin();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 500ms);
}

TEST(LockLedger, SecondLedgerInAnotherThreadTimesOut) {
  TempDir dir;
  Ledger ledger(dir / "state", 1s);
  auto transaction = ledger.begin();
  std::string message;
  std::thread other(
      [&] { message = timeout_of([&] { Ledger(dir / "state", 1s).begin(); }).first; });
  other.join();
  EXPECT_EQ(message, "ledger " + (ledger.state_dir() / "ledger.json").string() + " is " +
                         live(::getpid(), "waited 1s"));
}

TEST(LockLedger, TransactionsOfManyThreadsDoNotLoseUpdates) {
  TempDir dir;
  Ledger ledger(dir / "state", 30s);
  {
    auto transaction = ledger.begin();
    SandboxRecord r;
    r.id = "sbx-aaaaaaaaaaaa";
    r.name = "counter";
    r.driver = "stub";
    r.labels["count"] = "0";
    r.transition(EventKind::updated, State::running, TimePoint{}, "test", "seed");
    transaction.data().sandboxes.push_back(r);
    transaction.commit();
  }
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 25; ++i) {
        auto transaction = ledger.begin();
        auto& count = transaction.data().sandboxes.at(0).labels.at("count");
        count = std::to_string(std::stoi(count) + 1);
        transaction.commit();
      }
    });
  }
  for (auto& thread : threads) {
    thread.join();
  }
  EXPECT_EQ(ledger.read().sandboxes.at(0).labels.at("count"), "100");
}

} // namespace
} // namespace sandboxer
