#include <fcntl.h>
#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <sandboxer/copy_over_exec.hpp>
#include <sandboxer/proc.hpp>
#include <sandboxer/tar.hpp>

#include "core/cp/transfer.hpp"
#include "core/errors.hpp"
#include "core/sha256.hpp"
#include "support/temp_dir.hpp"

// `sandboxer cp` below the engine: docker cp's rules for where a copy goes, the round trip over
// exec (the sandbox's own tar, here this machine's), and what a hostile driver's stream can do.
namespace sandboxer::cp {
namespace {

namespace fs = std::filesystem;

// A driver whose "sandbox" is this machine: exec runs the command here, with stdin.
class HostExecDriver : public Driver {
public:
  int exec(const SandboxHandle&, const ExecRequest& request, ExecIo& io) override {
    ++execs;
    proc::Command command;
    command.argv = request.argv;
    command.stdin_fd = request.attach_stdin ? io.stdin_fd() : -1;
    command.on_stdout = [&](std::string_view bytes) { io.out(bytes); };
    command.on_stderr = [&](std::string_view bytes) { io.err(bytes); };
    command.timeout = std::chrono::seconds(60);
    try {
      return proc::run(command).status();
    } catch (const Error&) {
      return 127;
    }
  }
  CreateResult create(const CreateRequest&) override { return {}; }
  void destroy(const SandboxHandle&) override {}
  BackendStatus status(const SandboxHandle&) override { return {}; }
  int execs = 0;
};

// A driver that sends whatever stream it was given, as a hostile sandbox would.
class CraftedStreamDriver : public HostExecDriver {
public:
  explicit CraftedStreamDriver(std::string stream) : m_stream(std::move(stream)) {}
  PathInfo stat_path(const SandboxHandle&, const std::string&) override {
    return {.kind = PathInfo::Kind::directory};
  }
  void copy_out(const SandboxHandle&, const CopyOutRequest&, CopySink& sink) override {
    sink.write(m_stream);
  }

private:
  std::string m_stream;
};

void spill(const fs::path& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}
std::string slurp(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

SandboxHandle handle() {
  SandboxHandle sandbox;
  sandbox.sandbox_id = "sbx-test";
  return sandbox;
}

std::string crafted(const std::vector<std::pair<tar::Entry, std::string>>& items) {
  std::string stream;
  tar::Writer writer([&](std::string_view bytes) { stream.append(bytes); });
  for (const auto& [entry, content] : items) {
    writer.begin(entry);
    if (!content.empty()) {
      writer.data(content);
    }
    writer.end();
  }
  writer.finish();
  return stream;
}

// The writer refuses absolute names, as it should; a hostile sandbox has its own writer: the
// first header's name gets a leading '/' and its checksum is made again.
std::string with_absolute_first_name(std::string stream) {
  stream[0] = '/';
  unsigned sum = 0;
  for (size_t i = 0; i < 512; ++i) {
    sum += (i >= 148 && i < 156) ? ' ' : static_cast<unsigned char>(stream[i]);
  }
  const std::string field = fmt::format("{:06o}", sum);
  stream.replace(148, 8, field + std::string("\0 ", 2));
  return stream;
}

tar::Entry entry(const std::string& path, tar::Type type, uint64_t size = 0,
                 const std::string& link = "") {
  tar::Entry e;
  e.path = path;
  e.type = type;
  e.size = size;
  e.link = link;
  e.mode = type == tar::Type::directory ? 0755 : 0644;
  return e;
}

class CpTransfer : public ::testing::Test {
protected:
  testing::TempDir here;    // "this machine"
  testing::TempDir sandbox; // "the sandbox"
  HostExecDriver driver;
  Channel channel{driver, handle(), Channel::Via::exec};
};

TEST_F(CpTransfer, StatOverExecTellsDirectoryFileAndMissing) {
  spill(sandbox / "f", "x");
  EXPECT_EQ(channel.stat(sandbox.path().string()).kind, PathInfo::Kind::directory);
  EXPECT_EQ(channel.stat((sandbox / "f").string()).kind, PathInfo::Kind::file);
  EXPECT_EQ(channel.stat((sandbox / "nope").string()).kind, PathInfo::Kind::missing);
  // A link is followed: to a directory it is one; to nothing, nothing is there.
  fs::create_directory_symlink(sandbox.path(), sandbox / "to-dir");
  EXPECT_EQ(channel.stat((sandbox / "to-dir").string()).kind, PathInfo::Kind::directory);
  fs::create_symlink("nowhere", sandbox / "dangling");
  EXPECT_EQ(channel.stat((sandbox / "dangling").string()).kind, PathInfo::Kind::missing);
  EXPECT_EQ(driver.execs, 5) << "one exec per question";
}

TEST_F(CpTransfer, AFileIntoAnExistingDirectoryKeepsItsName) {
  spill(here / "report.txt", "bytes\n");
  auto plan =
      plan_copy_in(channel, {(here / "report.txt").string()}, sandbox.path().string(), false);
  CopyResult result;
  copy_in(channel, plan, {}, result);
  EXPECT_EQ(slurp(sandbox / "report.txt"), "bytes\n");
  EXPECT_EQ(result.files, 1u);
  EXPECT_EQ(result.bytes, 6u);
  ASSERT_EQ(result.file_digests.size(), 1u);
  EXPECT_EQ(result.file_digests[0].path, (sandbox / "report.txt").string());
  EXPECT_EQ(result.file_digests[0].sha256, sha256_hex("bytes\n"));
  EXPECT_EQ(result.via, "exec");
  EXPECT_EQ(result.sha256.size(), 64u);
}

TEST_F(CpTransfer, AMissingDestinationIsTheNewName) {
  spill(here / "a.txt", "a");
  auto plan =
      plan_copy_in(channel, {(here / "a.txt").string()}, (sandbox / "b.txt").string(), false);
  EXPECT_EQ(plan.directory, sandbox.path().string());
  ASSERT_EQ(plan.items.size(), 1u);
  EXPECT_EQ(plan.items[0].name, "b.txt");
  CopyResult result;
  copy_in(channel, plan, {}, result);
  EXPECT_EQ(slurp(sandbox / "b.txt"), "a");
}

TEST_F(CpTransfer, ADirectoryOntoAFileIsAConflict) {
  fs::create_directories(here / "dir");
  spill(sandbox / "file", "x");
  try {
    plan_copy_in(channel, {(here / "dir").string()}, (sandbox / "file").string(), false);
    FAIL() << "accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::conflict) << e.what();
  }
}

TEST_F(CpTransfer, AMissingSourceOrParentIsNotFound) {
  try {
    plan_copy_in(channel, {(here / "nope").string()}, sandbox.path().string(), false);
    FAIL() << "accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::not_found) << e.what();
  }
  spill(here / "a", "a");
  try {
    plan_copy_in(channel, {(here / "a").string()}, (sandbox / "no/such/dir/a").string(), false);
    FAIL() << "accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::not_found) << e.what();
  }
  try {
    plan_copy_out(channel, (sandbox / "nope").string(), here.path().string());
    FAIL() << "accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::not_found) << e.what();
  }
}

TEST_F(CpTransfer, RoundTripOverExecKeepsBytesModesLinksAndTimes) {
  fs::create_directories(here / "tree/empty");
  std::string all;
  for (int b = 0; b < 256; ++b) {
    all.push_back(static_cast<char>(b));
  }
  spill(here / "tree/all.bin", all);
  spill(here / "tree/run.sh", "#!/bin/sh\n");
  fs::permissions(here / "tree/run.sh", fs::perms(0755));
  fs::create_symlink("all.bin", here / "tree/link");
  const timespec old[2] = {{1000000000, 0}, {1000000000, 0}};
  utimensat(AT_FDCWD, (here / "tree/all.bin").c_str(), old, 0);

  auto in_plan = plan_copy_in(channel, {(here / "tree").string()}, sandbox.path().string(), false);
  CopyResult in;
  copy_in(channel, in_plan, {.verify = true}, in);
  EXPECT_EQ(in.verified, true);
  EXPECT_EQ(slurp(sandbox / "tree/all.bin"), all);
  EXPECT_EQ(fs::read_symlink(sandbox / "tree/link"), "all.bin");
  EXPECT_TRUE(fs::is_directory(sandbox / "tree/empty"));

  auto out_plan = plan_copy_out(channel, (sandbox / "tree").string(), (here / "back").string());
  EXPECT_EQ(out_plan.top, "back");
  CopyResult out;
  copy_out(channel, out_plan, {.verify = true}, out);
  EXPECT_EQ(out.verified, true);
  EXPECT_EQ(slurp(here / "back/all.bin"), all);
  EXPECT_EQ(fs::read_symlink(here / "back/link"), "all.bin");
  EXPECT_TRUE(fs::is_directory(here / "back/empty"));
  struct stat st {};
  ASSERT_EQ(stat((here / "back/run.sh").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0755u);
  ASSERT_EQ(stat((here / "back/all.bin").c_str(), &st), 0);
  EXPECT_EQ(st.st_mtim.tv_sec, 1000000000);
  // The digests of what went in are the digests of what came out, path for path.
  ASSERT_EQ(in.file_digests.size(), out.file_digests.size());
  std::map<std::string, std::string> a, b;
  for (const auto& f : in.file_digests) {
    a[f.path] = f.sha256;
  }
  for (const auto& f : out.file_digests) {
    b[f.path] = f.sha256;
  }
  EXPECT_EQ(a, b);
}

TEST_F(CpTransfer, ContentsOfADirectoryWithSlashDot) {
  fs::create_directories(sandbox / "logs");
  spill(sandbox / "logs/one.log", "1");
  fs::create_directories(here / "into");
  auto plan = plan_copy_out(channel, (sandbox / "logs").string() + "/.", (here / "into").string());
  EXPECT_EQ(plan.top, "");
  CopyResult result;
  copy_out(channel, plan, {}, result);
  EXPECT_EQ(slurp(here / "into/one.log"), "1");
  EXPECT_FALSE(fs::exists(here / "into/logs"));
}

TEST_F(CpTransfer, TarMissingInTheSandboxIsSaid) {
  class NoTar : public HostExecDriver {
    int exec(const SandboxHandle& s, const ExecRequest& r, ExecIo& io) override {
      if (r.argv.front() == "tar") {
        return 127;
      }
      return HostExecDriver::exec(s, r, io);
    }
  } no_tar;
  Channel bare(no_tar, handle(), Channel::Via::exec);
  spill(here / "a", "a");
  auto plan = plan_copy_in(bare, {(here / "a").string()}, sandbox.path().string(), false);
  CopyResult result;
  try {
    copy_in(bare, plan, {}, result);
    FAIL() << "accepted";
  } catch (const DriverError& e) {
    EXPECT_NE(std::string(e.what()).find("has no 'tar'"), std::string::npos) << e.what();
  }
}

// A hostile sandbox answers a copy out with names that climb out of the destination, or that
// are not what was asked for: refused, and nothing lands outside.
TEST_F(CpTransfer, AHostileStreamWritesNothingOutsideTheDestination) {
  fs::create_directories(here / "dest");
  const std::vector<std::vector<std::pair<tar::Entry, std::string>>> streams = {
      {{entry("asked/../../escaped", tar::Type::file, 4), "evil"}},
      {{entry("other-name", tar::Type::file, 4), "evil"}},
      {{entry("asked", tar::Type::directory), ""},
       {entry("asked/up", tar::Type::symlink, 0, "../.."), ""},
       {entry("asked/up/escaped", tar::Type::file, 4), "evil"}},
  };
  std::vector<std::string> encoded;
  for (const auto& items : streams) {
    encoded.push_back(crafted(items));
  }
  encoded.push_back(
      with_absolute_first_name(crafted({{entry("xabs-escaped", tar::Type::file, 4), "evil"}})));
  for (const auto& stream : encoded) {
    CraftedStreamDriver hostile(stream);
    Channel to(hostile, handle(), Channel::Via::native);
    OutPlan plan;
    plan.sandbox_path = "/asked";
    plan.local_directory = here / "dest";
    plan.top = "asked";
    CopyResult result;
    try {
      copy_out(to, plan, {}, result);
      FAIL() << "a hostile stream was accepted";
    } catch (const DriverError& e) {
      EXPECT_NE(std::string(e.what()).find("refused"), std::string::npos) << e.what();
    }
    EXPECT_FALSE(fs::exists(here / "escaped"));
    EXPECT_FALSE(fs::exists(here.path().parent_path() / "escaped"));
    EXPECT_FALSE(fs::exists("/abs-escaped"));
    EXPECT_FALSE(fs::exists("/xabs-escaped"));
  }
}

TEST_F(CpTransfer, ATruncatedStreamIsAnErrorNotAShortCopy) {
  std::string stream = crafted({{entry("asked", tar::Type::file, 1000), std::string(1000, 'x')}});
  stream.resize(700);
  CraftedStreamDriver cut(stream);
  Channel from(cut, handle(), Channel::Via::native);
  fs::create_directories(here / "dest");
  OutPlan plan{"/asked", false, here / "dest", "asked"};
  CopyResult result;
  EXPECT_THROW(copy_out(from, plan, {}, result), DriverError);
  EXPECT_FALSE(fs::exists(here / "dest/asked"));
}

} // namespace
} // namespace sandboxer::cp
