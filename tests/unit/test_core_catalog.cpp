#include <gtest/gtest.h>

#include <sandboxer/error.hpp>

#include "core/errors.hpp"
#include "core/profile/profile.hpp"
#include "support/catalog.hpp"
#include "support/temp_dir.hpp"

namespace sandboxer {
namespace {

TEST(Registry, FindsCompiledInDrivers) {
  EXPECT_EQ(testing::builtin_catalog().find("stub").name(), "stub");
  auto names = testing::builtin_catalog().builtin_names();
  EXPECT_NE(std::find(names.begin(), names.end(), "stub"), names.end());
}

TEST(Registry, UnknownDriverSuggestsTheClosest) {
  try {
    testing::builtin_catalog().find("stbu");
    FAIL();
  } catch (const UsageError& e) {
    EXPECT_STREQ(e.what(), "unknown driver 'stbu', did you mean 'stub'?");
  }
}

TEST(Registry, DriverSchemaErrorsCarryTheYamlLocation) {
  testing::TempDir dir;
  testing::write_file(dir / "p.yaml", "driver: stub\n"
                                      "stub:\n"
                                      "  latency:\n"
                                      "    create: fast\n");
  Profile profile = load_profile(dir / "p.yaml", {});
  try {
    testing::builtin_catalog().check_profile(profile);
    FAIL();
  } catch (const ProfileError& e) {
    EXPECT_EQ(std::string(e.what()), (dir / "p.yaml").string() +
                                         ":4:13: driver.stub.latency.create: invalid latency "
                                         "(use 250ms, 2s, 1m)");
    EXPECT_EQ(e.code(), ExitCode::usage);
  }
}

TEST(Registry, CheckKeysSuggests) {
  try {
    check_keys(nlohmann::json{{"roto", 1}}, {"root", "latency", "fail"});
    FAIL();
  } catch (const SpecError& e) {
    EXPECT_EQ(e.pointer(), "/roto");
    EXPECT_STREQ(e.what(), "unknown key \"roto\", did you mean \"root\"?");
  }
}

} // namespace
} // namespace sandboxer
