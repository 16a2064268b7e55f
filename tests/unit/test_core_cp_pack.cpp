#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>
#include <map>
#include <sstream>

#include <sandboxer/tar.hpp>

#include "core/cp/extract.hpp"
#include "core/cp/pack.hpp"
#include "core/cp/stream.hpp"
#include "core/sha256.hpp"
#include "support/temp_dir.hpp"

// A tree of this machine packed into a stream and written back elsewhere is the same tree: the
// bytes, the modes, the links as links; the files in the stream are the local files' bytes.
namespace sandboxer::cp {
namespace {

namespace fs = std::filesystem;

std::string packed_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string all_bytes() {
  std::string bytes;
  for (int i = 0; i < 256; ++i) {
    bytes.push_back(static_cast<char>(i));
  }
  return bytes;
}

// Packs `source` as `name` and extracts the stream into `dest`; returns the digests of the files
// the stream holds, by name.
std::map<std::string, std::string> copy(const fs::path& source, const std::string& name,
                                        const fs::path& dest, bool follow = false) {
  Extractor extractor(dest);
  Digests digests([](const std::string& file) { return file; });
  Tee both(extractor, digests);
  tar::Reader reader(both);
  tar::Writer writer([&](std::string_view bytes) { reader.feed(bytes); });
  PackOptions options;
  options.follow = follow;
  Packer packer(writer, options);
  packer.add(source, name);
  writer.finish();
  reader.finish();
  extractor.finish();
  return digests.by_name();
}

TEST(CpPack, ATreeComesOutTheSameWithItsLinksAsLinks) {
  testing::TempDir tmp;
  const fs::path src = tmp.path() / "src";
  fs::create_directories(src / "empty-dir");
  fs::create_directories(src / "sub dir é");
  std::ofstream(src / "bytes", std::ios::binary) << all_bytes();
  std::ofstream(src / "empty");
  std::ofstream(src / "sub dir é" / "run.sh") << "#!/bin/sh\n";
  fs::permissions(src / "sub dir é" / "run.sh", fs::perms(0755));
  fs::create_symlink("../bytes", src / "sub dir é" / "link");
  fs::create_symlink("/etc/passwd", src / "outside"); // copied as a link, never read
  const std::string big(3 * 1024 * 1024 + 7, 'b');    // more than one read piece
  std::ofstream(src / "big", std::ios::binary) << big;

  const fs::path dest = tmp.path() / "dest";
  fs::create_directories(dest);
  auto digests = copy(src, "src", dest);
  const fs::path out = dest / "src";
  EXPECT_EQ(packed_text(out / "bytes"), all_bytes());
  EXPECT_EQ(packed_text(out / "big"), big);
  EXPECT_TRUE(fs::is_regular_file(out / "empty"));
  EXPECT_TRUE(fs::is_directory(out / "empty-dir"));
  EXPECT_EQ(fs::status(out / "sub dir é" / "run.sh").permissions() & fs::perms::all,
            fs::perms(0755));
  EXPECT_EQ(fs::read_symlink(out / "sub dir é" / "link"), "../bytes");
  EXPECT_EQ(fs::read_symlink(out / "outside"), "/etc/passwd");
  EXPECT_EQ(digests["src/bytes"], sha256_hex(all_bytes()));
  EXPECT_EQ(digests["src/big"], sha256_hex(big));
  EXPECT_EQ(digests.count("src/outside"), 0u) << "a link is not read";
}

TEST(CpPack, AStreamOfTheSameTreeIsTheSameBytes) {
  testing::TempDir tmp;
  fs::create_directories(tmp.path() / "t" / "b");
  std::ofstream(tmp.path() / "t" / "a") << "a";
  std::ofstream(tmp.path() / "t" / "b" / "c") << "c";
  auto stream = [&] {
    std::string out;
    tar::Writer writer([&](std::string_view bytes) { out.append(bytes); });
    Packer packer(writer);
    packer.add(tmp.path() / "t", ".");
    writer.finish();
    return out;
  };
  EXPECT_EQ(sha256_hex(stream()), sha256_hex(stream()));
}

TEST(CpPack, FollowCopiesWhatALinkPointsToAndRefusesALoop) {
  testing::TempDir tmp;
  const fs::path src = tmp.path() / "src";
  fs::create_directories(src);
  std::ofstream(tmp.path() / "target") << "pointed at";
  fs::create_symlink(tmp.path() / "target", src / "link");
  const fs::path dest = tmp.path() / "dest";
  fs::create_directories(dest);
  copy(src, ".", dest, true);
  EXPECT_FALSE(fs::is_symlink(dest / "link"));
  EXPECT_EQ(packed_text(dest / "link"), "pointed at");

  fs::create_directory_symlink(src, src / "loop");
  const fs::path again = tmp.path() / "again";
  fs::create_directories(again);
  EXPECT_THROW(copy(src, ".", again, true), PackError);
}

TEST(CpPack, AMissingSourceIsAnErrorNamingIt) {
  testing::TempDir tmp;
  std::string out;
  tar::Writer writer([&](std::string_view bytes) { out.append(bytes); });
  Packer packer(writer);
  try {
    packer.add(tmp.path() / "nope", "nope");
    FAIL() << "no error";
  } catch (const PackError& e) {
    EXPECT_NE(std::string(e.what()).find("nope: cannot read it: No such file"), std::string::npos)
        << e.what();
  }
}

} // namespace
} // namespace sandboxer::cp
