// complete() on the real command tree with a fake source: one case per rule of
// docs/completion.md, and the value table covering every option of every command.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <gtest/gtest.h>

#include "cli/commands/cli_app.hpp"
#include "cli/commands/cli_values.hpp"
#include "cli/commands/complete.hpp"

using namespace sandboxer::commands;

namespace {

class FakeSource : public CompletionSource {
public:
  GivenOptions given;
  std::vector<Candidate> sandboxes(const GivenOptions& g, bool live_only) override {
    given = g;
    std::vector<Candidate> out = {{"sbx-web", "web"}, {"web", "sbx-web"}};
    if (!live_only) {
      out.push_back({"sbx-kept", "destroyed, holds snapshots"});
    }
    return out;
  }
  std::vector<Candidate> snapshots(const GivenOptions&) override {
    return {{"web:s1", "snp-1"}, {"snp-1", "web:s1"}};
  }
  std::vector<Candidate> profiles(const GivenOptions& g) override {
    given = g;
    return {{"ci", ""}, {"dev", ""}};
  }
  std::vector<Candidate> drivers() override { return {{"docker", ""}, {"stub", ""}}; }
  std::vector<Candidate> schemas() override { return {{"profile", ""}, {"ledger", ""}}; }
};

class CompleteTest : public ::testing::Test {
protected:
  CompleteTest() {
    build_app(app, global, runners, [] { return std::string("sandboxer test"); });
  }

  // The sorted values offered for `words` (the last one being completed).
  std::vector<std::string> values(const std::vector<std::string>& words) {
    last = complete(app, words, source);
    std::vector<std::string> out;
    for (const auto& candidate : last.candidates) {
      out.push_back(candidate.value);
    }
    std::sort(out.begin(), out.end());
    return out;
  }

  bool offers(const std::vector<std::string>& words, const std::string& value) {
    auto got = values(words);
    return std::find(got.begin(), got.end(), value) != got.end();
  }

