#include <gtest/gtest.h>

#include <sandboxer/error.hpp>

#include "cli/ledger_select.hpp"
#include "core/errors.hpp"

namespace sandboxer::ledger {
namespace {

std::string refusal(const std::optional<std::string>& flag) {
  try {
    choose_ledger(flag, std::nullopt, std::nullopt, "");
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

TEST(LedgerSelect, NothingSetMeansTheLocalFiles) {
  auto choice = choose_ledger(std::nullopt, std::string(), std::nullopt, "");
  EXPECT_EQ(choice.kind, LedgerChoice::Kind::local);
}

TEST(LedgerSelect, LocalNamedOnTheCommandLineOverridesADatabaseElsewhere) {
  auto choice = choose_ledger(std::string("local"), std::string("postgresql://a@h/db"),
                              std::string("postgresql://b@h/db"), "config.yaml:3");
  EXPECT_EQ(choice.kind, LedgerChoice::Kind::local);
  EXPECT_EQ(choice.source, "--ledger");
}

TEST(LedgerSelect, FlagThenEnvironmentThenConfig) {
  const std::string a = "postgresql://a@h/db", b = "postgres://b@h/db", c = "postgresql:///db";
  EXPECT_EQ(choose_ledger(a, b, c, "config.yaml:3").source, "--ledger");
  EXPECT_EQ(choose_ledger(std::nullopt, b, c, "config.yaml:3").url, b);
  auto from_config = choose_ledger(std::nullopt, std::nullopt, c, "config.yaml:3");
  EXPECT_EQ(from_config.source, "config.yaml:3");
  EXPECT_EQ(from_config.kind, LedgerChoice::Kind::postgresql);
}

TEST(LedgerSelect, APasswordInTheUriIsRefusedWithoutShowingIt) {
  for (const std::string url : {"postgresql://bob:s3cr3t@db.example:5432/ledger",
                                "postgresql://bob@db/ledger?password=s3cr3t",
                                "postgres://db/ledger?sslmode=require&password=s3cr3t",
                                "postgresql://db/ledger?sslkey=/k&sslpassword=s3cr3t"}) {
    SCOPED_TRACE(url);
    EXPECT_TRUE(url_has_password(url));
    const std::string message = refusal(url);
    EXPECT_NE(message.find("holds a password"), std::string::npos) << message;
    EXPECT_EQ(message.find("s3cr3t"), std::string::npos) << message;
  }
  EXPECT_FALSE(url_has_password("postgresql://bob@db/ledger?sslmode=verify-full"));
  EXPECT_FALSE(url_has_password("postgresql:///ledger?host=/run/postgresql"));
}

TEST(LedgerSelect, AnythingElseIsNotALedger) {
  EXPECT_NE(refusal("mysql://bob:s3cr3t@db/x").find("is not a ledger"), std::string::npos);
  EXPECT_EQ(refusal("mysql://bob:s3cr3t@db/x").find("s3cr3t"), std::string::npos);
  EXPECT_NE(refusal("/var/lib/ledger.json").find("--ledger"), std::string::npos);
}

} // namespace
} // namespace sandboxer::ledger
