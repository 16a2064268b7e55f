#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <gtest/gtest.h>
#include <map>
#include <string>
#include <vector>

#include <sandboxer/proc.hpp>
#include <sandboxer/tar.hpp>

#include "support/temp_dir.hpp"

// Tar streams as `sandboxer cp` moves them (docs/cp.md): what the writer makes, the reader reads
// back entry for entry, in pieces of any size; what GNU tar and BusyBox-style GNU long names and
// pax headers hold is read as those tools meant it; a damaged or hostile stream is an error with
// its offset, never a crash.
namespace sandboxer::tar {
namespace {

namespace fs = std::filesystem;

struct Seen {
  Entry entry;
  std::string content;
};

class Collect : public Sink {
public:
  std::vector<Seen> seen;
  bool open = false;
  void begin(const Entry& entry) override {
    EXPECT_FALSE(open);
    seen.push_back({entry, ""});
    open = true;
  }
  void data(std::string_view chunk) override {
    ASSERT_TRUE(open);
    seen.back().content.append(chunk);
  }
  void end() override {
    EXPECT_TRUE(open);
    open = false;
  }
};

std::vector<Seen> read_all(const std::string& stream, size_t piece = 1 << 16) {
  Collect sink;
  Reader reader(sink);
  for (size_t at = 0; at < stream.size(); at += piece) {
    reader.feed(std::string_view(stream).substr(at, piece));
  }
  reader.finish();
  return sink.seen;
}

std::string all_bytes() {
  std::string bytes;
  for (int i = 0; i < 256; ++i) {
    bytes.push_back(static_cast<char>(i));
  }
  return bytes;
}

std::string write_all(const std::vector<Seen>& entries) {
  std::string out;
  Writer writer([&](std::string_view bytes) { out.append(bytes); });
  for (const auto& [entry, content] : entries) {
    writer.begin(entry);
    writer.data(content);
    writer.end();
  }
  writer.finish();
  EXPECT_EQ(writer.written(), out.size());
  return out;
}

Entry make(std::string path, Type type, std::string link = "", uint64_t size = 0) {
  Entry entry;
  entry.path = std::move(path);
  entry.type = type;
  entry.link = std::move(link);
  entry.size = size;
  entry.mode = type == Type::directory ? 0755 : 0640;
  entry.mtime = 1700000000;
  entry.uid = 1000;
  entry.gid = 100;
  return entry;
}

TEST(Tar, WhatTheWriterMakesTheReaderReadsBackInPiecesOfAnySize) {
  const std::string long_dir(120, 'd');
  const std::string too_long(300, 'n'); // no prefix/name split holds it: a pax path
  std::vector<Seen> entries = {
      {make("bytes", Type::file, "", 256), all_bytes()},
      {make("empty", Type::file), ""},
      {make("dir", Type::directory), ""},
      {make("dir/link", Type::symlink, "../bytes"), ""},
      {make(long_dir + "/split-by-prefix", Type::file, "", 3), "abc"},
      {make(too_long, Type::file, "", 1), "x"},
      {make("long-link", Type::symlink, std::string(150, 't')), ""},
      {make("with space and é", Type::file, "", 2), "hi"},
      {make("hard", Type::hardlink, "bytes"), ""},
  };
  entries[0].entry.mode = 0755;
  const std::string stream = write_all(entries);
  EXPECT_EQ(stream.size() % 512, 0u);
  for (size_t piece : {size_t(1), size_t(7), size_t(512), size_t(100000)}) {
    auto seen = read_all(stream, piece);
    ASSERT_EQ(seen.size(), entries.size()) << "piece " << piece;
    for (size_t i = 0; i < seen.size(); ++i) {
      const Entry& want = entries[i].entry;
      const Entry& got = seen[i].entry;
      EXPECT_EQ(got.path, want.path) << i;
      EXPECT_EQ(got.type, want.type) << i;
      EXPECT_EQ(got.link, want.link) << i;
      EXPECT_EQ(got.mode, want.mode) << i;
      EXPECT_EQ(got.mtime, want.mtime) << i;
      EXPECT_EQ(got.uid, want.uid) << i;
      EXPECT_EQ(got.gid, want.gid) << i;
      EXPECT_EQ(seen[i].content, entries[i].content) << i;
    }
  }
}

TEST(Tar, ReadsWhatGnuTarWritesInEachFormat) {
  testing::TempDir dir;
  fs::path tree = dir.path() / "tree";
  fs::create_directories(tree / "sub" / std::string(110, 'l'));
  std::ofstream(tree / "sub" / std::string(110, 'l') / "deep") << "deep content";
  std::ofstream(tree / "bytes", std::ios::binary) << all_bytes();
  fs::create_symlink("bytes", tree / "sym");
  fs::permissions(tree / "bytes", fs::perms(0751));
  for (std::string format : {"gnu", "posix", "ustar", "oldgnu"}) {
    auto result = proc::run(
        {.argv = {"tar", "--format=" + format, "-C", tree.string(), "-cf", "-", "--sort=name", "."},
         .timeout = std::chrono::seconds(30)});
    if (format == "ustar" && result.exit_code != 0) {
      continue; // ustar cannot hold the 110-byte directory name beside its parent: tar says so
    }
    ASSERT_EQ(result.exit_code, 0) << format << ": " << result.err;
    auto seen = read_all(result.out, 1000);
    std::map<std::string, Seen> by_path;
    for (auto& item : seen) {
      by_path[item.entry.path] = item;
    }
    ASSERT_TRUE(by_path.contains("./bytes")) << format;
    EXPECT_EQ(by_path["./bytes"].content, all_bytes()) << format;
    EXPECT_EQ(by_path["./bytes"].entry.mode, 0751u) << format;
    EXPECT_EQ(by_path["./sym"].entry.type, Type::symlink) << format;
    EXPECT_EQ(by_path["./sym"].entry.link, "bytes") << format;
    std::string deep = "./sub/" + std::string(110, 'l') + "/deep";
    ASSERT_TRUE(by_path.contains(deep)) << format;
    EXPECT_EQ(by_path[deep].content, "deep content") << format;
    EXPECT_EQ(by_path["./sub"].entry.type, Type::directory) << format;
  }
}

TEST(Tar, SizesBeyondOctalAreReadInBase256) {
  std::string stream = write_all({{make("f", Type::file, "", 5), "12345"}});
  // GNU's form for a size past 8 GiB: the high bit set, the value big-endian in the rest.
  std::string block = stream.substr(0, 512);
  std::fill(block.begin() + 124, block.begin() + 136, '\0');
  block[124] = static_cast<char>(0x80);
  block[135] = 5;
  std::fill(block.begin() + 148, block.begin() + 156, ' ');
  unsigned sum = 0;
  for (unsigned char c : block) {
    sum += c;
  }
  std::string checksum = fmt::format("{:06o}", sum);
  std::copy(checksum.begin(), checksum.end(), block.begin() + 148);
  block[154] = '\0';
  auto seen = read_all(block + stream.substr(512));
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].content, "12345");
}

