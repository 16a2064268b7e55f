// The driver protocol's copy methods end to end: sandboxer's client (core/external) against the
// real `sandboxer-driver-stub-external` process (the SDK's server, tests/drivers/), its sandbox a
// directory this test can look into.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <map>
#include <random>
#include <sys/stat.h>

#include <sandboxer/error.hpp>
#include <sandboxer/tar.hpp>

#include "core/external/external_driver.hpp"
#include "support/temp_dir.hpp"

namespace sandboxer {
namespace {

namespace fs = std::filesystem;

constexpr int64_t k_external_mtime = 1'600'000'000; // 2020-09-13: not "now", so a kept time shows

// A tar stream in memory, made by the SDK's writer.
class Stream {
public:
  void dir(const std::string& path, uint32_t mode = 0755) {
    add({.path = path, .type = tar::Type::directory, .mode = mode, .mtime = k_external_mtime});
  }
  void file(const std::string& path, const std::string& content, uint32_t mode = 0644) {
    add({.path = path, .mode = mode, .mtime = k_external_mtime + 1, .size = content.size()},
        content);
  }
  void link(const std::string& path, const std::string& target) {
    add({.path = path,
         .type = tar::Type::symlink,
         .mode = 0777,
         .mtime = k_external_mtime + 2,
         .link = target});
  }
  std::string bytes() {
    m_writer.finish();
    return m_out;
  }

private:
  void add(const tar::Entry& entry, const std::string& content = "") {
    m_writer.begin(entry);
    m_writer.data(content);
    m_writer.end();
  }
  std::string m_out;
  tar::Writer m_writer{[this](std::string_view b) { m_out.append(b); }};
};

// Hands the stream over in pieces of an odd size, as a packer reading files would.
class PieceSource : public CopySource {
public:
  explicit PieceSource(std::string bytes) : m_bytes(std::move(bytes)) {}
  size_t read(char* buffer, size_t size) override {
    size_t n = std::min({size, size_t{7001}, m_bytes.size() - m_at});
    std::memcpy(buffer, m_bytes.data() + m_at, n);
    m_at += n;
    return n;
  }

private:
  std::string m_bytes;
  size_t m_at = 0;
};

// What a copy_out stream holds, parsed as the core would.
struct Found {
  tar::Entry entry;
  std::string content;
};
class Collect : public CopySink, public tar::Sink {
public:
  void write(std::string_view bytes) override {
    ++writes;
    total += bytes.size();
    m_reader.feed(bytes);
  }
  void begin(const tar::Entry& entry) override { m_current = &(found[entry.path] = {entry, ""}); }
  void data(std::string_view chunk) override { m_current->content.append(chunk); }
  void end() override {}
  void finish() { m_reader.finish(); }

  std::map<std::string, Found> found;
  size_t writes = 0;
  size_t total = 0;

private:
  tar::Reader m_reader{*this};
  Found* m_current = nullptr;
};

// A ustar stream of one file named `name` as given, which tar::Writer would refuse to write: what
// a hostile stream holds.
std::string raw_stream(const std::string& name, const std::string& content) {
  std::string block(512, '\0');
  auto put = [&](size_t at, const std::string& text) { block.replace(at, text.size(), text); };
  put(0, name);
  put(100, "0000644");
  put(108, "0000000");
  put(116, "0000000");
  put(124, fmt::format("{:011o}", content.size()));
  put(136, fmt::format("{:011o}", k_external_mtime));
  put(148, "        ");
  block[156] = '0';
  put(257, std::string("ustar\0"
                       "00",
                       8));
  unsigned sum = 0;
  for (unsigned char c : block) {
    sum += c;
  }
  put(148, fmt::format("{:06o}", sum) + std::string(1, '\0') + " ");
  std::string out = block + content;
  out.append((512 - content.size() % 512) % 512, '\0');
  out.append(1024, '\0');
  return out;
}

std::string external_byte_values() {
  std::string out;
  for (int i = 0; i < 256; ++i) {
    out.push_back(static_cast<char>(i));
  }
  return out;
}

std::string noise(size_t size) {
  std::mt19937 random(37);
  std::string out(size, '\0');
  for (auto& c : out) {
    c = static_cast<char>(random());
  }
  return out;
}

struct stat lstat_of(const fs::path& path) {
  struct stat st {};
  EXPECT_EQ(::lstat(path.c_str(), &st), 0) << path;
  return st;
}

class ExternalCopy : public ::testing::Test {
protected:
  void SetUp() override {
    factory = external::make_factory("stub-external", SANDBOXER_STUB_EXTERNAL_PATH);
    context.data_dir = dir / "data";
    driver = factory->open(factory->parse_spec({{"root", (dir / "root").string()}}), context);
    sandbox.backend_id = driver->create({.sandbox_id = "sbx-copy", .name = "copy"}).backend_id;
    fs_root = dir / "root" / "sandboxes" / sandbox.backend_id / "fs";
  }
  void TearDown() override { unsetenv("SANDBOXER_STUB_EXTERNAL_DIE_IN_COPY_OUT"); }

