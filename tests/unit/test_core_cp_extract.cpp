#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>
#include <sstream>
#include <sys/stat.h>

#include <sandboxer/tar.hpp>

#include "core/cp/extract.hpp"
#include "support/temp_dir.hpp"

// A copy out of a sandbox writes what the sandbox sends, and a hostile sandbox sends what it
// likes: these streams are crafted as one would, and nothing may land outside the destination.
namespace sandboxer::cp {
namespace {

namespace fs = std::filesystem;

struct Item {
  tar::Entry entry;
  std::string content;
};

Item file(std::string path, std::string content, uint32_t mode = 0644) {
  tar::Entry entry;
  entry.path = std::move(path);
  entry.size = content.size();
  entry.mode = mode;
  entry.mtime = 1600000000;
  return {entry, std::move(content)};
}

Item link(std::string path, std::string target, tar::Type type = tar::Type::symlink) {
  tar::Entry entry;
  entry.path = std::move(path);
  entry.type = type;
  entry.link = std::move(target);
  entry.mtime = 1600000000;
  return {entry, ""};
}

Item directory(std::string path, uint32_t mode = 0755) {
  tar::Entry entry;
  entry.path = std::move(path);
  entry.type = tar::Type::directory;
  entry.mode = mode;
  entry.mtime = 1500000000;
  return {entry, ""};
}

// Feeds the items to an Extractor of `dest` as a reader would, then finish().
void extract(const fs::path& dest, const std::vector<Item>& items) {
  Extractor extractor(dest);
  for (const auto& [entry, content] : items) {
    extractor.begin(entry);
    if (!content.empty()) {
      extractor.data(content);
    }
    extractor.end();
  }
  extractor.finish();
}

std::string read(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string refusal(const fs::path& dest, const std::vector<Item>& items) {
  try {
    extract(dest, items);
  } catch (const ExtractError& e) {
    return e.what();
  }
  return "";
}

TEST(CpExtract, WritesFilesDirectoriesAndLinksWithTheirModesAndTimes) {
  testing::TempDir tmp;
  extract(tmp.path(), {directory("d", 0750), file("d/run.sh", "#!/bin/sh\n", 0755),
                       file("d/empty", ""), link("d/to-run", "run.sh"),
                       link("d/hard", "d/run.sh", tar::Type::hardlink), directory("d/e")});
  const fs::path d = tmp.path() / "d";
  EXPECT_EQ(read(d / "run.sh"), "#!/bin/sh\n");
  EXPECT_EQ(fs::status(d / "run.sh").permissions() & fs::perms::all, fs::perms(0755));
  EXPECT_EQ(fs::status(d).permissions() & fs::perms::all, fs::perms(0750));
  EXPECT_TRUE(fs::is_regular_file(d / "empty"));
  EXPECT_EQ(fs::read_symlink(d / "to-run"), "run.sh");
  EXPECT_EQ(fs::hard_link_count(d / "run.sh"), 2u);
  EXPECT_TRUE(fs::is_directory(d / "e"));
  struct stat st {};
  ASSERT_EQ(stat((d / "run.sh").c_str(), &st), 0);
  EXPECT_EQ(st.st_mtim.tv_sec, 1600000000);
  ASSERT_EQ(stat(d.c_str(), &st), 0);
  EXPECT_EQ(st.st_mtim.tv_sec, 1500000000) << "a directory's time is set after its contents";
  // No temporary name is left behind.
  for (const auto& item : fs::recursive_directory_iterator(tmp.path())) {
    EXPECT_EQ(item.path().filename().string().find(".sandboxer-cp-"), std::string::npos)
        << item.path();
  }
}

TEST(CpExtract, AHostileStreamWritesNothingOutsideTheDestination) {
  testing::TempDir tmp;
  const fs::path dest = tmp.path() / "dest";
  const fs::path outside = tmp.path() / "outside";
  fs::create_directories(dest);
  fs::create_directories(outside);
  // Climbing out by name.
  EXPECT_NE(refusal(dest, {file("../escaped", "x")}).find("\"..\""), std::string::npos);
  EXPECT_NE(refusal(dest, {file("a/../../escaped", "x")}).find("\"..\""), std::string::npos);
  EXPECT_NE(refusal(dest, {file("/etc/escaped", "x")}).find("absolute"), std::string::npos);
  // A link the stream made, then a file through it.
  EXPECT_NE(refusal(dest, {link("out", outside.string()), file("out/escaped", "x")})
                .find("symbolic link"),
            std::string::npos);
  // A link that was there before.
  fs::create_directory_symlink(outside, dest / "pre");
  EXPECT_NE(refusal(dest, {file("pre/escaped", "x")}).find("symbolic link"), std::string::npos);
  EXPECT_NE(
      refusal(dest, {directory("pre/sub"), file("pre/sub/escaped", "x")}).find("symbolic link"),
      std::string::npos);
  // A hard link to a file outside, by a climbing or absolute name.
  std::ofstream(outside / "secret") << "secret";
  EXPECT_NE(refusal(dest, {link("h", "../outside/secret", tar::Type::hardlink)}).find("\"..\""),
            std::string::npos);
  EXPECT_NE(refusal(dest, {link("h", (outside / "secret").string(), tar::Type::hardlink)})
                .find("absolute"),
            std::string::npos);
  // A file over the link itself replaces the link; it does not write through it.
  extract(dest, {file("pre", "now a file")});
  EXPECT_EQ(read(dest / "pre"), "now a file");
  EXPECT_FALSE(fs::is_symlink(dest / "pre"));
  EXPECT_EQ(std::distance(fs::directory_iterator(outside), fs::directory_iterator()), 1)
      << "only the secret is outside";
  EXPECT_EQ(read(outside / "secret"), "secret");
}

TEST(CpExtract, AFileAndADirectoryDoNotReplaceEachOther) {
  testing::TempDir tmp;
  fs::create_directories(tmp.path() / "d");
  std::ofstream(tmp.path() / "f") << "f";
  EXPECT_NE(refusal(tmp.path(), {file("d", "x")}).find("where the destination has a directory"),
            std::string::npos);
  EXPECT_NE(refusal(tmp.path(), {directory("f")}).find("where the destination has a file"),
            std::string::npos);
}

TEST(CpExtract, AnInterruptedFileLeavesNeitherItsNameNorItsTemporary) {
  testing::TempDir tmp;
  {
    Extractor extractor(tmp.path());
    extractor.begin(file("big", std::string(10, 'x')).entry);
    extractor.data("xxxxx");
    // The stream stops here (Ctrl-C, a driver that died): the extractor goes.
  }
  EXPECT_TRUE(fs::is_empty(tmp.path()));
}

TEST(CpExtract, SafeComponentsDropDotsAndEmptyParts) {
  EXPECT_EQ(safe_components("./a//b/./c/"), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_TRUE(safe_components(".").empty());
  EXPECT_THROW(safe_components("a/.."), ExtractError);
}

} // namespace
} // namespace sandboxer::cp
