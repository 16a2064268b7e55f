// Secrets: resolved from their references (env or file) when a driver is opened, registered for
// redaction, never stored.
#include "core/secrets/secrets.hpp"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fmt/format.h>
#include <fstream>
#include <sstream>

#include <sandboxer/error.hpp>
#include <sandboxer/log.hpp>

namespace sandboxer {
namespace {

std::string read_secret_file(const std::string& name, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw Error(ExitCode::usage, fmt::format("secret {}: cannot read file {}: {}", name, path,
                                             std::strerror(errno)));
  }
  std::ostringstream text;
  text << in.rdbuf();
  std::string value = text.str();
  while (!value.empty() && (value.back() == '\n' || value.back() == '\r')) {
    value.pop_back();
  }
  return value;
}

} // namespace

std::map<std::string, std::string> resolve_secrets(const nlohmann::json& refs) {
  std::map<std::string, std::string> values;
  for (const auto& [name, ref] : refs.items()) {
    std::string value;
    if (ref.contains("env")) {
      std::string var = ref["env"].get<std::string>();
      const char* text = std::getenv(var.c_str());
      if (!text || !*text) {
        throw Error(ExitCode::usage,
                    fmt::format("secret {}: environment variable {} is not set", name, var));
      }
      value = text;
    } else if (ref.contains("file")) {
      value = read_secret_file(name, ref["file"].get<std::string>());
    }
    log::add_secret(value);
    values[name] = std::move(value);
  }
  return values;
}

nlohmann::json secret_refs_of(const Profile& profile) {
  nlohmann::json refs = nlohmann::json::object();
  for (const auto& [name, ref] : profile.secrets) {
    refs[name] = {{ref.kind == SecretRef::Kind::env ? "env" : "file", ref.source}};
  }
  return refs;
}

} // namespace sandboxer