  testing::TempDir dir;
  DriverContext context;
  std::unique_ptr<DriverFactory> factory;
  std::unique_ptr<Driver> driver;
  SandboxHandle sandbox;
  fs::path fs_root;
};

TEST_F(ExternalCopy, TheCapabilityIsWhatTheHandshakeSaid) {
  EXPECT_TRUE(factory->capabilities().copy);
  EXPECT_FALSE(factory->capabilities().copy_owner);
}

TEST_F(ExternalCopy, RoundTripKeepsBytesModesTimesAndLinks) {
  const std::string big = noise((1u << 20) + 12345); // 17 chunks of 64 KiB and a bit
  Stream in;
  in.dir("d");
  in.file("d/bytes", external_byte_values());
  in.file("d/empty", "");
  in.dir("d/emptydir", 0700);
  in.file("d/big", big, 0755);
  in.link("d/link", "bytes");
  in.link("d/dangling", "/nowhere");
  PieceSource source(in.bytes());
  driver->copy_in(sandbox, {.directory = "/"}, source);

  // What landed in the sandbox's directory.
  EXPECT_EQ(testing::read_file(fs_root / "d" / "bytes"), external_byte_values());
  EXPECT_EQ(fs::file_size(fs_root / "d" / "empty"), 0u);
  EXPECT_EQ(testing::read_file(fs_root / "d" / "big"), big);
  EXPECT_EQ(lstat_of(fs_root / "d" / "big").st_mode & 07777, 0755u);
  EXPECT_EQ(lstat_of(fs_root / "d" / "bytes").st_mode & 07777, 0644u);
  EXPECT_EQ(lstat_of(fs_root / "d" / "emptydir").st_mode & 07777, 0700u);
  EXPECT_TRUE(fs::is_empty(fs_root / "d" / "emptydir"));
  EXPECT_EQ(lstat_of(fs_root / "d" / "bytes").st_mtime, k_external_mtime + 1);
  EXPECT_EQ(lstat_of(fs_root / "d").st_mtime, k_external_mtime);
  EXPECT_EQ(fs::read_symlink(fs_root / "d" / "link"), "bytes");
  EXPECT_EQ(lstat_of(fs_root / "d" / "link").st_mtime, k_external_mtime + 2);

  // stat_path follows links, and names a dangling one.
  EXPECT_EQ(driver->stat_path(sandbox, "/d").kind, PathInfo::Kind::directory);
  PathInfo big_info = driver->stat_path(sandbox, "/d/big");
  EXPECT_EQ(big_info.kind, PathInfo::Kind::file);
  EXPECT_EQ(big_info.size, big.size());
  EXPECT_EQ(big_info.mode, 0755u);
  EXPECT_EQ(driver->stat_path(sandbox, "/d/link").kind, PathInfo::Kind::file);
  PathInfo dangling = driver->stat_path(sandbox, "/d/dangling");
  EXPECT_EQ(dangling.kind, PathInfo::Kind::symlink);
  EXPECT_EQ(dangling.link_target, "/nowhere");
  EXPECT_EQ(driver->stat_path(sandbox, "/no/such").kind, PathInfo::Kind::missing);

  // And back out: the same entries, the same bytes, in chunks.
  Collect out;
  driver->copy_out(sandbox, {.path = "/d"}, out);
  out.finish();
  ASSERT_EQ(out.found.size(), 7u);
  EXPECT_EQ(out.found["d/bytes"].content, external_byte_values());
  EXPECT_EQ(out.found["d/big"].content, big);
  EXPECT_EQ(out.found["d/big"].entry.mode, 0755u);
  EXPECT_EQ(out.found["d/big"].entry.mtime, k_external_mtime + 1);
  EXPECT_EQ(out.found["d/empty"].entry.size, 0u);
  EXPECT_EQ(out.found["d/emptydir"].entry.type, tar::Type::directory);
  EXPECT_EQ(out.found["d/emptydir"].entry.mode, 0700u);
  EXPECT_EQ(out.found["d/link"].entry.type, tar::Type::symlink);
  EXPECT_EQ(out.found["d/link"].entry.link, "bytes");
  EXPECT_EQ(out.found["d"].entry.mtime, k_external_mtime);
  EXPECT_GT(out.writes, 16u) << "the stream came in chunks, not whole";

  // --follow: the link's target under the link's name.
  Collect followed;
  driver->copy_out(sandbox, {.path = "/d/link", .follow = true}, followed);
  followed.finish();
  ASSERT_EQ(followed.found.count("link"), 1u);
  EXPECT_EQ(followed.found["link"].entry.type, tar::Type::file);
  EXPECT_EQ(followed.found["link"].content, external_byte_values());
}

TEST_F(ExternalCopy, AMissingPathIsNotFoundNamingIt) {
  Collect out;
  try {
    driver->copy_out(sandbox, {.path = "/no/such/file"}, out);
    FAIL() << "copy_out of a missing path succeeded";
  } catch (const DriverError& e) {
    EXPECT_EQ(e.kind(), DriverError::Kind::not_found);
    EXPECT_NE(std::string(e.what()).find("/no/such/file"), std::string::npos) << e.what();
  }
  EXPECT_EQ(out.total, 0u);
  // The conversation goes on: the next call on the same process works.
  EXPECT_EQ(driver->stat_path(sandbox, "/").kind, PathInfo::Kind::directory);
}

TEST_F(ExternalCopy, ANameOutsideTheDirectoryIsRefusedAndNothingIsWrittenThere) {
  for (const char* name : {"../escaped", "/escaped", "a/../../escaped"}) {
    PieceSource source(raw_stream(name, "out"));
    EXPECT_THROW(driver->copy_in(sandbox, {.directory = "/"}, source), DriverError) << name;
    EXPECT_FALSE(fs::exists(fs_root.parent_path() / "escaped")) << name;
    EXPECT_FALSE(fs::exists("/escaped")) << name;
  }
  // Nor through a link the stream made first.
  Stream in;
  in.link("up", "..");
  in.file("up/escaped", "out");
  PieceSource source(in.bytes());
  EXPECT_THROW(driver->copy_in(sandbox, {.directory = "/"}, source), DriverError);
  EXPECT_FALSE(fs::exists(fs_root.parent_path() / "escaped"));
}

TEST_F(ExternalCopy, ACutStreamFailsTheCopyIn) {
  Stream in;
  in.file("half", noise(200000));
  std::string bytes = in.bytes();
  PieceSource source(bytes.substr(0, 100000)); // ends inside the file's content
  try {
    driver->copy_in(sandbox, {.directory = "/"}, source);
    FAIL() << "a truncated stream was taken";
  } catch (const DriverError& e) {
    EXPECT_NE(std::string(e.what()).find("copy_in"), std::string::npos) << e.what();
  }
}

TEST_F(ExternalCopy, ADriverThatDiesMidCopyOutIsAnErrorNeverAShortStream) {
  Stream in;
  in.file("big", noise(1u << 20));
  PieceSource source(in.bytes());
  driver->copy_in(sandbox, {.directory = "/"}, source);

  setenv("SANDBOXER_STUB_EXTERNAL_DIE_IN_COPY_OUT", "200000", 1);
  // A new factory: a new process, which sees the variable.
  auto dying_factory = external::make_factory("stub-external", SANDBOXER_STUB_EXTERNAL_PATH);
  auto dying =
      dying_factory->open(dying_factory->parse_spec({{"root", (dir / "root").string()}}), context);
  Collect out;
  try {
    dying->copy_out(sandbox, {.path = "/big"}, out);
    FAIL() << "copy_out succeeded with " << out.total << " bytes";
  } catch (const DriverError& e) {
    EXPECT_NE(std::string(e.what()).find("exited before answering copy_out"), std::string::npos)
        << e.what();
  }
  EXPECT_GT(out.total, 0u) << "chunks arrived before it died";
  EXPECT_LT(out.total, size_t{1} << 20);
}

} // namespace
} // namespace sandboxer

