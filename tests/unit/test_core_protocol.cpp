// The driver protocol's framing and message reading (sdk/protocol/): what sandboxer makes of each
// line an external driver writes.
#include <atomic>
#include <cstdlib>
#include <fstream>
#include <gtest/gtest.h>
#include <regex>
#include <thread>

#include <sandboxer/base64.hpp>
#include <sandboxer/clock.hpp>

#include "core/external/external_driver.hpp"
#include "core/schemas/schemas.hpp"
#include "sdk/copy_streams.hpp"
#include "sdk/protocol/protocol.hpp"
#include "support/temp_dir.hpp"

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

// pause and resume (the optional methods of the capability `pause`).

using json = nlohmann::json;

TimePoint at(const char* text) {
  return *parse_time(text);
}

// The published schema of a protocol message (schemas/driver-protocol/NAME.schema.json).
const json& schema_of(const std::string& name) {
  static std::map<std::string, json> parsed;
  auto [it, added] = parsed.try_emplace(name);
  if (added) {
    for (const auto& file : schemas::embedded()) {
      if (file.name == "driver-protocol/" + name) {
        it->second = json::parse(file.text);
      }
    }
  }
  return it->second;
}

// What the protocol's schemas use of JSON Schema, checked: the first failure ("/path: why"), or
// "" when `value` is valid. (tests/e2e/test_schemas.sh checks recorded traffic with the real
// validator.)
std::string invalid(const json& value, const json& schema, const std::string& at = "") {
  if (!schema.is_object()) {
    return "";
  }
  if (auto type = schema.find("type"); type != schema.end()) {
    auto is = [&](const std::string& name) {
      return (name == "object" && value.is_object()) || (name == "array" && value.is_array()) ||
             (name == "string" && value.is_string()) || (name == "boolean" && value.is_boolean()) ||
             (name == "null" && value.is_null()) ||
             (name == "integer" && value.is_number_integer()) ||
             (name == "number" && value.is_number());
    };
    bool any = false;
    for (const auto& name : type->is_array() ? *type : json::array({*type})) {
      any = any || is(name.get<std::string>());
    }
    if (!any) {
      return at + ": not of type " + type->dump();
    }
  }
  if (auto c = schema.find("const"); c != schema.end() && *c != value) {
    return at + ": not " + c->dump();
  }
  if (auto e = schema.find("enum");
      e != schema.end() && std::find(e->begin(), e->end(), value) == e->end()) {
    return at + ": not one of " + e->dump();
  }
  if (value.is_string()) {
    if (schema.value("minLength", 0) > static_cast<int>(value.get<std::string>().size())) {
      return at + ": too short";
    }
    if (auto pattern = schema.find("pattern");
        pattern != schema.end() &&
        !std::regex_search(value.get<std::string>(), std::regex(pattern->get<std::string>()))) {
      return at + ": does not match " + pattern->dump();
    }
  }
  if (value.is_number() && schema.contains("minimum") && value < schema["minimum"]) {
    return at + ": below the minimum";
  }
  if (value.is_object()) {
    for (const auto& key : schema.value("required", json::array())) {
      if (!value.contains(key.get<std::string>())) {
        return at + ": lacks " + key.dump();
      }
    }
    const json properties = schema.value("properties", json::object());
    for (const auto& [key, item] : value.items()) {
      const json& sub =
          properties.contains(key) ? properties[key] : schema.value("additionalProperties", json());
      if (auto why = invalid(item, sub, at + "/" + key); !why.empty()) {
        return why;
      }
    }
  }
  if (value.is_array() && schema.contains("items")) {
    for (size_t i = 0; i < value.size(); ++i) {
      if (auto why = invalid(value[i], schema["items"], at + "/" + std::to_string(i));
          !why.empty()) {
        return why;
      }
    }
  }
  return "";
}

SandboxHandle paused_handle() {
  SandboxHandle handle;
  handle.sandbox_id = "sbx-abc";
  handle.backend_id = "b-1";
  handle.info = {{"host", "h"}, {"image", "im-1"}};
  return handle;
}

