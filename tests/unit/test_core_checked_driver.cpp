// A driver's answers are checked before the engine sees them (issue 34.2).
#include <gtest/gtest.h>

#include <sandboxer/error.hpp>
#include <sandboxer/log.hpp>

#include "core/ledger/codec.hpp"
#include "core/lifecycle/checked_driver.hpp"
#include "sdk/json/limits.hpp"
#include "sdk/protocol/protocol.hpp"

namespace sandboxer {
namespace {

using json = nlohmann::json;

// Answers whatever the test sets, and counts the destroys it is asked for.
class ScriptedDriver : public Driver {
public:
  CreateResult create_answer;
  int exec_answer = 0;
  std::vector<std::string> destroyed;

  CreateResult create(const CreateRequest&) override { return create_answer; }
  void destroy(const SandboxHandle& sandbox) override { destroyed.push_back(sandbox.backend_id); }
  BackendStatus status(const SandboxHandle&) override { return {}; }
  int exec(const SandboxHandle&, const ExecRequest&, ExecIo&) override { return exec_answer; }
};

struct Checked {
  Checked() {
    auto inner = std::make_unique<ScriptedDriver>();
    scripted = inner.get();
    driver = checked_driver(std::move(inner), "scripted", json::object());
  }
  ScriptedDriver* scripted;
  std::unique_ptr<Driver> driver;
};

json nested(int levels) {
  json value = 1;
  for (int i = 0; i < levels; ++i) {
    value = json{{"a", std::move(value)}};
  }
  return value;
}

std::string error_of(const std::function<void()>& call) {
  try {
    call();
  } catch (const DriverError& e) {
    EXPECT_EQ(e.code(), ExitCode::backend);
    return e.what();
  }
  ADD_FAILURE() << "no DriverError";
  return "";
}

TEST(JsonLimits, DepthIsMeasuredWithoutRecursion) {
  EXPECT_FALSE(json_limits::deeper_than(json(1), 0));
  EXPECT_FALSE(json_limits::deeper_than(nested(64), 64));
  EXPECT_TRUE(json_limits::deeper_than(nested(65), 64));
  json deep = nested(100000);
  EXPECT_TRUE(json_limits::deeper_than(deep, 64));
}

TEST(CheckedDriver, AnInfoTooDeepOrTooLargeIsRefusedAndItsResourceDestroyed) {
  for (json info : {nested(300), json{{"blob", std::string(json_limits::k_max_info_bytes, 'x')}},
                    json("a string")}) {
    Checked c;
    c.scripted->create_answer = {"res-1", info};
    auto what = error_of([&] { c.driver->create({.sandbox_id = "sbx-1"}); });
    EXPECT_NE(what.find("driver scripted: create answered an info that cannot be kept"),
              std::string::npos)
        << what;
    EXPECT_NE(what.find("the resource it made (res-1) was destroyed"), std::string::npos) << what;
    EXPECT_EQ(c.scripted->destroyed, std::vector<std::string>{"res-1"});
  }
}

TEST(CheckedDriver, BackendIdsMustBeKeepable) {
  for (std::string id :
       {std::string(), std::string("a\nb"), std::string(2000, 'x'), std::string("\xff\xfe")}) {
    Checked c;
    c.scripted->create_answer = {id, json::object()};
    auto what = error_of([&] { c.driver->create({.sandbox_id = "sbx-1"}); });
    EXPECT_NE(what.find("a backend id that cannot be kept"), std::string::npos) << what;
    EXPECT_NE(what.find("sandboxer.id=sbx-1"), std::string::npos) << what;
  }
  EXPECT_EQ(backend_id_problem("container-1"), "");
}

TEST(CheckedDriver, SecretsInInfoAreMaskedAndExitStatusesChecked) {
  log::add_secret("hunter2-the-secret");
  Checked c;
  c.scripted->create_answer = {"res-1", {{"token", "Bearer hunter2-the-secret"}, {"n", 3}}};
  auto result = c.driver->create({.sandbox_id = "sbx-1"});
  EXPECT_EQ(result.info, (json{{"token", "Bearer ***"}, {"n", 3}}));
  c.scripted->create_answer.backend_id = "id-hunter2-the-secret";
  EXPECT_NE(error_of([&] { c.driver->create({}); }).find("it holds a secret's value"),
            std::string::npos);

  class NoIo : public ExecIo {
    void out(std::string_view) override {}
    void err(std::string_view) override {}
  } io;
  c.scripted->exec_answer = 256;
  EXPECT_NE(error_of([&] { c.driver->exec({}, {}, io); }).find("exit status 256"),
            std::string::npos);
}

TEST(CheckedDriver, TheLedgerWriterRefusesWhatItsReaderWould) {
  std::string text;
  json_text::JsonWriter out(text);
  EXPECT_THROW(ledger_format::write_value(out, nested(100000)), Error);
  EXPECT_TRUE(text.empty());
}

TEST(ReadMessage, ALineNestedTooDeepIsMalformedNotACrash) {
  std::string line = R"({"jsonrpc":"2.0","id":1,"result":)";
  for (int i = 0; i < 100000; ++i) {
    line += "[";
  }
  line += std::string(100000, ']') + "}";
  auto message = protocol::read_message(line, 1);
  EXPECT_EQ(message.type, protocol::Message::Type::malformed);
  EXPECT_NE(message.message.find("nested deeper than"), std::string::npos);
}

} // namespace
} // namespace sandboxer
