// The driver protocol's framing and message reading (sdk/protocol/): what sandboxer makes of each
// line an external driver writes.
#include <gtest/gtest.h>

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

} // namespace
} // namespace sandboxer::protocol
