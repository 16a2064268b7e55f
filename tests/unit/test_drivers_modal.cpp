// The modal driver's parts that need no server: its spec, the server URL rules, the token checks
// done before the gRPC module is loaded, and how Modal's log items become lines. The driver
// against tests/fake_modal is tests/e2e/test_modal*.sh.
#include <cstdlib>
#include <gtest/gtest.h>

#include <sandboxer/error.hpp>

#include "drivers/modal/log_lines.hpp"
#include "drivers/modal/modal_factory.hpp"
#include "drivers/modal/spec.hpp"

namespace sandboxer::drivers::modal {
namespace {

using nlohmann::json;

std::string error_of(const json& section) {
  try {
    parse_spec(section);
  } catch (const SpecError& e) {
    return e.pointer() + ": " + e.what();
  }
  return "accepted";
}

TEST(ModalSpec, FillsDefaultsAndRoundTrips) {
  Spec spec = parse_spec({{"image", "debian:12"}});
  EXPECT_EQ(spec.app, "sandboxer");
  EXPECT_EQ(spec.network, "blocked"); // open network is the user's explicit choice
  EXPECT_EQ(spec.command, (std::vector<std::string>{"sleep", "infinity"}));
  EXPECT_FALSE(spec.timeout);
  EXPECT_EQ(spec.snapshot_ttl, std::chrono::seconds(30 * 86400));
  EXPECT_EQ(spec.attempts, 3);
  json stored = to_json(spec);
  EXPECT_EQ(to_json(parse_spec(stored)), stored);
}

TEST(ModalSpec, ReadsEveryField) {
  Spec spec = parse_spec({{"image", "im-abc"},
                          {"app", "ci"},
                          {"environment", "dev"},
                          {"cpu", 0.5},
                          {"memory", "2g"},
                          {"timeout", "2h"},
                          {"idle_timeout", "10m"},
                          {"workdir", "/app"},
                          {"command", {"sleep", "3600"}},
                          {"network", {"10.0.0.0/8"}},
                          {"tags", {{"team", "infra"}}},
                          {"server_url", "http://127.0.0.1:5000/"},
                          {"snapshot_ttl", "never"},
                          {"legacy_exec", true},
                          {"attempts", 5}});
  EXPECT_EQ(*spec.milli_cpu, 500);
  EXPECT_EQ(*spec.memory_mb, 2048);
  EXPECT_EQ(*spec.timeout, std::chrono::hours(2));
  EXPECT_EQ(*spec.idle_timeout, std::chrono::minutes(10));
  EXPECT_EQ(spec.network, "allowlist");
  EXPECT_EQ(spec.allowed_cidrs, std::vector<std::string>{"10.0.0.0/8"});
  EXPECT_EQ(*spec.server_url, "http://127.0.0.1:5000");
  EXPECT_FALSE(spec.snapshot_ttl);
  EXPECT_TRUE(is_image_id(spec.image));
  EXPECT_FALSE(is_image_id("debian:12"));
  json stored = to_json(spec);
  EXPECT_EQ(to_json(parse_spec(stored)), stored);
  EXPECT_EQ(stored["network"], json::array({"10.0.0.0/8"}));
}

TEST(ModalSpec, RefusesWhatModalWouldNot) {
  EXPECT_EQ(error_of({{"image", "x"}, {"imag", "y"}}).substr(0, 6), "/imag:");
  EXPECT_EQ(error_of(json::object()).substr(0, 7), "/image:");
  EXPECT_EQ(error_of({{"image", "x"}, {"timeout", "25h"}}),
            "/timeout: Modal allows at most 24h, not 1d1h");
  EXPECT_EQ(error_of({{"image", "x"}, {"timeout", "1500ms"}}),
            "/timeout: Modal counts this in whole seconds (write 90s, 15m, 2h)");
  EXPECT_EQ(error_of({{"image", "x"}, {"cpu", 0}}),
            "/cpu: expected a number of cores from 0.125 to 64 (0.5, 2)");
  EXPECT_EQ(error_of({{"image", "x"}, {"memory", "12"}}),
            "/memory: expected a size such as 512m or 4g (or a number of MiB)");
  EXPECT_EQ(error_of({{"image", "x"}, {"workdir", "app"}}),
            "/workdir: expected an absolute path inside the sandbox (/app)");
  EXPECT_EQ(error_of({{"image", "x"}, {"network", "wide"}}),
            "/network: expected blocked, open or a list of CIDRs, not wide");
  EXPECT_EQ(error_of({{"image", "x"}, {"tags", {{"sandboxer.id", "x"}}}}),
            "/tags/sandboxer.id: the \"sandboxer.\" prefix is reserved for the tags sandboxer "
            "sets");
  // A token must never travel in clear beyond this machine.
  EXPECT_EQ(error_of({{"image", "x"}, {"server_url", "http://api.modal.com"}}),
            "/server_url: server_url http://api.modal.com: plain http is allowed only to a "
            "loopback address (a local test server); use https:// so the token is encrypted");
  EXPECT_EQ(error_of({{"image", "x"}, {"server_url", "https://api.modal.com"}}), "accepted");
}

TEST(ModalSpec, ServerUrlFromTheEnvironmentIsCheckedToo) {
  Spec spec = parse_spec({{"image", "x"}});
  ::setenv("MODAL_SERVER_URL", "http://10.1.2.3:443", 1);
  EXPECT_THROW(resolve_server_url(spec), DriverError);
  ::setenv("MODAL_SERVER_URL", "http://127.0.0.1:9/", 1);
  EXPECT_EQ(resolve_server_url(spec), "http://127.0.0.1:9");
  ::unsetenv("MODAL_SERVER_URL");
  EXPECT_EQ(resolve_server_url(spec), "https://api.modal.com:443");
}

TEST(ModalFactory, ChecksTheTokenWithoutShowingIt) {
  const DriverFactory& factory = modal_factory();
  EXPECT_EQ(factory.name(), "modal");
  EXPECT_TRUE(factory.capabilities().snapshot);
  EXPECT_TRUE(factory.capabilities().list_by_label);
  EXPECT_TRUE(factory.capabilities().logs);
  json spec = factory.parse_spec({{"image", "x"}, {"server_url", "http://127.0.0.1:9"}});
  DriverContext context;
  try {
    factory.open(spec, context);
    FAIL() << "opened without a token";
  } catch (const DriverError& e) {
    EXPECT_EQ(e.kind(), DriverError::Kind::invalid_spec);
    EXPECT_NE(std::string(e.what()).find("secrets: {token_id"), std::string::npos);
  }
  context.secrets = {{"token_id", "ak-0123456789"}, {"token_secret", "wrong secret value"}};
  try {
    factory.open(spec, context);
    FAIL() << "opened with a malformed secret";
  } catch (const DriverError& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("secrets.token_secret does not look like a Modal token secret"),
              std::string::npos)
        << what;
    EXPECT_EQ(what.find("wrong secret value"), std::string::npos);
  }
}

// 2026-12-06T20:00:01Z and a quarter, in Modal's two forms.
constexpr std::uint64_t k_ns = 1796587201250000000ULL;
const TimePoint k_second = *parse_time("2026-12-06T20:00:01Z");

LogChunk chunk(std::string data, std::uint64_t ns = k_ns, int fd = k_fd_stdout) {
  return {fd, std::move(data), ns, 0};
}

std::vector<std::string> texts(const std::vector<TimedLine>& lines) {
  std::vector<std::string> out;
  for (const auto& timed : lines) {
    out.push_back(timed.line.stream + ":" + timed.line.text);
  }
  return out;
}

TEST(ModalLogs, DescriptorsAreStreams) {
  EXPECT_EQ(stream_of(k_fd_stdout, k_fd_stdout), "stdout");
  EXPECT_EQ(stream_of(k_fd_stderr, k_fd_stdout), "stderr");
  // An item that names no descriptor is of the stream it came on.
  EXPECT_EQ(stream_of(k_fd_unspecified, k_fd_stderr), "stderr");
  // FILE_DESCRIPTOR_INFO: Modal's own messages, not the sandbox's output.
  EXPECT_EQ(stream_of(3, k_fd_stdout), std::nullopt);
}

TEST(ModalLogs, TimeFromNanosecondsElseSeconds) {
  EXPECT_EQ(nanos_of(chunk("x")), static_cast<std::int64_t>(k_ns));
  EXPECT_EQ(nanos_of({k_fd_stdout, "x", 0, 1796587201.25}), static_cast<std::int64_t>(k_ns));
  EXPECT_EQ(nanos_of({k_fd_stdout, "x", 0, 0}), std::nullopt);
}

TEST(ModalLogs, ChunksAreCutIntoLines) {
  LineCutter cutter;
  // A chunk with two lines and the start of a third; the third ends in the next chunk.
  auto first = cutter.feed("stdout", chunk("one\ntwo\r\nthr"));
  EXPECT_EQ(texts(first), (std::vector<std::string>{"stdout:one", "stdout:two"}));
  ASSERT_TRUE(first[0].line.time);
  EXPECT_EQ(*first[0].line.time, k_second); // to the second
  EXPECT_EQ(first[0].nanos, static_cast<std::int64_t>(k_ns));
  // Another stream's chunk in between does not mix with it.
  EXPECT_EQ(texts(cutter.feed("stderr", chunk("oops\n", k_ns + 5, k_fd_stderr))),
            std::vector<std::string>{"stderr:oops"});
  auto later = cutter.feed("stdout", chunk("ee\n\nfour", k_ns + 2'000'000'000));
  EXPECT_EQ(texts(later), (std::vector<std::string>{"stdout:three", "stdout:"}));
  // A line has the time of the chunk it began in.
  EXPECT_EQ(later[0].nanos, static_cast<std::int64_t>(k_ns));
  EXPECT_EQ(later[1].nanos, static_cast<std::int64_t>(k_ns) + 2'000'000'000);
  // What did not end with a newline comes out at the end, once.
  EXPECT_EQ(texts(cutter.flush()), std::vector<std::string>{"stdout:four"});
  EXPECT_TRUE(cutter.flush().empty());
  // A chunk without a time: the stream's last one.
  auto untimed = cutter.feed("stdout", chunk("five\n", 0));
  EXPECT_EQ(untimed[0].nanos, static_cast<std::int64_t>(k_ns) + 2'000'000'000);
  LineCutter fresh;
  EXPECT_FALSE(fresh.feed("stdout", chunk("six\n", 0))[0].line.time);
}

TEST(ModalLogs, StreamsMergeByTimeThenSinceAndTail) {
  LineCutter cutter;
  std::vector<TimedLine> lines = cutter.feed("stdout", chunk("a\n", k_ns));
  for (auto& line : cutter.feed("stdout", chunk("c\n", k_ns + 3'000'000'000))) {
    lines.push_back(line);
  }
  for (auto& line : cutter.feed("stderr", chunk("b\n", k_ns + 1'000'000'000, k_fd_stderr))) {
    lines.push_back(line);
  }
  auto text_of = [](const std::vector<LogLine>& merged) {
    std::string out;
    for (const auto& line : merged) {
      out += line.text;
    }
    return out;
  };
  EXPECT_EQ(text_of(merge_lines(lines, {})), "abc");
  EXPECT_EQ(text_of(merge_lines(lines, {.tail = 1})), "c");
  EXPECT_EQ(text_of(merge_lines(lines, {.since = k_second + std::chrono::seconds(1)})), "bc");
  EXPECT_EQ(text_of(merge_lines(lines, {.since = k_second + std::chrono::hours(1)})), "");
}

} // namespace
} // namespace sandboxer::drivers::modal
