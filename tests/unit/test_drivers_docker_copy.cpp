// The docker driver's native `sandboxer cp` (stat_path, copy_in, copy_out over the engine's archive
// endpoint) against a real Docker Engine and the test image scripts/start-docker.sh builds. What is
// checked is what a user would: the bytes, mode bits, mtimes, owners and link targets in the
// container (read there with exec) and in the stream that comes back.
#include <atomic>
#include <csignal>
#include <cstdlib>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <map>
#include <unistd.h>

#include <sandboxer/driver.hpp>
#include <sandboxer/error.hpp>
#include <sandboxer/http.hpp>
#include <sandboxer/interrupt.hpp>
#include <sandboxer/tar.hpp>

#include "core/sha256.hpp"
#include "drivers/docker/docker_driver.hpp"
#include "sdk/testing.hpp"
#include "tests/support/collect_io.hpp"
#include "tests/support/silent_server.hpp"

namespace sandboxer {
namespace {

using nlohmann::json;

constexpr const char* k_socket = "/var/run/docker.sock";
constexpr const char* k_image = "sandboxer/busybox:local";
constexpr int64_t k_mtime = 1'000'000'000; // 2001-09-09, far from now

class QuietProgress : public Progress {
public:
  void update(std::string_view) override {}
};

// Whether the engine answers and has the test image. Under CI=true its absence is a failure.
bool copy_engine_ready() {
  http::Request request;
  request.url = fmt::format("http://docker/v1.41/images/{}/json", "sandboxer%2Fbusybox%3Alocal");
  request.unix_socket = k_socket;
  request.timeout = std::chrono::seconds(10);
  try {
    return http::curl_transport().send(request).status == 200;
  } catch (const DriverError&) {
    return false;
  }
}

// A tar stream held whole (small test streams only), handed over in pieces of at most `piece`.
class StringSource : public CopySource {
public:
  explicit StringSource(std::string bytes, size_t piece = 1000)
      : m_bytes(std::move(bytes)), m_piece(piece) {}
  size_t read(char* buffer, size_t size) override {
    size_t n = std::min({size, m_piece, m_bytes.size() - m_at});
    std::memcpy(buffer, m_bytes.data() + m_at, n);
    m_at += n;
    return n;
  }

private:
  std::string m_bytes;
  size_t m_piece;
  size_t m_at = 0;
};

// A stream of one file of `size` made-up bytes, made as it is read: what a large copy looks like
// to the driver. Keeps the content's SHA-256 and the most it ever held.
class BigFileSource : public CopySource {
public:
  BigFileSource(std::string name, uint64_t size)
      : m_name(std::move(name)), m_left(size), m_size(size),
        m_writer([this](std::string_view bytes) { m_out.append(bytes); }) {}
  size_t read(char* buffer, size_t size) override {
    if (m_at == m_out.size()) {
      m_out.clear();
      m_at = 0;
      if (!m_begun) {
        m_begun = true;
        m_writer.begin({.path = m_name, .mode = 0640, .mtime = k_mtime, .size = m_size});
      } else if (m_left > 0) {
        std::string chunk(std::min<uint64_t>(m_left, 65536), '\0');
        for (char& c : chunk) {
          m_state ^= m_state << 13;
          m_state ^= m_state >> 7;
          m_state ^= m_state << 17;
          c = static_cast<char>(m_state);
        }
        m_hash.update(chunk);
        m_writer.data(chunk);
        m_left -= chunk.size();
        if (m_left == 0) {
          m_writer.end();
          m_writer.finish();
        }
      }
      most_held = std::max(most_held, m_out.size());
    }
    size_t n = std::min(size, m_out.size() - m_at);
    std::memcpy(buffer, m_out.data() + m_at, n);
    m_at += n;
    return n;
  }
  std::string sha256() { return m_hash.hex(); }
  size_t most_held = 0;

private:
  std::string m_name;
  uint64_t m_left, m_size;
  uint64_t m_state = 0x9e3779b97f4a7c15ULL;
  bool m_begun = false;
  std::string m_out;
  size_t m_at = 0;
  tar::Writer m_writer;
  Sha256 m_hash;
};

// What a copy out handed over, parsed as it arrives: each entry, and each file's content (whole up
// to 1 MiB, else its SHA-256 only).
class EntriesSink : public CopySink, private tar::Sink {
public:
  EntriesSink() : m_reader(*this) {}
  void write(std::string_view bytes) override {
    ++writes;
    most_at_once = std::max(most_at_once, bytes.size());
    m_reader.feed(bytes);
  }
  void finish() { m_reader.finish(); }

