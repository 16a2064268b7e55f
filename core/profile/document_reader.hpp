#pragma once
// Reading a parsed profile or config.yaml document: every error names the file:line:col of the
// value (or key) it is about. The profile's checks, its event sinks and config.yaml read through
// this one class.

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include <sandboxer/duration.hpp>

#include "core/profile/internal.hpp"
#include "core/profile/profile.hpp"

namespace sandboxer::profile_internal {

class DocumentReader {
public:
  DocumentReader(const fs::path& file, Document& doc)
      : m_file(file), m_doc(doc), m_root(doc.value) {}

  // The location of `pointer` (its value, or with `key` its key), or of its nearest ancestor
  // that has one.
  std::string where(std::string pointer, bool key = false) const {
    while (!pointer.empty()) {
      if (auto it = m_doc.info.find(pointer); it != m_doc.info.end()) {
        return key ? it->second.entry_location : it->second.location;
      }
      pointer.resize(pointer.rfind('/'));
    }
    return m_file.string() + ":1:1";
  }

  // An error about the value at `pointer`.
  [[noreturn]] void fail_at(const std::string& pointer, const std::string& message) const {
    fail(where(pointer), message);
  }

  // An error about the key at `pointer` (unknown, reserved, misplaced).
  [[noreturn]] void fail_at_key(const std::string& pointer, const std::string& message) const {
    fail(where(pointer, true), message);
  }

  // The text of a scalar value as written (after expansion); nullopt for null, maps and lists.
  std::optional<std::string> text_of(const json& value, const std::string& pointer) const {
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

  const json* find(const std::string& key) const {
    auto it = m_root.find(key);
    return it == m_root.end() || it->is_null() ? nullptr : &*it;
  }

  void check_keys(const json& map, const std::vector<std::string>& allowed,
                  const std::string& pointer, const std::string& field) const {
    for (const auto& [key, value] : map.items()) {
      if (!contains(allowed, key)) {
        fail_at_key(pointer + "/" + escape_token(key),
                    fmt::format("{}: unknown key \"{}\"{}", field, key,
                                suggestion(key, allowed, "known keys")));
      }
    }
  }

  Seconds duration_at(const std::string& pointer, const std::string& field) const {
    const json& value = m_root.at(json::json_pointer(pointer));
    std::string text = text_of(value, pointer).value_or(value.dump());
    auto duration = parse_duration(text);
    if (!duration) {
      fail_at(pointer,
              fmt::format("{}: invalid duration \"{}\" {}", field, text, duration_problem(text)));
    }
    return *duration;
  }

  // `field` names it in errors: "secrets.NAME", "events[0].token".
  SecretRef secret_ref(const std::string& field, const json& ref,
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

protected:
  const fs::path& m_file;
  Document& m_doc;
  const json& m_root;
};

// The sinks of `events` in `doc` (a profile or config.yaml), checked and normalized.
nlohmann::json sinks_of(const fs::path& file, Document& doc);

} // namespace sandboxer::profile_internal