TEST(PauseProtocol, ParamsAndResultsRoundTrip) {
  const SandboxHandle handle = paused_handle();
  PauseRequest asked{.pause_id = "pse-aaaabbbbcccc",
                     .memory = false,
                     .stop_grace = std::chrono::seconds(7),
                     .keep_until = at("2030-01-02T03:04:05Z")};
  json params = pause_params(handle, asked);
  EXPECT_EQ(params["memory"], false);
  EXPECT_EQ(params["grace_seconds"], 7);
  EXPECT_EQ(params["keep_until"], "2030-01-02T03:04:05Z");
  EXPECT_EQ(params["info"], handle.info) << "an emulating driver keeps its state in info";
  PauseRequest read = pause_request_of(params);
  EXPECT_EQ(read.pause_id, asked.pause_id);
  EXPECT_EQ(read.memory, asked.memory);
  EXPECT_EQ(read.stop_grace, asked.stop_grace);
  EXPECT_EQ(read.keep_until, asked.keep_until);

  // Unset: memory and keep_until are null, grace_seconds is left out (as destroy's).
  json plain = pause_params(handle, {.pause_id = "pse-aaaabbbbcccc"});
  EXPECT_TRUE(plain["memory"].is_null());
  EXPECT_TRUE(plain["keep_until"].is_null());
  EXPECT_FALSE(plain.contains("grace_seconds"));
  EXPECT_FALSE(pause_request_of(plain).memory);
  EXPECT_FALSE(pause_request_of(plain).stop_grace);

  PauseResult done{.memory_kept = true, .how = "freeze", .held_bytes = 12345, .info = {{"k", 1}}};
  PauseResult back = pause_result_of(pause_result_json(done));
  EXPECT_EQ(back.memory_kept, true);
  EXPECT_EQ(back.how, "freeze");
  EXPECT_EQ(back.held_bytes, 12345u);
  EXPECT_EQ(back.info, done.info);
  EXPECT_TRUE(pause_result_json({.how = "stop"})["held_bytes"].is_null());
  EXPECT_FALSE(pause_result_of({{"memory_kept", false}, {"how", "stop"}}).held_bytes);

  ResumeRequest resume{.pause_id = "pse-aaaabbbbcccc",
                       .expires_at = at("2030-01-02T04:00:00Z"),
                       .labels = {{"sandboxer.id", "sbx-abc"}, {"team", "a"}},
                       .ports = {{.port = 8080}},
                       .bindings = {{8080, "tcp", "127.0.0.1", 40000, "tcp://127.0.0.1:40000"}}};
  json rparams = resume_params(handle, resume, "web");
  EXPECT_EQ(rparams["id"], "sbx-abc");
  EXPECT_EQ(rparams["name"], "web");
  EXPECT_EQ(rparams["expires_at"], "2030-01-02T04:00:00Z");
  ResumeRequest rread = resume_request_of(rparams);
  EXPECT_EQ(rread.pause_id, resume.pause_id);
  EXPECT_EQ(rread.expires_at, resume.expires_at);
  EXPECT_EQ(rread.labels, resume.labels);
  ASSERT_EQ(rread.ports.size(), 1u);
  EXPECT_EQ(rread.ports[0].port, 8080);
  ASSERT_EQ(rread.bindings.size(), 1u);
  EXPECT_EQ(rread.bindings[0].host_port, 40000);
  EXPECT_EQ(rread.bindings[0].url, "tcp://127.0.0.1:40000");
  json bare = resume_params(handle, {.pause_id = "pse-aaaabbbbcccc"}, "sbx-abc");
  EXPECT_FALSE(bare.contains("ports"));
  EXPECT_FALSE(bare.contains("bindings"));
  EXPECT_TRUE(bare["expires_at"].is_null());

  ResumeResult made{.backend_id = "b-2",
                    .info = {{"image", nullptr}},
                    .ports = std::vector<PortBinding>{
                        {8080, "tcp", "h", std::nullopt, "https://8080-b-2.example"}}};
  ResumeResult rback = resume_result_of(resume_result_json(made));
  EXPECT_EQ(rback.backend_id, "b-2");
  EXPECT_EQ(rback.info, made.info);
  ASSERT_TRUE(rback.ports);
  EXPECT_EQ((*rback.ports)[0].url, "https://8080-b-2.example");
  EXPECT_FALSE((*rback.ports)[0].host_port);
  // The same resource where it was: {} says so.
  ResumeResult same = resume_result_of(json::object());
  EXPECT_FALSE(same.backend_id);
  EXPECT_FALSE(same.ports);
  EXPECT_EQ(same.info, json::object());
  EXPECT_EQ(resume_result_json({}), json({{"info", json::object()}}));
}