namespace sandboxer {
namespace {

// sandboxer's side against a driver that breaks the copy rules (tests/data/drivers/).
class BadCopy : public ::testing::Test {
protected:
  std::unique_ptr<Driver> open(const char* mode) {
    setenv("BADCOPY_MODE", mode, 1);
    factory =
        external::make_factory("badcopy", SANDBOXER_TEST_DATA "/drivers/sandboxer-driver-badcopy");
    context.data_dir = dir / "data";
    return factory->open(factory->parse_spec(nlohmann::json::object()), context);
  }
  void TearDown() override { unsetenv("BADCOPY_MODE"); }
  std::string copy_out_error(const char* mode) {
    auto driver = open(mode);
    Collect out;
    try {
      driver->copy_out(SandboxHandle{.backend_id = "b"}, {.path = "/x"}, out);
    } catch (const DriverError& e) {
      return e.what();
    }
    return "no error";
  }

  testing::TempDir dir;
  DriverContext context;
  std::unique_ptr<DriverFactory> factory;
};

TEST_F(BadCopy, AnAnswerBeforeTheEndOfTheStreamIsAnError) {
  auto driver = open("early");
  PieceSource source(std::string(1u << 20, 'x'));
  try {
    driver->copy_in(SandboxHandle{.backend_id = "b"}, {.directory = "/"}, source);
    FAIL() << "copy_in succeeded";
  } catch (const DriverError& e) {
    EXPECT_NE(std::string(e.what()).find("answered copy_in before the end of the stream"),
              std::string::npos)
        << e.what();
  }
}

TEST_F(BadCopy, AnErrorMidStreamComesBackAtOnceThoughTheDriverStoppedReading) {
  auto driver = open("refuse");
  PieceSource source(std::string(8u << 20, 'x')); // far more than a pipe holds
  const auto start = std::chrono::steady_clock::now();
  try {
    driver->copy_in(SandboxHandle{.backend_id = "b"}, {.directory = "/"}, source);
    FAIL() << "copy_in succeeded";
  } catch (const DriverError& e) {
    EXPECT_NE(std::string(e.what()).find("no space left on device"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
}

TEST_F(BadCopy, ACountOtherThanWhatArrivedIsACutStream) {
  EXPECT_NE(copy_out_error("miscount").find("the stream was cut short"), std::string::npos);
}

TEST_F(BadCopy, AChunkOverTheBoundOrOfAnotherStreamIsRefused) {
  EXPECT_NE(copy_out_error("oversized").find("a chunk over 65536 bytes"), std::string::npos);
  EXPECT_NE(copy_out_error("stream").find("stream \"stdout\""), std::string::npos);
}

} // namespace
} // namespace sandboxer
