// The `ports` of a profile (docs/ports.md): which ports of the sandbox are exposed, and where.
#include <arpa/inet.h>
#include <fmt/format.h>
#include <set>
#include <tuple>

#include <sandboxer/ports.hpp>

#include "core/profile/document_reader.hpp"

namespace sandboxer::profile_internal {
namespace {

const std::vector<std::string> k_port_keys = {"port", "protocol", "host_port", "bind"};
const std::vector<std::string> k_protocols = {"tcp", "udp"};

bool is_ip_address(const std::string& text) {
  unsigned char buffer[sizeof(in6_addr)];
  return inet_pton(AF_INET, text.c_str(), buffer) == 1 ||
         inet_pton(AF_INET6, text.c_str(), buffer) == 1;
}

class PortChecker : public DocumentReader {
public:
  PortChecker(const fs::path& file, Document& doc, std::vector<std::string>& warnings)
      : DocumentReader(file, doc), m_warnings(warnings) {}

  std::vector<PortSpec> ports() const {
    const json* ports = find("ports");
    if (ports == nullptr || ports->is_null()) {
      return {};
    }
    if (!ports->is_array()) {
      fail_at("/ports", "ports: expected a list, such as [8080, {port: 5432, host_port: 15432}]");
    }
    std::vector<PortSpec> specs;
    std::set<std::pair<int, std::string>> seen;
    std::set<std::tuple<int, std::string, std::string>> seen_host;
    for (size_t i = 0; i < ports->size(); ++i) {
      const std::string pointer = "/ports/" + std::to_string(i);
      const std::string field = fmt::format("ports[{}]", i);
      PortSpec spec = port((*ports)[i], pointer, field);
      if (!seen.insert({spec.port, spec.protocol}).second) {
        fail_at(pointer,
                fmt::format("{}: port {}/{} is listed twice", field, spec.port, spec.protocol));
      }
      if (spec.host_port && !seen_host.insert({*spec.host_port, spec.protocol, spec.bind}).second) {
        fail_at(pointer + "/host_port",
                fmt::format("{}.host_port: {}/{} on {} is asked for twice", field, *spec.host_port,
                            spec.protocol, spec.bind));
      }
      if (spec.bind == "0.0.0.0" || spec.bind == "::") {
        m_warnings.push_back(fmt::format(
            "{}: {}.bind {} exposes port {}/{} on every network of the host, not only to this "
            "machine",
            where(pointer + "/bind"), field, spec.bind, spec.port, spec.protocol));
      }
      specs.push_back(std::move(spec));
    }
    return specs;
  }

private:
  // 8080, "8080/udp", or {port, protocol, host_port, bind}.
  PortSpec port(const json& value, const std::string& pointer, const std::string& field) const {
    PortSpec spec;
    if (value.is_object()) {
      check_keys(value, k_port_keys, pointer, field);
      if (!value.contains("port")) {
        fail_at(pointer, field + ": missing \"port\" (the port inside the sandbox)");
      }
      spec.port = number(value["port"], pointer + "/port", field + ".port");
      if (value.contains("protocol") && !value["protocol"].is_null()) {
        spec.protocol = protocol(value["protocol"], pointer + "/protocol", field + ".protocol");
      }
      if (value.contains("host_port") && !value["host_port"].is_null()) {
        spec.host_port = number(value["host_port"], pointer + "/host_port", field + ".host_port");
      }
      if (value.contains("bind") && !value["bind"].is_null()) {
        auto bind = text_of(value["bind"], pointer + "/bind");
        if (!bind || !is_ip_address(*bind)) {
          fail_at(
              pointer + "/bind",
              fmt::format("{}.bind: expected an IP address of the host, such as 127.0.0.1", field));
        }
        spec.bind = *bind;
      }
      return spec;
    }
    auto text = text_of(value, pointer);
    if (!text) {
      fail_at(pointer, field + ": expected a port number, \"PORT/udp\" or a map {port: ...}");
    }
    const size_t slash = text->find('/');
    spec.port = number_text(text->substr(0, slash), pointer, field);
    if (slash != std::string::npos) {
      spec.protocol = protocol(json(text->substr(slash + 1)), pointer, field);
    }
    return spec;
  }

  int number(const json& value, const std::string& pointer, const std::string& field) const {
    auto text = text_of(value, pointer);
    if (!text || value.is_boolean()) {
      fail_at(pointer, field + ": expected a port number from 1 to 65535");
    }
    return number_text(*text, pointer, field);
  }

  int number_text(const std::string& text, const std::string& pointer,
                  const std::string& field) const {
    auto parsed = port_number(text);
    if (!parsed) {
      fail_at(pointer, fmt::format("{}: \"{}\" is not a port number from 1 to 65535", field, text));
    }
    return *parsed;
  }

  std::string protocol(const json& value, const std::string& pointer,
                       const std::string& field) const {
    auto text = value.is_string() ? std::optional<std::string>(value.get<std::string>())
                                  : text_of(value, pointer);
    if (!text || !contains(k_protocols, *text)) {
      fail_at(pointer, fmt::format("{}: protocol \"{}\": expected tcp or udp", field,
                                   text.value_or(value.dump())));
    }
    return *text;
  }

  std::vector<std::string>& m_warnings;
};

} // namespace

std::vector<PortSpec> ports_of(const fs::path& file, Document& doc,
                               std::vector<std::string>& warnings) {
  return PortChecker(file, doc, warnings).ports();
}

} // namespace sandboxer::profile_internal
