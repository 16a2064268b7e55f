// The built-in stub driver served over the driver protocol by the SDK, as
// `sandboxer-driver-stub-external`: the same driver in-process and external, so that
// bench/driver-protocol.sh measures the protocol alone, and tests compare the two.
#include <sandboxer/sdk.hpp>

#include "drivers/stub/stub_driver.hpp"

namespace {

// The stub under another name: a built-in name always wins over an external driver.
class Renamed : public sandboxer::DriverFactory {
public:
  explicit Renamed(const sandboxer::DriverFactory& inner) : m_inner(inner) {}
  std::string_view name() const override { return "stub-external"; }
  std::string_view doc() const override { return m_inner.doc(); }
  sandboxer::Capabilities capabilities() const override { return m_inner.capabilities(); }
  nlohmann::json parse_spec(const nlohmann::json& section) const override {
    return m_inner.parse_spec(section);
  }
  std::unique_ptr<sandboxer::Driver> open(const nlohmann::json& spec,
                                          const sandboxer::DriverContext& context) const override {
    return m_inner.open(spec, context);
  }

private:
  const sandboxer::DriverFactory& m_inner;
};

} // namespace

int main() {
  static const Renamed factory(sandboxer::drivers::stub::stub_factory());
  return sandboxer::sdk::serve(factory);
}
