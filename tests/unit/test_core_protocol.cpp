// The driver protocol's framing and message reading (sdk/protocol/): what sandboxer makes of each
// line an external driver writes.
#include <atomic>
#include <gtest/gtest.h>
#include <thread>

#include <sandboxer/base64.hpp>

#include "sdk/copy_streams.hpp"
#include "sdk/protocol/protocol.hpp"

namespace sandboxer::protocol {
namespace {

TEST(LineBuffer, SplitsLinesCutAnywhere) {
  LineBuffer lines;
  lines.feed("{\"a\":1}\n{\"b\"");
  std::string line;
  ASSERT_TRUE(lines.next(line));
  EXPECT_EQ(line, "{\"a\":1}");
  EXPECT_FALSE(lines.next(line));
  lines.feed(":2}\r\n");
  ASSERT_TRUE(lines.next(line));
  EXPECT_EQ(line, "{\"b\":2}");
  lines.feed("tail");
  EXPECT_EQ(lines.rest(), "tail");
}

TEST(ReadMessage, ResultErrorOutputAndWhatIsIgnored) {
  auto result = read_message(R"({"jsonrpc":"2.0","id":3,"result":{"exit_code":7}})", 3);
  EXPECT_EQ(result.type, Message::Type::result);
  EXPECT_EQ(result.value["exit_code"], 7);

  auto error = read_message(
      R"({"jsonrpc":"2.0","id":3,"error":{"code":-32000,"message":"bad","data":{"kind":"invalid_spec","pointer":"/root"}}})",
      3);
  EXPECT_EQ(error.type, Message::Type::error);
  EXPECT_EQ(error.kind, DriverError::Kind::invalid_spec);
  EXPECT_EQ(error.pointer, "/root");
  EXPECT_EQ(error.message, "bad");

  EXPECT_EQ(
      read_message(R"({"jsonrpc":"2.0","id":3,"error":{"code":-32601,"message":"no"}})", 3).kind,
      DriverError::Kind::unsupported);
  EXPECT_EQ(
      read_message(
          R"({"jsonrpc":"2.0","id":3,"error":{"code":-32000,"message":"x","data":{"kind":"from-the-future"}}})",
          3)
          .kind,
      DriverError::Kind::error);

  auto output = read_message(
      R"({"jsonrpc":"2.0","method":"output","params":{"id":3,"stream":"stderr","data":"aGk="}})",
      3);
  EXPECT_EQ(output.type, Message::Type::output);
  EXPECT_EQ(output.value["stream"], "stderr");

  EXPECT_EQ(read_message(R"({"jsonrpc":"2.0","id":2,"result":{}})", 3).type,
            Message::Type::ignored);
  EXPECT_EQ(read_message(R"({"jsonrpc":"2.0","method":"output","params":{"id":2}})", 3).type,
            Message::Type::ignored);
  EXPECT_EQ(read_message("", 3).type, Message::Type::ignored);
  EXPECT_EQ(read_message("starting up...", 3).type, Message::Type::malformed);
  EXPECT_EQ(read_message("[1,2]", 3).type, Message::Type::malformed);
  EXPECT_EQ(read_message(R"({"jsonrpc":"2.0","id":3})", 3).type, Message::Type::malformed);
}

TEST(Kinds, TheProtocolsNamesMapBothWays) {
  EXPECT_EQ(kind_name(DriverError::Kind::error), "backend");
  EXPECT_EQ(kind_of("backend"), DriverError::Kind::error);
  for (auto kind :
       {DriverError::Kind::unavailable, DriverError::Kind::not_found,
        DriverError::Kind::invalid_spec, DriverError::Kind::unsupported, DriverError::Kind::refused,
        DriverError::Kind::auth, DriverError::Kind::timeout}) {
    EXPECT_EQ(kind_of(kind_name(kind)), kind);
  }
}

TEST(CopyChunks, BoundedBase64BothWays) {
  const std::string full(k_copy_chunk, '\xff');
  auto chunk = input_chunk(9, full);
  EXPECT_EQ(chunk["method"], "input");
  EXPECT_EQ(chunk["params"]["id"], 9);
  EXPECT_EQ(copy_chunk_of(chunk["params"]), full);
  EXPECT_EQ(input_end(9)["params"], nlohmann::json({{"id", 9}, {"eof", true}}));

  // One byte over the bound is refused before it is decoded; so is what is not base64.
  nlohmann::json over = {{"id", 9}, {"data", base64_encode(full + "x")}};
  EXPECT_THROW(copy_chunk_of(over), std::invalid_argument);
  EXPECT_THROW(copy_chunk_of({{"id", 9}, {"data", "not base64!"}}), std::invalid_argument);
  EXPECT_THROW(copy_chunk_of({{"id", 9}}), std::invalid_argument);
  EXPECT_EQ(copy_chunk_of({{"id", 9}, {"data", ""}}), "");
}

TEST(CopyChunks, TheCapabilityIsOptionalAndOwnerNeedsCopy) {
  EXPECT_FALSE(capabilities_of({{"exec", true}}).copy);
  EXPECT_FALSE(capabilities_of({{"copy_owner", true}}).copy_owner);
  Capabilities both = capabilities_of({{"copy", true}, {"copy_owner", true}});
  EXPECT_TRUE(both.copy);
  EXPECT_TRUE(both.copy_owner);
  EXPECT_EQ(capabilities_json(both)["copy"], true);
  EXPECT_EQ(capabilities_of(capabilities_json(Capabilities{})).copy, false);
}

// The SDK's side of copy_in: chunks the stdin thread hands over, read by the driver.
TEST(CopyStreams, ChunksThenTheEndAndOnlyForCopyIds) {
  sdk::CopyStreams streams;
  EXPECT_FALSE(streams.input(4, input_chunk(4, "x")["params"])) << "an exec's stdin";
  streams.open(5);
  EXPECT_TRUE(streams.input(5, input_chunk(5, "hello ")["params"]));
  EXPECT_TRUE(streams.input(5, input_chunk(5, "world")["params"]));
  EXPECT_TRUE(streams.input(5, input_end(5)["params"]));
  char buffer[4];
  std::string got;
  while (size_t n = streams.read(5, buffer, sizeof buffer)) {
    got.append(buffer, n);
  }
  EXPECT_EQ(got, "hello world");
  EXPECT_EQ(streams.drain(5), 11u);
  streams.close(5);
  // A late chunk of a finished copy is dropped, never taken for an exec's.
  EXPECT_TRUE(streams.input(5, input_chunk(5, "late")["params"]));
}

TEST(CopyStreams, TheFeederWaitsWhenFullSoMemoryStaysBounded) {
  sdk::CopyStreams streams;
  streams.open(1);
  std::atomic<int> fed{0};
  std::thread feeder([&] {
    for (int i = 0; i < 10; ++i) {
      streams.input(1, input_chunk(1, std::string(1000, 'a'))["params"]);
      ++fed;
    }
    streams.input(1, input_end(1)["params"]);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(fed.load(), static_cast<int>(sdk::CopyStreams::k_held)) << "held beyond the bound";
  EXPECT_EQ(streams.drain(1), 10'000u);
  feeder.join();
}

TEST(CopyStreams, AStreamWithoutItsEndIsCutNeverShort) {
  sdk::CopyStreams streams;
  streams.open(2);
  streams.input(2, input_chunk(2, "part")["params"]);
  streams.end_all(); // stdin ended before eof
  char buffer[16];
  EXPECT_THROW(streams.read(2, buffer, sizeof buffer), DriverError);
  streams.open(3);
  streams.cancel(3);
  EXPECT_THROW(streams.read(3, buffer, sizeof buffer), DriverError);
  streams.open(6);
  streams.input(6, {{"id", 6}, {"data", "%%%"}});
  EXPECT_THROW(streams.read(6, buffer, sizeof buffer), DriverError);
}

} // namespace
} // namespace sandboxer::protocol