  std::map<std::string, tar::Entry> entries;
  std::map<std::string, std::string> content;
  std::map<std::string, std::string> sha256;
  size_t writes = 0;
  size_t most_at_once = 0;

private:
  void begin(const tar::Entry& entry) override {
    m_path = entry.path;
    entries[m_path] = entry;
    content[m_path].clear();
    m_hash = std::make_unique<Sha256>();
  }
  void data(std::string_view chunk) override {
    m_hash->update(chunk);
    if (content[m_path].size() < (1 << 20)) {
      content[m_path].append(chunk);
    }
  }
  void end() override { sha256[m_path] = m_hash->hex(); }

  tar::Reader m_reader;
  std::string m_path;
  std::unique_ptr<Sha256> m_hash;
};

std::string all_byte_values() {
  std::string bytes;
  for (int i = 0; i < 256; ++i) {
    bytes += static_cast<char>(i);
  }
  return bytes;
}

// A small tree as a tar stream, every entry owned by uid:gid.
struct TreeEntry {
  std::string path;
  tar::Type type;
  uint32_t mode;
  std::string content_or_link;
};
std::string tree_stream(const std::vector<TreeEntry>& tree, int64_t uid = 4242,
                        int64_t gid = 4343) {
  std::string out;
  tar::Writer writer([&](std::string_view bytes) { out.append(bytes); });
  for (const auto& item : tree) {
    tar::Entry entry{.path = item.path, .type = item.type, .mode = item.mode, .mtime = k_mtime};
    entry.uid = uid;
    entry.gid = gid;
    if (item.type == tar::Type::file) {
      entry.size = item.content_or_link.size();
    } else if (item.type == tar::Type::symlink) {
      entry.link = item.content_or_link;
    }
    writer.begin(entry);
    if (item.type == tar::Type::file) {
      writer.data(item.content_or_link);
    }
    writer.end();
  }
  writer.finish();
  return out;
}

const std::string k_odd_name =
    "with spaces and UTF-8 \xc3\xa9t\xc3\xa9 \xd1\x84\xd0\xb0\xd0\xb9\xd0\xbb";

std::vector<TreeEntry> sample_tree() {
  return {
      {"tree", tar::Type::directory, 0750, ""},
      {"tree/all-bytes", tar::Type::file, 0644, all_byte_values()},
      {"tree/empty", tar::Type::file, 0600, ""},
      {"tree/empty-dir", tar::Type::directory, 0700, ""},
      {"tree/run.sh", tar::Type::file, 0755, "#!/bin/sh\necho ran\n"},
      {"tree/link", tar::Type::symlink, 0777, "all-bytes"},
      {"tree/" + k_odd_name, tar::Type::file, 0640, "odd\n"},
  };
}

class DockerCopy : public ::testing::Test {
protected:
  void SetUp() override {
    if (!copy_engine_ready()) {
      const char* ci = std::getenv("CI");
      if (ci && std::string(ci) == "true") {
        FAIL() << "no Docker Engine with " << k_image << " on " << k_socket
               << " (CI=true: scripts/start-docker.sh)";
      }
      GTEST_SKIP() << "no Docker Engine with " << k_image << " on " << k_socket;
    }
    interrupt::reset_for_tests();
  }
  void TearDown() override {
    interrupt::reset_for_tests();
    for (auto& sandbox : m_made) {
      try {
        sandbox.stop_grace = std::chrono::seconds(0);
        m_driver->destroy(sandbox);
      } catch (const DriverError& e) {
        if (e.kind() != DriverError::Kind::not_found) { // a test may remove its container
          ADD_FAILURE() << "destroy " << sandbox.sandbox_id << ": " << e.what();
        }
      } catch (const std::exception& e) {
        ADD_FAILURE() << "destroy " << sandbox.sandbox_id << ": " << e.what();
      }
    }
  }

