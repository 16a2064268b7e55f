#include <gtest/gtest.h>

#include "core/errors.hpp"
#include "core/lifecycle/lifecycle.hpp"
#include "support/fake_clock.hpp"
#include "support/recording_hook.hpp"
#include "support/temp_dir.hpp"

// Engine::copy's refusals, before any byte moves: a driver that can copy neither natively nor
// over exec (exit 7), one that lacks the path or the owner asked for (exit 7), a sandbox that is
// not running (exit 10). The driver counts its calls: a refusal makes none.
namespace sandboxer {
namespace {

struct Calls {
  int stat = 0;
  int exec = 0;
};

class BareDriver : public Driver {
public:
  explicit BareDriver(Calls& calls) : m_calls(calls) {}
  CreateResult create(const CreateRequest& request) override {
    return {request.sandbox_id, nlohmann::json::object()};
  }
  void destroy(const SandboxHandle&) override {}
  BackendStatus status(const SandboxHandle&) override {
    return {BackendStatus::State::running, ""};
  }
  PathInfo stat_path(const SandboxHandle&, const std::string&) override {
    ++m_calls.stat;
    return {};
  }
  int exec(const SandboxHandle&, const ExecRequest&, ExecIo&) override {
    ++m_calls.exec;
    return 1;
  }

private:
  Calls& m_calls;
};

class BareFactory : public DriverFactory {
public:
  BareFactory(std::string name, Capabilities caps) : m_name(std::move(name)), m_caps(caps) {}
  std::string_view name() const override { return m_name; }
  std::string_view doc() const override { return "a test driver"; }
  Capabilities capabilities() const override { return m_caps; }
  nlohmann::json parse_spec(const nlohmann::json& section) const override {
    return section.is_null() ? nlohmann::json::object() : section;
  }
  std::unique_ptr<Driver> open(const nlohmann::json&, const DriverContext&) const override {
    return std::make_unique<BareDriver>(calls);
  }
  mutable Calls calls;

private:
  std::string m_name;
  Capabilities m_caps;
};

class CpEngine : public ::testing::Test {
protected:
  CpEngine()
      : clock(*parse_time("2026-12-07T12:00:00Z")), ledger(dir / "state", Seconds(5)),
        catalog({{"bare", &bare}, {"execonly", &exec_only}, {"ownerless", &ownerless}}, {}),
        engine(ledger, catalog, clock, hook, "tester") {}

  SandboxRecord create(const std::string& driver) {
    testing::write_file(dir / (driver + ".yaml"),
                        "driver: " + driver + "\nttl: { default: 30m }\n");
    return engine.create(load_profile(dir / (driver + ".yaml"), {}), {}).record;
  }
  CopyRequest into(std::optional<std::pair<int64_t, int64_t>> owner = std::nullopt) {
    CopyRequest request;
    request.direction = CopyRequest::Direction::in;
    request.sources = {(dir / "bare.yaml").string()};
    request.destination = "/tmp";
    request.options.owner = owner;
    return request;
  }
  ExitCode refusal(const std::string& id, const CopyRequest& request) {
    try {
      engine.copy(id, request);
    } catch (const Error& e) {
      return e.code();
    }
    return ExitCode::ok;
  }

  testing::TempDir dir;
  testing::FakeClock clock;
  Ledger ledger;
  testing::RecordingHook hook;
  BareFactory bare{"bare", {}};
  BareFactory exec_only{"execonly", {.exec = true}};
  BareFactory ownerless{"ownerless", {.copy = true}};
  DriverCatalog catalog;
  Engine engine;
};

TEST_F(CpEngine, ADriverWithNeitherCopyNorExecIsRefusedBeforeAnyCall) {
  auto record = create("bare");
  EXPECT_EQ(refusal(record.id, into()), ExitCode::policy);
  EXPECT_EQ(bare.calls.stat + bare.calls.exec, 0);
  EXPECT_EQ(engine.get(record.id).history.size(), record.history.size()) << "a refusal is history";
}

TEST_F(CpEngine, ViaNativeOnAnExecOnlyDriverIsRefused) {
  auto record = create("execonly");
  CopyRequest request = into();
  request.via = CopyRequest::Via::native;
  EXPECT_EQ(refusal(record.id, request), ExitCode::policy);
  EXPECT_EQ(exec_only.calls.exec, 0);
}

TEST_F(CpEngine, OwnerWhereTheDriverCannotChooseItIsRefused) {
  auto record = create("ownerless");
  EXPECT_EQ(refusal(record.id, into(std::make_pair(1000, 1000))), ExitCode::policy);
  EXPECT_EQ(ownerless.calls.stat, 0);
}

TEST_F(CpEngine, ASandboxThatIsNotRunningIsAConflict) {
  auto record = create("execonly");
  engine.destroy(record.id, "test");
  EXPECT_EQ(refusal(record.id, into()), ExitCode::conflict);
  EXPECT_EQ(exec_only.calls.exec, 0);
}

} // namespace
} // namespace sandboxer