// A result of the wrong shape is the driver's fault, said with the method and the key.
TEST(PauseProtocol, BadResultsAreClearErrors) {
  auto error_of = [](auto parse, const json& result) -> std::string {
    try {
      parse(result);
    } catch (const DriverError& e) {
      EXPECT_EQ(e.kind(), DriverError::Kind::error);
      return e.what();
    }
    return "accepted";
  };
  auto pause = [](const json& r) { return pause_result_of(r); };
  auto resume = [](const json& r) { return resume_result_of(r); };
  EXPECT_EQ(error_of(pause, json::array()), "the driver's pause result: not an object");
  EXPECT_EQ(error_of(pause, {{"how", "freeze"}}),
            "the driver's pause result: \"memory_kept\" must be true or false");
  EXPECT_EQ(error_of(pause, {{"memory_kept", "yes"}, {"how", "freeze"}}),
            "the driver's pause result: \"memory_kept\" must be true or false");
  EXPECT_NE(error_of(pause, {{"memory_kept", true}}).find("\"how\" must be a non-empty string"),
            std::string::npos);
  EXPECT_EQ(error_of(pause, {{"memory_kept", true}, {"how", "freeze"}, {"held_bytes", -1}}),
            "the driver's pause result: \"held_bytes\" must be a byte count or null, not -1");
  EXPECT_EQ(error_of(pause, {{"memory_kept", true}, {"how", "freeze"}, {"info", "x"}}),
            "the driver's pause result: \"info\" must be an object");
  EXPECT_EQ(error_of(resume, "x"), "the driver's resume result: not an object");
  EXPECT_EQ(error_of(resume, {{"backend_id", ""}}),
            "the driver's resume result: \"backend_id\", when there, must be a non-empty string");
  EXPECT_EQ(error_of(resume, {{"ports", json::object()}}),
            "the driver's resume result: \"ports\" must be an array");
  EXPECT_EQ(error_of(resume, {{"ports", {{{"port", 1}}}}}),
            "the driver's resume result: \"ports\" [0] needs port, host and url");
  EXPECT_EQ(error_of(resume, {{"info", json::array()}}),
            "the driver's resume result: \"info\" must be an object");
}

TEST(PauseProtocol, TheCapabilityIsOptionalAndEmulatedNeedsPause) {
  EXPECT_FALSE(capabilities_of({{"exec", true}}).pause);
  EXPECT_FALSE(capabilities_of({{"pause_emulated", true}}).pause_emulated);
  Capabilities both = capabilities_of({{"pause", true}, {"pause_emulated", true}});
  EXPECT_TRUE(both.pause);
  EXPECT_TRUE(both.pause_emulated);
  EXPECT_EQ(capabilities_json(both)["pause"], true);
  EXPECT_EQ(capabilities_json(both)["pause_emulated"], true);
  // Said only when true: a driver without it lists as it did before the capability.
  EXPECT_FALSE(capabilities_json(Capabilities{}).contains("pause"));
  EXPECT_FALSE(capabilities_json(Capabilities{}).contains("pause_emulated"));
  EXPECT_FALSE(capabilities_of(capabilities_json(Capabilities{})).pause);
  EXPECT_EQ(invalid({{"protocol", 1}, {"capabilities", capabilities_json(both)}},
                    schema_of("initialize.result")),
            "");
  EXPECT_NE(invalid({{"protocol", 1},
                     {"capabilities",
                      {{"snapshot", false},
                       {"exec", false},
                       {"native_ttl", false},
                       {"list_by_label", false},
                       {"pause", "yes"}}}},
                    schema_of("initialize.result")),
            "");
}