  // A running container of the test image; `user`: its configured user.
  SandboxHandle make(std::optional<std::string> user = std::nullopt) {
    json section = {{"image", k_image},
                    {"pull", "never"},
                    {"host", fmt::format("unix://{}", k_socket)},
                    {"command", {"sleep", "3600"}}};
    if (user) {
      section["user"] = *user;
    }
    const auto& factory = drivers::docker::docker_factory();
    json spec = factory.parse_spec(section);
    DriverContext context;
    context.progress = &m_progress;
    context.data_dir = std::filesystem::temp_directory_path();
    m_driver = drivers::docker::open_docker_driver(spec, context, http::curl_transport());
    static std::atomic<int> counter{0};
    std::string id = fmt::format("sbx-cptest-{}-{}", getpid(), counter++);
    CreateRequest request{.sandbox_id = id, .name = id};
    auto result = m_driver->create(request);
    SandboxHandle sandbox{id, result.backend_id, spec, result.info};
    m_made.push_back(sandbox);
    return sandbox;
  }

  // A shell command's stdout in the container, as root; fails the test on a non-zero status.
  std::string run(const SandboxHandle& sandbox, const std::string& script) {
    testing::CollectIo io;
    ExecRequest request{.argv = {"sh", "-c", script}};
    request.user = "0";
    int status = m_driver->exec(sandbox, request, io);
    EXPECT_EQ(status, 0) << script << ": " << io.stderr_text;
    return io.stdout_text;
  }

