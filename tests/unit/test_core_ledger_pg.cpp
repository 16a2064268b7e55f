#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "pg/libpq_connection.hpp"

namespace sandboxer::ledger::pg {
namespace {

TEST(LedgerPg, SqlstatesSayWhatMayBeRetried) {
  EXPECT_EQ(classify_sqlstate("40001"), Failure::retryable);
  EXPECT_EQ(classify_sqlstate("40P01"), Failure::retryable);
  EXPECT_EQ(classify_sqlstate("55P03"), Failure::lock_timeout);
  EXPECT_EQ(classify_sqlstate("57P03"), Failure::unavailable);
  EXPECT_EQ(classify_sqlstate("53300"), Failure::unavailable);
  EXPECT_EQ(classify_sqlstate("08006"), Failure::connection_lost);
  EXPECT_EQ(classify_sqlstate("57P01"), Failure::connection_lost);
  EXPECT_EQ(classify_sqlstate(""), Failure::connection_lost);
  EXPECT_EQ(classify_sqlstate("28P01"), Failure::denied);
  EXPECT_EQ(classify_sqlstate("3D000"), Failure::denied);
  EXPECT_EQ(classify_sqlstate("42501"), Failure::denied);
  EXPECT_EQ(classify_sqlstate("23505"), Failure::statement);
  EXPECT_EQ(classify_sqlstate("42P01"), Failure::statement);
}

// A loopback port nothing listens on: bound, then closed.
int closed_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  ::close(fd);
  return ntohs(address.sin_port);
}

TEST(LedgerPg, NoServerIsUnavailableNamingTheLedger) {
  const std::string url =
      "postgresql://sandboxer@127.0.0.1:" + std::to_string(closed_port()) + "/ledger";
  try {
    LibpqConnection connection({.url = url, .password = "pw-never-shown", .where = url});
    connection.query("SELECT 1");
    FAIL() << "connected to nothing";
  } catch (const PgError& e) {
    EXPECT_EQ(e.failure(), Failure::unavailable);
    EXPECT_NE(std::string(e.what()).find(url), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find("pw-never-shown"), std::string::npos) << e.what();
  }
}

} // namespace
} // namespace sandboxer::ledger::pg