  CLI::App app;
  GlobalOptions global;
  Runners runners;
  FakeSource source;
  Completions last;
};

using Values = std::vector<std::string>;

TEST_F(CompleteTest, TheFirstWordIsACommandOrHelpNeverAnOption) {
  auto got = values({""});
  EXPECT_TRUE(std::find(got.begin(), got.end(), "create") != got.end());
  EXPECT_TRUE(std::find(got.begin(), got.end(), "help") != got.end());
  EXPECT_TRUE(std::none_of(got.begin(), got.end(), [](auto& v) { return v.starts_with("-"); }));
  EXPECT_EQ(values({"ex"}), (Values{"exec", "extend"}));
}

// Issue 35: an alias runs its command, so it completes as the command does; it is offered only
// for a word that begins no command's own name.
TEST_F(CompleteTest, AliasesCompleteAsTheirCommand) {
  EXPECT_EQ(values({"rm", "--forg"}), (Values{"--forget"}));
  EXPECT_EQ(values({"ls", "--driv"}), (Values{"--driver"}));
  EXPECT_EQ(values({"rm", ""}), (Values{"sbx-web", "web"}));
  EXPECT_EQ(values({"r"}), (Values{"reap", "restore", "resume", "run"}));
  EXPECT_EQ(values({"rm"}), (Values{"rm"}));
  EXPECT_EQ(values({"p"}), (Values{"pause", "pool", "port", "profiles"}));
  EXPECT_EQ(values({"ps"}), (Values{"ps"}));
  EXPECT_EQ(values({"wait", "web", "--for", ""}), (Values{"gone", "running"}));
}

TEST_F(CompleteTest, ADashOffersTheCommandsOptionsAndTheGlobalOnes) {
  EXPECT_EQ(values({"destroy", "--f"}), (Values{"--force", "--forget"}));
  EXPECT_TRUE(offers({"destroy", "--"}, "--state-dir"));
  EXPECT_TRUE(offers({"-"}, "-o"));
  EXPECT_FALSE(offers({"--"}, "-o")); // short names only before a second dash
  // Flags before options that take a value, the command's own before the globals.
  last = complete(app, {"destroy", "--"}, source);
  auto at = [&](const std::string& value) {
    return std::find_if(last.candidates.begin(), last.candidates.end(),
                        [&](const Candidate& c) { return c.value == value; });
  };
  ASSERT_NE(at("--force"), last.candidates.end());
  EXPECT_LT(at("--force"), at("--reason"));
  EXPECT_LT(at("--reason"), at("--state-dir"));
  EXPECT_FALSE(at("--force")->description.empty());
}

TEST_F(CompleteTest, APositionalOffersItsValuesAndNoOptions) {
  EXPECT_EQ(values({"exec", ""}), (Values{"sbx-web", "web"}));               // live only
  EXPECT_EQ(values({"status", ""}), (Values{"sbx-kept", "sbx-web", "web"})); // any resident
  EXPECT_EQ(values({"destroy", "web", ""}), (Values{"sbx-web", "web"}));     // ids take many
  EXPECT_EQ(values({"exec", "web", ""}), Values{});                          // the command: text
  EXPECT_EQ(values({"schema", ""}), (Values{"ledger", "profile"}));
  EXPECT_EQ(values({"completion", ""}), (Values{"bash", "fish", "zsh"}));
  EXPECT_EQ(last.directive, Directive::none);
}

TEST_F(CompleteTest, AnOptionsValueByItsKind) {
  EXPECT_EQ(values({"-o", ""}), (Values{"csv", "json", "table", "wide", "yaml"}));
  EXPECT_EQ(values({"list", "-o", "j"}), (Values{"json"}));
  EXPECT_EQ(values({"create", "--profile", ""}), (Values{"ci", "dev"}));
  EXPECT_EQ(values({"list", "--driver", ""}), (Values{"docker", "stub"}));
  EXPECT_EQ(values({"list", "--state", "r"}), (Values{"resuming", "running"}));
  EXPECT_EQ(values({"list", "--state", ""}).size(), 12u);
  EXPECT_EQ(values({"--log-level", "o"}), (Values{"off"}));
  EXPECT_EQ(values({"restore", "web:"}), (Values{"web:s1"}));
  EXPECT_EQ(values({"create", "--ttl", ""}), Values{}); // a duration: nothing to offer
  EXPECT_EQ(last.directive, Directive::none);
  EXPECT_EQ(values({"usage", "--by", ""}), (Values{"driver", "label:", "owner", "profile"}));
  EXPECT_EQ(last.directive, Directive::none);
  EXPECT_EQ(values({"usage", "--by", "la"}), (Values{"label:"}));
  EXPECT_EQ(last.directive, Directive::nospace) << "label:KEY goes on";
}

TEST_F(CompleteTest, FilesAndDirectoriesAreTheShellsToComplete) {
  values({"--state-dir", ""});
  EXPECT_EQ(last.directive, Directive::dirs);
  values({"reap", "--plan", ""});
  EXPECT_EQ(last.directive, Directive::files);
  values({"create", "-p", "./my"}); // a profile given as a path
  EXPECT_EQ(last.directive, Directive::files);
  EXPECT_TRUE(last.candidates.empty());
}

TEST_F(CompleteTest, AValueAfterEqualsKeepsTheOptionInTheWord) {
  EXPECT_EQ(values({"reap", "--orphans="}), (Values{"--orphans=destroy", "--orphans=report"}));
  EXPECT_EQ(values({"--output=y"}), (Values{"--output=yaml"}));
  EXPECT_EQ(values({"list", "--all="}), Values{}); // a flag takes no value
}

TEST_F(CompleteTest, AnOptionalValueIsTakenOnlyWhenGiven) {
  EXPECT_EQ(values({"reap", "--orphans", ""}), (Values{"destroy", "report"}));
  EXPECT_EQ(values({"reap", "--orphans", "--dry"}), (Values{"--dry-run"}));
}

TEST_F(CompleteTest, OptionValuesAreSkippedWhereverTheyStand) {
  EXPECT_EQ(values({"--state-dir", "/tmp/list", "l"}), (Values{"ledger", "list", "logs"}));
  EXPECT_EQ(values({"--state-dir=/s", "-o", "json", "exec", ""}), (Values{"sbx-web", "web"}));
  EXPECT_EQ(source.given["state-dir"], "/s");
  EXPECT_EQ(source.given["output"], "json");
  EXPECT_EQ(values({"-v", "ext"}), (Values{"extend"})); // a flag skips nothing
  EXPECT_EQ(values({"list", "--profiles-dir", "/p", "--profile", ""}), (Values{"ci", "dev"}));
  EXPECT_EQ(source.given["profiles-dir"], "/p"); // globals after the command count too
}

TEST_F(CompleteTest, NestedCommandsSwitchTheCommand) {
  EXPECT_EQ(values({"profiles", ""}), (Values{"list", "show", "validate"}));
  EXPECT_EQ(values({"profiles", "show", ""}), (Values{"ci", "dev"}));
  EXPECT_EQ(values({"snapshots", ""}), (Values{"rm", "sbx-kept", "sbx-web", "web"}));
  EXPECT_EQ(values({"snapshots", "rm", "web:"}), (Values{"web:s1"}));
  EXPECT_EQ(values({"snapshots", "web", ""}), Values{}); // no command after a positional
  EXPECT_TRUE(offers({"ledger", "verify", "--"}, "--head"));
  EXPECT_FALSE(offers({"ledger", "verify", "--"}, "--idle")); // keep's, not verify's
  EXPECT_EQ(values({"drivers", "test", "-p", "d"}), (Values{"dev"}));
  EXPECT_EQ(values({"events", "flush", "--t"}), (Values{"--timeout"}));
}

TEST_F(CompleteTest, HelpTakesACommand) {
  EXPECT_EQ(values({"help", "ext"}), (Values{"extend"}));
  EXPECT_EQ(values({"help", "extend", ""}), Values{});
}

TEST_F(CompleteTest, NothingAfterDoubleDashOrAnUnknownCommand) {
  EXPECT_EQ(values({"exec", "web", "--", ""}), Values{});
  EXPECT_EQ(values({"exec", "web", "--", "--"}), Values{});
  EXPECT_EQ(values({"frobnicate", ""}), Values{});
  EXPECT_EQ(last.directive, Directive::none);
}

TEST_F(CompleteTest, TheOutputIsOneCandidateALineThenTheDirective) {
  EXPECT_EQ(format_completions({{{"a", "first\tone"}, {"b", ""}}, Directive::nospace}),
            "a\tfirst one\nb\n:nospace\n");
  EXPECT_EQ(format_completions({}), ":none\n");
  EXPECT_EQ(format_completions({{}, Directive::files}), ":files\n");
}

// Every option and positional of every command is in the value table, or a flag: a new option
// must say what it takes, for completion, --help and the man page alike.
void expect_classified(const CLI::App& command) {
  for (const CLI::Option* option : command.get_options()) {
    EXPECT_TRUE(classified_kind(command, *option).has_value())
        << "'" << command_path(command) << "' " << option->get_name()
        << " is not in cli/commands/cli_values.cpp's table";
  }
  for (const CLI::App* nested : command.get_subcommands([](const CLI::App*) { return true; })) {
    expect_classified(*nested);
  }
}

TEST_F(CompleteTest, EveryOptionOfEveryCommandIsClassified) {
  expect_classified(app);
}

TEST_F(CompleteTest, ValueNamesForHelpAndMan) {
  const CLI::App& create = *app.get_subcommand("create");
  EXPECT_EQ(value_name(create, *create.get_option("--ttl")), "DURATION");
  EXPECT_EQ(value_name(create, *create.get_option("--profile")), "PROFILE");
  EXPECT_EQ(value_name(create, *create.get_option("--help")), "");
  const CLI::App& reap = *app.get_subcommand("reap");
  EXPECT_TRUE(value_optional(*reap.get_option("--orphans")));
  EXPECT_FALSE(value_optional(*reap.get_option("--grace")));
  const CLI::App& verify = *app.get_subcommand("ledger")->get_subcommand("verify");
  EXPECT_EQ(command_path(verify), "ledger verify");
  EXPECT_EQ(value_name(verify, *verify.get_option("--head")), "HEAD");
}

} // namespace
