// The file primitives and the state directory against another local user who can write where
// sandboxer writes (issue 13: symlinks planted at predictable temp names).
#include <filesystem>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sandboxer/error.hpp>

#include "core/ledger/ledger.hpp"
#include "sdk/files.hpp"
#include "support/temp_dir.hpp"

using namespace sandboxer;
using sandboxer::testing::TempDir;
namespace fs = std::filesystem;

namespace {

std::string read_all(const fs::path& path) {
  return read_file_if_exists(path).value_or("<missing>");
}

} // namespace

TEST(FilesAtomicWrite, PlantedSymlinksAreNeverFollowed) {
  TempDir dir;
  const fs::path victim = dir / "victim";
  const fs::path target = dir / "metrics.prom";
  write_file_atomically(victim, "precious\n");
  // The names the old writer used (.<name>.<pid>.tmp, opened with O_CREAT|O_TRUNC), and a few
  // neighbours: each a symlink to the victim.
  for (int pid = ::getpid() - 2; pid <= ::getpid() + 2; ++pid) {
    fs::create_symlink(victim, dir / fmt::format(".metrics.prom.{}.tmp", pid));
  }
  write_file_atomically(target, "sandboxer_reap_runs_total 1\n", 0644);
  EXPECT_EQ(read_all(victim), "precious\n");
  EXPECT_EQ(read_all(target), "sandboxer_reap_runs_total 1\n");
  EXPECT_FALSE(fs::is_symlink(target));
  // Nothing but the planted links, the victim and the target is left behind.
  int entries = 0;
  for (const auto& entry : fs::directory_iterator(dir.path())) {
    (void)entry;
    ++entries;
  }
  EXPECT_EQ(entries, 2 + 5);
}

TEST(FilesAtomicWrite, ReplacesAndKeepsTheMode) {
  TempDir dir;
  const fs::path target = dir / "cursor";
  write_file_atomically(target, "1\n", 0600);
  write_file_atomically(target, "2\n", 0600);
  EXPECT_EQ(read_all(target), "2\n");
  struct stat st {};
  ASSERT_EQ(::stat(target.c_str(), &st), 0);
  EXPECT_EQ(
      st.st_mode & 0777, 0600u & ~[] {
        mode_t mask = ::umask(0);
        ::umask(mask);
        return mask;
      }());
}

TEST(LedgerStateDir, RefusesADirectoryOthersCanWrite) {
  TempDir dir;
  const fs::path state = dir / "state";
  fs::create_directory(state);
  for (mode_t mode : {0777, 0770, 0722, 01777}) {
    ASSERT_EQ(::chmod(state.c_str(), mode), 0);
    Ledger ledger(state, std::chrono::seconds(1));
    try {
      ledger.begin();
      ADD_FAILURE() << "a state dir of mode " << std::oct << mode << " was written";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("chmod go-w " + state.string()), std::string::npos)
          << e.what();
    }
    EXPECT_FALSE(fs::exists(state / "ledger.json"));
  }
  ASSERT_EQ(::chmod(state.c_str(), 0755), 0);
  Ledger ledger(state, std::chrono::seconds(1));
  auto tx = ledger.begin();
  tx.commit();
  EXPECT_TRUE(fs::exists(state / "ledger.json"));
}
