#include "core/profile/document_reader.hpp"

#include <fmt/format.h>

namespace sandboxer::profile_internal {

std::string DocumentReader::where(std::string pointer, bool key) const {
  while (!pointer.empty()) {
    if (auto it = m_doc.info.find(pointer); it != m_doc.info.end()) {
      return key ? it->second.entry_location : it->second.location;
    }
    pointer.resize(pointer.rfind('/'));
  }
  return m_file.string() + ":1:1";
}

void DocumentReader::fail_at(const std::string& pointer, const std::string& message) const {
  fail(where(pointer), message);
}

void DocumentReader::fail_at_key(const std::string& pointer, const std::string& message) const {
  fail(where(pointer, true), message);
}

std::optional<std::string> DocumentReader::text_of(const json& value,
                                                   const std::string& pointer) const {
  if (value.is_string()) {
    return value.get<std::string>();
  }
  if (value.is_null() || value.is_structured()) {
    return std::nullopt;
  }
  if (auto it = m_doc.info.find(pointer); it != m_doc.info.end() && it->second.text) {
    return it->second.text;
  }
  return value.dump();
}

const json* DocumentReader::find(const std::string& key) const {
  auto it = m_root.find(key);
  return it == m_root.end() || it->is_null() ? nullptr : &*it;
}

void DocumentReader::check_keys(const json& map, const std::vector<std::string>& allowed,
                                const std::string& pointer, const std::string& field) const {
  for (const auto& [key, value] : map.items()) {
    if (!contains(allowed, key)) {
      fail_at_key(pointer + "/" + escape_token(key),
                  fmt::format("{}: unknown key \"{}\"{}", field, key,
                              suggestion(key, allowed, "known keys")));
    }
  }
}

Seconds DocumentReader::duration_at(const std::string& pointer, const std::string& field) const {
  const json& value = m_root.at(json::json_pointer(pointer));
  std::string text = text_of(value, pointer).value_or(value.dump());
  auto duration = parse_duration(text);
  if (!duration) {
    fail_at(pointer,
            fmt::format("{}: invalid duration \"{}\" {}", field, text, duration_problem(text)));
  }
  return *duration;
}

SecretRef DocumentReader::secret_ref(const std::string& field, const json& ref,
                                     const std::string& pointer) const {
  if (!ref.is_object()) {
    fail_at(pointer, field + ": secrets are references only: write {env: VAR} or {file: PATH}");
  }
  check_keys(ref, {"env", "file"}, pointer, field);
  if (ref.size() != 1) {
    fail_at(pointer, field + ": write exactly one of {env: VAR} or {file: PATH}");
  }
  SecretRef result;
  result.kind = ref.contains("env") ? SecretRef::Kind::env : SecretRef::Kind::file;
  std::string key = result.kind == SecretRef::Kind::env ? "env" : "file";
  auto text = text_of(ref[key], pointer + "/" + key);
  if (result.kind == SecretRef::Kind::env && !(text && is_variable_name(*text))) {
    fail_at(pointer + "/env", field + ".env: expected an environment variable name");
  }
  if (result.kind == SecretRef::Kind::file && !(text && !text->empty())) {
    fail_at(pointer + "/file", field + ".file: expected a file path");
  }
  result.source = result.kind == SecretRef::Kind::file ? expand_home(*text) : *text;
  return result;
}

} // namespace sandboxer::profile_internal