void expect_error(const std::string& stream, const std::string& words) {
  try {
    read_all(stream, 333);
    ADD_FAILURE() << "no error, expected: " << words;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
  }
}

TEST(Tar, DamagedOrHostileStreamsAreErrorsWithTheirOffset) {
  const std::string good = write_all({{make("a", Type::file, "", 600), std::string(600, 'a')}});
  expect_error(good.substr(0, 700), "ended inside an entry's content");
  expect_error(good.substr(0, 100), "ended inside a header");
  std::string bad_sum = good;
  bad_sum[0] = 'b';
  expect_error(bad_sum, "byte 0: bad header checksum");
  expect_error(std::string(1000, 'x'), "bad header checksum");
  // An entry after the end-of-archive block.
  std::string after_end = std::string(512, '\0') + good;
  expect_error(after_end, "after the end-of-archive block");
  // A pax header that claims 2 MiB.
  std::string pax_stream;
  {
    Writer writer([&](std::string_view bytes) { pax_stream.append(bytes); });
    writer.begin(make(std::string(300, 'p'), Type::file));
    writer.end();
    writer.finish();
  }
  std::string huge = pax_stream;
  std::string size = fmt::format("{:011o}", 2u << 20);
  std::copy(size.begin(), size.end(), huge.begin() + 124);
  std::fill(huge.begin() + 148, huge.begin() + 156, ' ');
  unsigned sum = 0;
  for (int i = 0; i < 512; ++i) {
    sum += static_cast<unsigned char>(huge[i]);
  }
  std::string checksum = fmt::format("{:06o}", sum);
  std::copy(checksum.begin(), checksum.end(), huge.begin() + 148);
  huge[154] = '\0';
  expect_error(huge, "an extended header of 2097152 bytes");
  // A pax record whose length runs past its header.
  std::string broken = pax_stream;
  broken[512] = '9';
  broken[513] = '9';
  expect_error(broken, "malformed pax record");
}

TEST(Tar, AStreamMayEndWithoutItsZeroBlocksButNotAfterAnExtendedHeader) {
  const std::string stream = write_all({{make("a", Type::file, "", 1), "a"}});
  EXPECT_EQ(read_all(stream.substr(0, 1024)).size(), 1u); // no closing blocks at all
  std::string pax_only;
  Writer writer([&](std::string_view bytes) { pax_only.append(bytes); });
  writer.begin(make(std::string(300, 'p'), Type::file));
  writer.end();
  expect_error(pax_only.substr(0, 1024), "ended after an extended header");
}

TEST(Tar, TheWriterRefusesAnEntryItCannotWriteTruly) {
  Writer writer([](std::string_view) {});
  EXPECT_THROW(writer.begin(make("/abs", Type::file)), std::invalid_argument);
  writer.begin(make("f", Type::file, "", 3));
  EXPECT_THROW(writer.data("four"), std::logic_error);
  writer.data("ab");
  EXPECT_THROW(writer.end(), std::logic_error);
}

} // namespace
} // namespace sandboxer::tar
