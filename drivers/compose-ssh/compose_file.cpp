#include "drivers/compose-ssh/compose_file.hpp"

#include <fmt/format.h>
#include <regex>
#include <yaml-cpp/yaml.h>

#include <sandboxer/error.hpp>

namespace sandboxer::drivers::compose_ssh {

ComposeFile read_compose_file(const std::string& text, const std::string& path) {
  auto invalid = [&](const std::string& where, const std::string& what) {
    return DriverError(DriverError::Kind::invalid_spec,
                       fmt::format("compose-ssh: {}{}: {}", path, where, what));
  };
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    throw invalid(fmt::format(":{}:{}", e.mark.line + 1, e.mark.column + 1), e.msg);
  }
  if (!root.IsMap()) {
    throw invalid("", "expected a compose file (a mapping with services:)");
  }
  ComposeFile file;
  try {
    if (auto version = root["version"]; version && version.IsScalar()) {
      file.version = version.as<std::string>();
    }
    auto services = root["services"];
    if (!services || !services.IsMap() || services.size() == 0) {
      auto mark = services ? services.Mark() : root.Mark();
      throw invalid(fmt::format(":{}:{}", mark.line + 1, mark.column + 1),
                    "expected services: with at least one service");
    }
    for (const auto& service : services) {
      if (!service.first.IsScalar()) {
        auto mark = service.first.Mark();
        throw invalid(fmt::format(":{}:{}", mark.line + 1, mark.column + 1),
                      "a service name must be text");
      }
      std::string name = service.first.as<std::string>();
      // compose's own rule; it also keeps names fit for image tags, labels and JSON.
      static const std::regex service_name(R"(^[A-Za-z0-9][A-Za-z0-9._-]*$)");
      if (!std::regex_match(name, service_name)) {
        auto mark = service.first.Mark();
        throw invalid(fmt::format(":{}:{}", mark.line + 1, mark.column + 1),
                      "a service name is letters, digits, '.', '_' and '-'");
      }
      file.services.push_back(std::move(name));
    }
  } catch (const YAML::Exception& e) {
    throw invalid(fmt::format(":{}:{}", e.mark.line + 1, e.mark.column + 1), e.msg);
  }
  return file;
}

std::string override_file(const ComposeFile& file, const Overrides& overrides) {
  nlohmann::json document = nlohmann::json::object();
  if (file.version) {
    document["version"] = *file.version;
  }
  nlohmann::json services = nlohmann::json::object();
  for (const auto& name : file.services) {
    nlohmann::json service = {{"labels", overrides.labels}};
    if (!overrides.environment.empty()) {
      service["environment"] = overrides.environment;
    }
    if (auto image = overrides.images.find(name); image != overrides.images.end()) {
      service["image"] = image->second;
    }
    if (name == overrides.ports_service && !overrides.ports.empty()) {
      service["ports"] = overrides.ports;
    }
    services[name] = std::move(service);
  }
  document["services"] = std::move(services);
  return document.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

} // namespace sandboxer::drivers::compose_ssh
