#include <gtest/gtest.h>

#include "pg/keeper_wire.hpp"

using namespace sandboxer::ledger::pg;
using namespace sandboxer::ledger::pg::wire;

namespace {

Rows some_rows() {
  Rows rows;
  rows.columns = {"id", "doc"};
  rows.values = {{"sbx-1", std::string("{\"a\":\0}", 7)}, {"sbx-2", std::nullopt}};
  rows.affected = 2;
  return rows;
}

} // namespace

TEST(KeeperWire, ARequestCrossesWhole) {
  Request request{Call::pipeline,
                  std::chrono::milliseconds(1234),
                  {{"INSERT INTO t VALUES ($1, $2)", {"x", std::nullopt}}, {"COMMIT", {}}}};
  Request back = decode_request(encode(request));
  EXPECT_EQ(back.call, Call::pipeline);
  EXPECT_EQ(back.timeout.count(), 1234);
  ASSERT_EQ(back.statements.size(), 2u);
  EXPECT_EQ(back.statements[0].sql, "INSERT INTO t VALUES ($1, $2)");
  EXPECT_EQ(back.statements[0].params, (std::vector<Param>{"x", std::nullopt}));
  EXPECT_TRUE(back.statements[1].params.empty());
}

TEST(KeeperWire, RowsWithNullsAndZeroBytesCrossWhole) {
  Reply reply;
  reply.results = {some_rows(), Rows{}};
  Reply back = decode_reply(encode(reply));
  ASSERT_FALSE(back.failed);
  ASSERT_EQ(back.results.size(), 2u);
  EXPECT_EQ(back.results[0].columns, some_rows().columns);
  EXPECT_EQ(back.results[0].values, some_rows().values);
  EXPECT_EQ(back.results[0].affected, 2);
  EXPECT_TRUE(back.results[1].values.empty());
}

TEST(KeeperWire, AFailureKeepsItsClassAndState) {
  Reply reply;
  reply.failed = true;
  reply.failure = Failure::retryable;
  reply.sqlstate = "40001";
  reply.message = "ledger x: could not serialize access";
  Reply back = decode_reply(encode(reply));
  EXPECT_TRUE(back.failed);
  EXPECT_EQ(back.failure, Failure::retryable);
  EXPECT_EQ(back.sqlstate, "40001");
  EXPECT_EQ(back.message, reply.message);
}

TEST(KeeperWire, DamagedBodiesAreRefused) {
  const std::string request = encode(Request{Call::query, {}, {{"SELECT 1", {"p"}}}});
  EXPECT_THROW(decode_request(request.substr(0, request.size() - 1)), WireError);
  EXPECT_THROW(decode_request(request + "x"), WireError);
  EXPECT_THROW(decode_request(std::string(1, '\x09') + request.substr(1)), WireError);
  // A query is one statement; server_version none.
  EXPECT_THROW(decode_request(encode(Request{Call::query, {}, {}})), WireError);
  EXPECT_THROW(decode_request(encode(Request{Call::server_version, {}, {{"SELECT 1", {}}}})),
               WireError);
  // A count larger than the bytes that follow could hold is refused before anything is
  // reserved for it.
  EXPECT_THROW(decode_reply(std::string("\0\xff\xff\xff\xff", 5)), WireError);
  EXPECT_THROW(decode_reply(std::string("\1\x09", 2) + std::string(8, '\0')), WireError);
  EXPECT_THROW(decode_reply(std::string("\2", 1)), WireError);
}

TEST(KeeperWire, FramesAnnounceTheirLengthAndHaveALimit) {
  const std::string framed = frame("abc");
  ASSERT_EQ(framed.size(), 7u);
  EXPECT_EQ(frame_length(framed.data()), 3u);
  EXPECT_THROW(frame_length("\x40\x00\x00\x01"), WireError);
}
