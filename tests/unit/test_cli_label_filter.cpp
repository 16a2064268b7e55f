// `--label` selection shared by `list` and `destroy --label` (issue 35), and the event names both
// `events list` listings show.
#include <gtest/gtest.h>

#include <sandboxer/error.hpp>

#include "cli/commands/label_filter.hpp"
#include "core/errors.hpp"
#include "core/events/events.hpp"

namespace sandboxer::commands {
namespace {

TEST(LabelFilter, EveryLabelMustMatch) {
  const auto filter = parse_label_filter({"team=blue", "tier=web"});
  EXPECT_TRUE(matches(filter, {{"team", "blue"}, {"tier", "web"}, {"x", "y"}}));
  EXPECT_FALSE(matches(filter, {{"team", "blue"}, {"tier", "db"}}));
  EXPECT_FALSE(matches(filter, {{"team", "blue"}}));
}

TEST(LabelFilter, AKeyAloneMatchesAnyValueAndAnEmptyValueOnlyItself) {
  EXPECT_TRUE(matches(parse_label_filter({"team"}), {{"team", "red"}}));
  EXPECT_FALSE(matches(parse_label_filter({"team="}), {{"team", "red"}}));
  EXPECT_TRUE(matches(parse_label_filter({"team="}), {{"team", ""}}));
  EXPECT_TRUE(matches(parse_label_filter({}), {}));
}

TEST(LabelFilter, NoKeyIsAUsageError) {
  EXPECT_THROW(parse_label_filter({"=blue"}), UsageError);
  EXPECT_THROW(parse_label_filter({""}), UsageError);
}

TEST(EventNames, TheTypeWithoutItsPrefix) {
  EXPECT_EQ(events::short_event_type("dev.sandboxer.sandbox.exec.started"), "exec.started");
  EXPECT_EQ(events::short_event_type("dev.sandboxer.sandbox.created"), "created");
  EXPECT_EQ(events::short_event_type("com.example.other"), "com.example.other");
}

} // namespace
} // namespace sandboxer::commands