// What both ends write is what the published schemas describe, and they are not blind.
TEST(PauseProtocol, MessagesMatchTheirSchemas) {
  for (const char* name : {"pause.params", "pause.result", "resume.params", "resume.result"}) {
    ASSERT_TRUE(schema_of(name).is_object()) << name << " is not published";
  }
  const SandboxHandle handle = paused_handle();
  auto sent = [](json params) {
    params["spec"] = json::object(); // what the client adds to every call
    params["secrets"] = {{"key", "v"}};
    return params;
  };
  json pause = sent(pause_params(
      handle, {.pause_id = "pse-aaaabbbbcccc", .stop_grace = std::chrono::seconds(3)}));
  EXPECT_EQ(invalid(pause, schema_of("pause.params")), "");
  EXPECT_EQ(invalid(sent(pause_params(handle, {.pause_id = "pse-x", .memory = true})),
                    schema_of("pause.params")),
            "");
  json resume =
      sent(resume_params(handle,
                         {.pause_id = "pse-aaaabbbbcccc",
                          .expires_at = at("2030-01-02T04:00:00Z"),
                          .labels = {{"sandboxer.id", "sbx-abc"}},
                          .ports = {{.port = 8080}},
                          .bindings = {{8080, "tcp", "127.0.0.1", 40000, "tcp://127.0.0.1:40000"}}},
                         "sbx-abc"));
  EXPECT_EQ(invalid(resume, schema_of("resume.params")), "");
  EXPECT_EQ(invalid(pause_result_json({.memory_kept = true, .how = "freeze", .held_bytes = 1}),
                    schema_of("pause.result")),
            "");
  EXPECT_EQ(invalid(pause_result_json({.how = "stop"}), schema_of("pause.result")), "");
  EXPECT_EQ(
      invalid(resume_result_json({.backend_id = "b-2",
                                  .ports = std::vector<PortBinding>{{8080, "tcp", "h", std::nullopt,
                                                                     "https://8080-b-2.example"}}}),
              schema_of("resume.result")),
      "");
  EXPECT_EQ(invalid(resume_result_json({}), schema_of("resume.result")), "");

  json no_id = pause;
  no_id.erase("pause_id");
  EXPECT_EQ(invalid(no_id, schema_of("pause.params")), ": lacks \"pause_id\"");
  json bad_memory = pause;
  bad_memory["memory"] = "yes";
  EXPECT_NE(invalid(bad_memory, schema_of("pause.params")), "");
  EXPECT_NE(invalid({{"how", "freeze"}}, schema_of("pause.result")), "");
  EXPECT_NE(invalid({{"memory_kept", true}, {"how", ""}}, schema_of("pause.result")), "");
  EXPECT_NE(invalid({{"backend_id", ""}}, schema_of("resume.result")), "");
  json no_labels = resume;
  no_labels.erase("labels");
  EXPECT_NE(invalid(no_labels, schema_of("resume.params")), "");
  EXPECT_NE(invalid(json::object(), schema_of("resume.params")), "");
  EXPECT_EQ(invalid({{"method", "pause"}}, schema_of("request")), ": lacks \"jsonrpc\"");
  EXPECT_EQ(
      invalid({{"jsonrpc", "2.0"}, {"id", 1}, {"method", "resume"}, {"params", json::object()}},
              schema_of("request")),
      "");
}

// sandboxer's client against a real process (tests/data/drivers/sandboxer-driver-badpause).
class ExternalPause : public ::testing::Test {
protected:
  std::unique_ptr<Driver> open(const char* mode) {
    setenv("BADPAUSE_MODE", mode, 1);
    setenv("BADPAUSE_LOG", (dir / "log").c_str(), 1);
    factory = external::make_factory("badpause",
                                     SANDBOXER_TEST_DATA "/drivers/sandboxer-driver-badpause");
    context.data_dir = dir / "data";
    return factory->open(factory->parse_spec(json::object()), context);
  }
  void TearDown() override {
    unsetenv("BADPAUSE_MODE");
    unsetenv("BADPAUSE_LOG");
  }
  std::vector<json> logged() const {
    std::vector<json> out;
    std::ifstream in(dir / "log");
    for (std::string line; std::getline(in, line);) {
      out.push_back(json::parse(line, nullptr, false));
    }
    return out;
  }
  testing::TempDir dir;
  DriverContext context;
  std::unique_ptr<DriverFactory> factory;
};