  Driver& driver() { return *m_driver; }

private:
  QuietProgress m_progress;
  std::unique_ptr<Driver> m_driver;
  std::vector<SandboxHandle> m_made;
};

TEST_F(DockerCopy, ATreeGoesInWithItsBytesModesTimesAndLinksAndComesBackTheSame) {
  auto sandbox = make();
  StringSource source(tree_stream(sample_tree()), 777); // pieces that split headers
  driver().copy_in(sandbox, {.directory = "/tmp"}, source);

  // In the container, as stat(1) and sha256sum(1) see it.
  EXPECT_EQ(run(sandbox, "cd /tmp/tree && stat -c '%n %a %Y' all-bytes empty empty-dir run.sh . "
                         "&& stat -c '%s' all-bytes empty && readlink link && ./run.sh && "
                         "sha256sum < all-bytes && cat \"" +
                             k_odd_name + "\""),
            fmt::format("all-bytes 644 {0}\nempty 600 {0}\nempty-dir 700 {0}\nrun.sh 755 {0}\n"
                        ". 750 {0}\n256\n0\nall-bytes\nran\n{1}  -\nodd\n",
                        k_mtime, sha256_hex(all_byte_values())));

  EntriesSink sink;
  driver().copy_out(sandbox, {.path = "/tmp/tree"}, sink);
  sink.finish();
  for (const auto& item : sample_tree()) {
    ASSERT_TRUE(sink.entries.count(item.path)) << item.path;
    const auto& entry = sink.entries[item.path];
    EXPECT_EQ(entry.type, item.type) << item.path;
    EXPECT_EQ(entry.mtime, k_mtime) << item.path;
    if (item.type == tar::Type::symlink) {
      EXPECT_EQ(entry.link, item.content_or_link);
    } else {
      EXPECT_EQ(entry.mode, item.mode) << item.path;
    }
    if (item.type == tar::Type::file) {
      EXPECT_EQ(sink.content[item.path], item.content_or_link) << item.path;
    }
  }
  EXPECT_EQ(sink.entries.size(), sample_tree().size());
}

TEST_F(DockerCopy, FiftyMiBStreamInAndOutInPieces) {
  auto sandbox = make();
  constexpr uint64_t size = 50ull << 20;
  BigFileSource source("big.bin", size);
  auto started = std::chrono::steady_clock::now();
  driver().copy_in(sandbox, {.directory = "/tmp"}, source);
  auto in_done = std::chrono::steady_clock::now();
  const std::string digest = source.sha256();
  EXPECT_EQ(run(sandbox, "sha256sum < /tmp/big.bin && stat -c '%s %a' /tmp/big.bin"),
            fmt::format("{}  -\n{} 640\n", digest, size));

  EntriesSink sink;
  auto out_started = std::chrono::steady_clock::now();
  driver().copy_out(sandbox, {.path = "/tmp/big.bin"}, sink);
  sink.finish();
  auto out_done = std::chrono::steady_clock::now();
  EXPECT_EQ(sink.entries["big.bin"].size, size);
  EXPECT_EQ(sink.sha256["big.bin"], digest);
  // Streamed both ways: never the file whole at once.
  EXPECT_LT(source.most_held, 1u << 20);
  EXPECT_GT(sink.writes, 50u);
  EXPECT_LT(sink.most_at_once, 1u << 20);
  auto ms = [](auto d) { return std::chrono::duration_cast<std::chrono::milliseconds>(d).count(); };
  std::cout << fmt::format("[ measure  ] 50 MiB in: {} ms, out: {} ms ({} writes)\n",
                           ms(in_done - started), ms(out_done - out_started), sink.writes);
}

TEST_F(DockerCopy, WithoutAnOwnerFilesAreTheDefaultUsersWithOneTheOwners) {
  auto root_default = make();
  StringSource plain(tree_stream(sample_tree(), 4242, 4343));
  driver().copy_in(root_default, {.directory = "/tmp"}, plain);
  EXPECT_EQ(run(root_default, "stat -c '%u:%g' /tmp/tree /tmp/tree/all-bytes /tmp/tree/link"),
            "0:0\n0:0\n0:0\n");

  StringSource owned(tree_stream(sample_tree(), 1234, 4321));
  driver().copy_in(root_default, {.directory = "/root", .owner = "1234:4321"}, owned);
  EXPECT_EQ(run(root_default, "stat -c '%u:%g' /root/tree /root/tree/all-bytes /root/tree/link"),
            "1234:4321\n1234:4321\n1234:4321\n");

  // A container whose configured user is nobody: what exec would make is nobody's.
  auto as_nobody = make("nobody");
  StringSource again(tree_stream(sample_tree(), 4242, 4343));
  driver().copy_in(as_nobody, {.directory = "/tmp"}, again);
  EXPECT_EQ(run(as_nobody, "stat -c '%u:%g' /tmp/tree /tmp/tree/all-bytes"),
            "65534:65534\n65534:65534\n");
}

TEST_F(DockerCopy, StatFollowsLinksAsStatDoes) {
  auto sandbox = make();
  run(sandbox, "mkdir -p /tmp/s/dir && printf 12345 > /tmp/s/file && chmod 4751 /tmp/s/file && "
               "ln -s file /tmp/s/to-file && ln -s /tmp/s/dir /tmp/s/to-dir && "
               "ln -s to-file /tmp/s/chain && ln -s nowhere /tmp/s/dangling && mkfifo /tmp/s/fifo");
  auto file = driver().stat_path(sandbox, "/tmp/s/file");
  EXPECT_EQ(file.kind, PathInfo::Kind::file);
  EXPECT_EQ(file.size, 5u);
  EXPECT_EQ(file.mode, 04751u);
  EXPECT_EQ(driver().stat_path(sandbox, "/tmp/s/dir").kind, PathInfo::Kind::directory);
  auto to_file = driver().stat_path(sandbox, "/tmp/s/to-file");
  EXPECT_EQ(to_file.kind, PathInfo::Kind::file);
  EXPECT_EQ(to_file.size, 5u);
  EXPECT_EQ(driver().stat_path(sandbox, "/tmp/s/chain").kind, PathInfo::Kind::file);
  EXPECT_EQ(driver().stat_path(sandbox, "/tmp/s/to-dir").kind, PathInfo::Kind::directory);
  auto dangling = driver().stat_path(sandbox, "/tmp/s/dangling");
  EXPECT_EQ(dangling.kind, PathInfo::Kind::symlink);
  EXPECT_EQ(dangling.link_target, "/tmp/s/nowhere");
  EXPECT_EQ(driver().stat_path(sandbox, "/tmp/s/fifo").kind, PathInfo::Kind::other);
  EXPECT_EQ(driver().stat_path(sandbox, "/tmp/s/missing").kind, PathInfo::Kind::missing);
  EXPECT_EQ(driver().stat_path(sandbox, "/tmp/s/to-dir/missing").kind, PathInfo::Kind::missing);
}

TEST_F(DockerCopy, AMissingPathIsNotFoundNamingIt) {
  auto sandbox = make();
  EntriesSink sink;
  try {
    driver().copy_out(sandbox, {.path = "/tmp/no such file"}, sink);
    FAIL() << "copy_out of a missing path succeeded";
  } catch (const DriverError& e) {
    EXPECT_EQ(e.kind(), DriverError::Kind::not_found);
    EXPECT_NE(std::string(e.what()).find("/tmp/no such file"), std::string::npos) << e.what();
  }
  StringSource source(tree_stream(sample_tree()));
  try {
    driver().copy_in(sandbox, {.directory = "/no/such/dir"}, source);
    FAIL() << "copy_in into a missing directory succeeded";
  } catch (const DriverError& e) {
    EXPECT_EQ(e.kind(), DriverError::Kind::not_found);
    EXPECT_NE(std::string(e.what()).find("/no/such/dir"), std::string::npos) << e.what();
  }
}

TEST_F(DockerCopy, FollowCopiesWhatLinksPointToAndWithoutItTheLinks) {
  auto sandbox = make();
  run(sandbox, "mkdir -p /tmp/f/sub /tmp/elsewhere && printf target > /tmp/elsewhere/t && "
               "chmod 751 /tmp/elsewhere/t && ln -s /tmp/elsewhere/t /tmp/f/sub/link && "
               "ln -s /tmp/f /tmp/to-f");
  EntriesSink links;
  driver().copy_out(sandbox, {.path = "/tmp/f"}, links);
  links.finish();
  EXPECT_EQ(links.entries["f/sub/link"].type, tar::Type::symlink);
  EXPECT_EQ(links.entries["f/sub/link"].link, "/tmp/elsewhere/t");

  EntriesSink followed;
  driver().copy_out(sandbox, {.path = "/tmp/to-f", .follow = true}, followed);
  followed.finish();
  ASSERT_TRUE(followed.entries.count("to-f/sub/link"));
  EXPECT_EQ(followed.entries["to-f"].type, tar::Type::directory);
  EXPECT_EQ(followed.entries["to-f/sub/link"].type, tar::Type::file);
  EXPECT_EQ(followed.entries["to-f/sub/link"].mode, 0751u);
  EXPECT_EQ(followed.content["to-f/sub/link"], "target");

  EntriesSink plain_file;
  driver().copy_out(sandbox, {.path = "/tmp/elsewhere/t", .follow = true}, plain_file);
  plain_file.finish();
  EXPECT_EQ(plain_file.content["t"], "target");
}

TEST_F(DockerCopy, AStoppedContainerStillCopiesButFollowSaysItMustRun) {
  auto sandbox = make();
  StringSource source(tree_stream(sample_tree()));
  driver().copy_in(sandbox, {.directory = "/tmp"}, source);
  ASSERT_EQ(std::system(fmt::format("docker stop -t 0 {} >/dev/null", sandbox.backend_id).c_str()),
            0);
  EXPECT_EQ(driver().stat_path(sandbox, "/tmp/tree/link").kind, PathInfo::Kind::file);
  EntriesSink sink;
  driver().copy_out(sandbox, {.path = "/tmp/tree/all-bytes"}, sink);
  sink.finish();
  EXPECT_EQ(sink.content["all-bytes"], all_byte_values());
  EntriesSink followed;
  try {
    driver().copy_out(sandbox, {.path = "/tmp/tree", .follow = true}, followed);
    FAIL() << "copy_out --follow of a stopped container succeeded";
  } catch (const DriverError& e) {
    EXPECT_NE(std::string(e.what()).find("is not running"), std::string::npos) << e.what();
  }
}

TEST_F(DockerCopy, AContainerThatIsGoneIsNotFound) {
  auto sandbox = make();
  ASSERT_EQ(std::system(fmt::format("docker rm -f {} >/dev/null", sandbox.backend_id).c_str()), 0);
  EntriesSink sink;
  StringSource source(tree_stream(sample_tree()));
  for (auto attempt : {0, 1, 2}) {
    try {
      if (attempt == 0) {
        driver().stat_path(sandbox, "/tmp");
      } else if (attempt == 1) {
        driver().copy_out(sandbox, {.path = "/tmp"}, sink);
      } else {
        driver().copy_in(sandbox, {.directory = "/tmp"}, source);
      }
      ADD_FAILURE() << "call " << attempt << " on a removed container succeeded";
    } catch (const DriverError& e) {
      EXPECT_EQ(e.kind(), DriverError::Kind::not_found) << e.what();
      EXPECT_NE(std::string(e.what()).find("is gone"), std::string::npos) << e.what();
    }
  }
}

// A signal stops a copy in either direction: the error is Interrupted, never a short stream.
TEST_F(DockerCopy, ASignalStopsACopyEitherWay) {
  auto sandbox = make();
  class SignallingSource : public BigFileSource {
  public:
    using BigFileSource::BigFileSource;
    size_t read(char* buffer, size_t size) override {
      if ((m_read += size) > (8u << 20)) {
        interrupt::simulate(SIGINT);
        interrupt::check();
      }
      return BigFileSource::read(buffer, size);
    }

  private:
    uint64_t m_read = 0;
  } source("stopped.bin", 50ull << 20);
  EXPECT_THROW(driver().copy_in(sandbox, {.directory = "/tmp"}, source), Interrupted);
  interrupt::reset_for_tests();

  BigFileSource big("big.bin", 20ull << 20);
  driver().copy_in(sandbox, {.directory = "/tmp"}, big);
  class SignallingSink : public CopySink {
  public:
    void write(std::string_view bytes) override {
      if ((m_seen += bytes.size()) > (1u << 20)) {
        interrupt::simulate(SIGINT); // as a Ctrl-C would, seen at curl's next progress call
      }
    }

  private:
    uint64_t m_seen = 0;
  } sink;
  EXPECT_THROW(driver().copy_out(sandbox, {.path = "/tmp/big.bin"}, sink), Interrupted);
}

// What the driver asks of the transport for a copy, without an engine: streamed bodies both ways,
// each with a stall limit and a long overall deadline, and the ownership query per the container's
// configured user.
class ArchiveTransport : public http::Transport {
public:
  http::Response send(const http::Request& request) override {
    sent.push_back(request);
    http::Response response;
    response.status = 200;
    if (request.url.find("/json") != std::string::npos) {
      response.body = json{{"Config", {{"User", user}}}, {"State", {{"Running", true}}}}.dump();
    } else if (request.method == "PUT") {
      EXPECT_TRUE(request.body.empty());
      char buffer[1000];
      while (size_t n = request.body_source(buffer, sizeof buffer)) {
        uploaded.append(buffer, n);
      }
    } else if (request.method == "GET") {
      for (size_t at = 0; at < download.size(); at += 100) {
        request.on_body(std::string_view(download).substr(at, 100));
      }
    }
    return response;
  }
  std::string user;
  std::string uploaded, download;
  std::vector<http::Request> sent;
};

TEST(DockerCopyCalls, EachTransferStreamsWithAStallLimitAndTheOwnerQueryFitsTheUser) {
  ArchiveTransport transport;
  QuietProgress progress;
  DriverContext context;
  context.progress = &progress;
  const auto& factory = drivers::docker::docker_factory();
  auto driver = drivers::docker::open_docker_driver(
      factory.parse_spec({{"image", "x"}, {"host", "unix:///fake/docker.sock"}}), context,
      transport);
  SandboxHandle sandbox{"sbx-abc", "c1", json::object(), json::object()};
  const std::string stream = tree_stream(sample_tree(), 4242, 4343);

  StringSource source(stream);
  driver->copy_in(sandbox, {.directory = "/tmp/a b"}, source);
  ASSERT_EQ(transport.sent.size(), 2u);
  const auto& put = transport.sent[1];
  EXPECT_EQ(put.url, "http://docker/v1.41/containers/c1/archive?path=%2Ftmp%2Fa%20b&"
                     "noOverwriteDirNonDir=true");
  EXPECT_EQ(put.stall_timeout, std::chrono::seconds(60));
  EXPECT_GE(put.timeout, std::chrono::hours(1));
  // No configured user: the same entries, each root's.
  EntriesSink unpacked;
  unpacked.write(transport.uploaded);
  unpacked.finish();
  EXPECT_EQ(unpacked.entries.size(), sample_tree().size());
  for (const auto& [path, entry] : unpacked.entries) {
    EXPECT_EQ(entry.uid, 0) << path;
    EXPECT_EQ(entry.gid, 0) << path;
  }
  EXPECT_EQ(unpacked.content["tree/all-bytes"], all_byte_values());

  transport.user = "nobody";
  transport.uploaded.clear();
  StringSource again(stream);
  driver->copy_in(sandbox, {.directory = "/tmp"}, again);
  EXPECT_NE(transport.sent.back().url.find("&copyUIDGID=1"), std::string::npos);
  EXPECT_EQ(transport.uploaded, stream); // the engine owns it by the user: sent as it was

  transport.uploaded.clear();
  StringSource owned(stream);
  const size_t before = transport.sent.size();
  driver->copy_in(sandbox, {.directory = "/tmp", .owner = "4242:4343"}, owned);
  EXPECT_EQ(transport.sent.size(), before + 1); // no inspect: the stream says it all
  EXPECT_EQ(transport.sent.back().url.find("copyUIDGID"), std::string::npos);
  EXPECT_EQ(transport.uploaded, stream);

  transport.download = stream;
  EntriesSink sink;
  driver->copy_out(sandbox, {.path = "/tmp/tree"}, sink);
  sink.finish();
  EXPECT_EQ(transport.sent.back().stall_timeout, std::chrono::seconds(60));
  EXPECT_EQ(sink.content["tree/all-bytes"], all_byte_values());
  EXPECT_GT(sink.writes, 10u);
}

// The transport under the archive calls: a stream that stops moving ends, and what a body source
// throws comes out of send() (not through libcurl's C frames).
TEST(CurlStream, AnUploadThatStallsTimesOut) {
  testing::TempDir dir;
  testing::SilentServer server(dir / "stalled.sock");
  http::Request request;
  request.method = "PUT";
  request.url = "http://docker/v1.41/containers/c1/archive?path=/tmp";
  request.unix_socket = (dir / "stalled.sock").string();
  request.timeout = std::chrono::hours(1);
  request.stall_timeout = std::chrono::seconds(1);
  uint64_t offered = 0;
  request.body_source = [&](char* buffer, size_t size) {
    std::memset(buffer, 'x', size);
    offered += size;
    return size;
  };
  auto started = std::chrono::steady_clock::now();
  try {
    http::curl_transport().send(request);
    FAIL() << "a stalled upload succeeded";
  } catch (const DriverError& e) {
    EXPECT_EQ(e.kind(), DriverError::Kind::timeout) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(15));
  EXPECT_GT(offered, 0u);
}

TEST(CurlStream, WhatABodySourceThrowsComesOutOfSend) {
  testing::TempDir dir;
  testing::SilentServer server(dir / "any.sock");
  http::Request request;
  request.method = "PUT";
  request.url = "http://docker/v1.41/containers/c1/archive?path=/tmp";
  request.unix_socket = (dir / "any.sock").string();
  request.timeout = std::chrono::seconds(30);
  request.body_source = [](char*, size_t) -> size_t {
    throw std::runtime_error("the local file went away");
  };
  try {
    http::curl_transport().send(request);
    FAIL() << "send succeeded";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "the local file went away");
  }
}

} // namespace
} // namespace sandboxer
