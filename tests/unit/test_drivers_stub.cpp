#include <gtest/gtest.h>

#include <sandboxer/error.hpp>

#include "support/catalog.hpp"
#include "support/temp_dir.hpp"

namespace sandboxer {
namespace {

class StubDriverTest : public ::testing::Test {
protected:
  std::unique_ptr<Driver> open(nlohmann::json section) {
    const auto& factory = testing::builtin_catalog().find("stub");
    auto spec = factory.parse_spec(section);
    DriverContext context;
    context.data_dir = dir.path();
    return factory.open(spec, context);
  }
  testing::TempDir dir;
};

TEST_F(StubDriverTest, SpecIsNormalizedAndStrict) {
  const auto& factory = testing::builtin_catalog().find("stub");
  auto spec = factory.parse_spec({{"latency", {{"create", "2s"}}}, {"fail", {{"exec", "always"}}}});
  EXPECT_EQ(spec["latency"]["create"], "2000ms");
  EXPECT_EQ(spec["fail"]["exec"], "always");
  EXPECT_THROW(factory.parse_spec({{"fail", {{"create", 0}}}}), SpecError);
  EXPECT_THROW(factory.parse_spec({{"latency", {{"boot", "1s"}}}}), SpecError);
  EXPECT_THROW(factory.parse_spec({{"root", 3}}), SpecError);
}

TEST_F(StubDriverTest, TheNthCallFailsAcrossDriverInstances) {
  nlohmann::json section = {{"fail", {{"create", 2}}}};
  EXPECT_NO_THROW(open(section)->create({.sandbox_id = "sbx-1"}));
  try {
    open(section)->create({.sandbox_id = "sbx-2"});
    FAIL();
  } catch (const DriverError& e) {
    EXPECT_STREQ(e.what(), "stub: injected failure of create (call #2)");
  }
  EXPECT_NO_THROW(open(section)->create({.sandbox_id = "sbx-3"}));
}

TEST_F(StubDriverTest, ListRemoteFiltersByLabels) {
  auto driver = open(nlohmann::json::object());
  driver->create({.sandbox_id = "sbx-a", .labels = {{"sandboxer.ledger", "L1"}}});
  driver->create({.sandbox_id = "sbx-b", .labels = {{"sandboxer.ledger", "L2"}}});
  auto found = driver->list_remote({{"sandboxer.ledger", "L1"}});
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].backend_id, "sbx-a");
}

TEST_F(StubDriverTest, DestroyOfAMissingSandboxIsNotFound) {
  auto driver = open(nlohmann::json::object());
  try {
    driver->destroy({.sandbox_id = "sbx-x", .backend_id = "sbx-x"});
    FAIL();
  } catch (const DriverError& e) {
    EXPECT_EQ(e.kind(), DriverError::Kind::not_found);
  }
  SandboxHandle escape{.sandbox_id = "x", .backend_id = "../x"};
  EXPECT_THROW(driver->destroy(escape), DriverError);
}

} // namespace
} // namespace sandboxer
