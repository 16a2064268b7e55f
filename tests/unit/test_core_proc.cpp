#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <gtest/gtest.h>
#include <iterator>
#include <string>
#include <sys/wait.h>
#include <unistd.h>

#include <sandboxer/error.hpp>
#include <sandboxer/proc.hpp>

#include "support/temp_dir.hpp"

namespace sandboxer {
namespace {

TEST(Proc, CapturesStdoutAndStderrSeparately) {
  auto result = proc::run({.argv = {"sh", "-c", "echo out; echo err >&2; exit 3"}});
  EXPECT_EQ(result.out, "out\n");
  EXPECT_EQ(result.err, "err\n");
  EXPECT_EQ(result.exit_code, 3);
  EXPECT_EQ(result.status(), 3);
}

// exec -t's backend side in the stub (issue 35): a terminal of its own, one stream, with or
// without one here, and the exit status still comes back.
TEST(Proc, TerminalGivesTheProgramATerminalAndOneStream) {
  proc::Command command{.argv = {"sh", "-c",
                                 "test -t 0 && test -t 1 && test -t 2 && echo tty; "
                                 "echo err >&2; exit 5"}};
  command.terminal = true;
  auto result = proc::run(command);
  EXPECT_EQ(result.out, "tty\r\nerr\r\n");
  EXPECT_EQ(result.err, "");
  EXPECT_EQ(result.status(), 5);
  command.terminal = false;
  EXPECT_EQ(proc::run(command).out, "");
}

// A service a command starts for later ones (the PostgreSQL ledger's keeper): a session of its
// own, its output appended to a file, no descriptor of ours, not waited for.
TEST(Proc, StartDetachedRunsInItsOwnSessionWithItsOutputInAFile) {
  testing::TempDir dir;
  const auto output = dir / "service.log";
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0); // not close-on-exec: a leak would show in /proc/self/fd
  proc::Command command;
  command.argv = {"service", "-c",
                  "echo pid $$; echo sid $(cut -d' ' -f6 /proc/$$/stat); ls /proc/$$/fd | "
                  "tr '\\n' ' ' >&2; echo"};
  command.env_set = {{"GREETING", "hi"}};
  const int pid = proc::start_detached(command, output, std::filesystem::path("/bin/sh"));
  close(pipe_fds[0]);
  close(pipe_fds[1]);
  std::string text;
  for (int i = 0; i < 100 && std::count(text.begin(), text.end(), '\n') < 3; ++i) {
    usleep(50'000);
    std::ifstream in(output);
    text.assign(std::istreambuf_iterator<char>(in), {});
  }
  EXPECT_NE(text.find(fmt::format("pid {}\nsid {}\n", pid, pid)), std::string::npos) << text;
  EXPECT_NE(text.find("0 1 2 "), std::string::npos) << text;
  EXPECT_EQ(text.find(fmt::format(" {} ", pipe_fds[1])), std::string::npos) << text;
  EXPECT_EQ(std::filesystem::status(output).permissions() & std::filesystem::perms::all,
            std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  waitpid(pid, nullptr, 0);
}

TEST(Proc, ArgumentsAreNotInterpretedByAShell) {
  auto result = proc::run({.argv = {"printf", "%s|", "a b", "$HOME", ";", "*"}});
  EXPECT_EQ(result.out, "a b|$HOME|;|*|");
}

TEST(Proc, ShellWordsParseBackIntoTheSameArgv) {
  std::vector<std::string> argv = {"printf", "%s|", "a b", "it's", "$HOME", ";", "*", "", "\\n"};
  proc::Command command;
  command.argv = {"/bin/sh", "-c", proc::shell_words(argv)};
  auto result = proc::run(command);
  EXPECT_EQ(result.out, "a b|it's|$HOME|;|*||\\n|");
}

TEST(Proc, PassesEnvironmentAndWorkingDirectory) {
  testing::TempDir dir;
  proc::Command command{.argv = {"sh", "-c", "echo $FOO; pwd"}};
  command.env_set = {{"FOO", "bar"}};
  command.cwd = dir.path();
  auto result = proc::run(command);
  EXPECT_EQ(result.out, "bar\n" + dir.path().string() + "\n");
}

TEST(Proc, ClearEnvStartsEmpty) {
  proc::Command command{.argv = {"/usr/bin/env"}};
  command.clear_env = true;
  command.env_set = {{"ONLY", "1"}};
  EXPECT_EQ(proc::run(command).out, "ONLY=1\n");
}

TEST(Proc, FeedsStdin) {
  proc::Command command{.argv = {"tr", "a-z", "A-Z"}};
  command.stdin_data = std::string(200000, 'x');
  auto result = proc::run(command);
  EXPECT_EQ(result.out, std::string(200000, 'X'));
}

TEST(Proc, StreamsWhenCallbacksAreSet) {
  std::string out, err;
  proc::Command command{.argv = {"sh", "-c", "echo a; echo b >&2; echo c"}};
  command.on_stdout = [&](std::string_view s) { out += s; };
  command.on_stderr = [&](std::string_view s) { err += s; };
  auto result = proc::run(command);
  EXPECT_EQ(out, "a\nc\n");
  EXPECT_EQ(err, "b\n");
  EXPECT_TRUE(result.out.empty());
}

TEST(Proc, TimeoutKillsTheChild) {
  proc::Command command{.argv = {"sleep", "30"}};
  command.timeout = std::chrono::milliseconds(200);
  auto result = proc::run(command);
  EXPECT_TRUE(result.timed_out);
  EXPECT_EQ(result.signal, SIGTERM);
  EXPECT_EQ(result.status(), 128 + SIGTERM);
}

TEST(Proc, TimeoutAppliesAfterTheChildClosesItsOutput) {
  proc::Command command{.argv = {"sh", "-c", "exec >/dev/null 2>&1; sleep 30"}};
  command.timeout = std::chrono::milliseconds(200);
  EXPECT_TRUE(proc::run(command).timed_out);
}

// Whether `pid` is gone or a zombie (a container's PID 1 may never reap what it inherits).
bool ended(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) {
    return true;
  }
  auto close = line.rfind(')');
  return close != std::string::npos && close + 2 < line.size() && line[close + 2] == 'Z';
}

// Issue 13: a hook that leaves a background child holding stdout made every command wait
// forever. The program's own end is what counts: output held open by what it left behind is
// not waited for.
TEST(Proc, OutputHeldByALeftoverIsNotWaitedFor) {
  auto started = std::chrono::steady_clock::now();
  auto result = proc::run(
      {.argv = {"sh", "-c", "sleep 60 & echo done"}, .timeout = std::chrono::seconds(30)});
  EXPECT_EQ(result.out, "done\n");
  EXPECT_EQ(result.exit_code, 0);
  EXPECT_FALSE(result.timed_out);
  // Generous: the point is "not 30 s (the deadline), not 60 s (the leftover)".
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(20));
}

// At the deadline the whole process group goes, not just the program: nothing it started keeps
// running, and run() returns although a leftover held the pipes.
TEST(Proc, DeadlineKillsTheWholeGroup) {
  auto result = proc::run({.argv = {"sh", "-c", "sleep 60 & echo $!; trap '' TERM; sleep 60"},
                           .timeout = std::chrono::milliseconds(300)});
  EXPECT_TRUE(result.timed_out);
  pid_t leftover = std::stoi(result.out);
  for (int i = 0; i < 200 && !ended(leftover); ++i) {
    usleep(10000);
  }
  EXPECT_TRUE(ended(leftover)) << "pid " << leftover << " survived the deadline";
}

TEST(Proc, MissingProgramIsAnErrorNamingIt) {
  try {
    proc::run({.argv = {"sandboxer-no-such-program"}});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "cannot run 'sandboxer-no-such-program': No such file or directory");
  }
}

} // namespace
} // namespace sandboxer