TEST_F(ExternalPause, CallsTheDriverAndReadsItsAnswers) {
  auto driver = open("good");
  EXPECT_TRUE(factory->capabilities().pause);
  const SandboxHandle handle = paused_handle();
  PauseResult paused = driver->pause(handle, {.pause_id = "pse-aaaabbbbcccc", .memory = true});
  EXPECT_TRUE(paused.memory_kept);
  EXPECT_EQ(paused.how, "freeze");
  EXPECT_EQ(paused.held_bytes, 4096u);
  EXPECT_EQ(paused.info, json({{"paused_by", "pse-aaaabbbbcccc"}}));
  ResumeResult resumed = driver->resume(
      handle, {.pause_id = "pse-aaaabbbbcccc", .labels = {{"sandboxer.id", "sbx-abc"}}});
  EXPECT_FALSE(resumed.backend_id);
  ASSERT_TRUE(resumed.ports);
  EXPECT_EQ((*resumed.ports)[0].host_port, 40001);
  // What went over the pipe is what the schemas publish.
  auto calls = logged();
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0]["method"], "pause");
  EXPECT_EQ(invalid(calls[0]["params"], schema_of("pause.params")), "") << calls[0].dump();
  EXPECT_EQ(calls[0]["params"]["info"], handle.info);
  EXPECT_EQ(calls[1]["method"], "resume");
  EXPECT_EQ(invalid(calls[1]["params"], schema_of("resume.params")), "") << calls[1].dump();
  EXPECT_EQ(calls[1]["params"]["id"], "sbx-abc");
}

TEST_F(ExternalPause, ADeclaredPauseTheDriverLacksIsRefused) {
  auto driver = open("missing");
  for (bool is_pause : {true, false}) {
    try {
      if (is_pause) {
        driver->pause(paused_handle(), {.pause_id = "pse-aaaabbbbcccc"});
      } else {
        driver->resume(paused_handle(), {.pause_id = "pse-aaaabbbbcccc"});
      }
      ADD_FAILURE() << "no error";
    } catch (const DriverError& e) {
      EXPECT_EQ(e.kind(), DriverError::Kind::refused) << e.what();
      EXPECT_EQ(e.code(), ExitCode::policy);
      EXPECT_NE(std::string(e.what()).find("driver badpause declares the capability pause but "
                                           "does not answer"),
                std::string::npos)
          << e.what();
    }
  }
}

TEST_F(ExternalPause, AnUndeclaredPauseIsNeverSent) {
  auto driver = open("undeclared");
  EXPECT_FALSE(factory->capabilities().pause);
  try {
    driver->pause(paused_handle(), {.pause_id = "pse-aaaabbbbcccc"});
    ADD_FAILURE() << "no error";
  } catch (const DriverError& e) {
    EXPECT_EQ(e.kind(), DriverError::Kind::refused);
    EXPECT_STREQ(e.what(), "pause is not supported by driver badpause");
  }
  EXPECT_THROW(driver->resume(paused_handle(), {.pause_id = "pse-aaaabbbbcccc"}), DriverError);
  EXPECT_TRUE(logged().empty()) << "the driver was called";
}

TEST_F(ExternalPause, AnswersOfTheWrongShapeNameTheMethod) {
  auto driver = open("shape");
  try {
    driver->pause(paused_handle(), {.pause_id = "pse-aaaabbbbcccc"});
    ADD_FAILURE() << "no error";
  } catch (const DriverError& e) {
    EXPECT_STREQ(e.what(), "the driver's pause result: \"memory_kept\" must be true or false");
  }
  try {
    driver->resume(paused_handle(), {.pause_id = "pse-aaaabbbbcccc"});
    ADD_FAILURE() << "no error";
  } catch (const DriverError& e) {
    EXPECT_STREQ(e.what(), "the driver's resume result: \"ports\" [0] needs port, host and url");
  }
}

} // namespace
} // namespace sandboxer::protocol
