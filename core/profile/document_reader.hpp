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
  std::string where(std::string pointer, bool key = false) const;

  // An error about the value at `pointer`.
  [[noreturn]] void fail_at(const std::string& pointer, const std::string& message) const;

  // An error about the key at `pointer` (unknown, reserved, misplaced).
  [[noreturn]] void fail_at_key(const std::string& pointer, const std::string& message) const;

  // The text of a scalar value as written (after expansion); nullopt for null, maps and lists.
  std::optional<std::string> text_of(const json& value, const std::string& pointer) const;

  const json* find(const std::string& key) const;

  void check_keys(const json& map, const std::vector<std::string>& allowed,
                  const std::string& pointer, const std::string& field) const;

  Seconds duration_at(const std::string& pointer, const std::string& field) const;

  // `field` names it in errors: "secrets.NAME", "events[0].token".
  SecretRef secret_ref(const std::string& field, const json& ref, const std::string& pointer) const;

protected:
  const fs::path& m_file;
  Document& m_doc;
  const json& m_root;
};

// The sinks of `events` in `doc` (a profile or config.yaml), checked and normalized.
nlohmann::json sinks_of(const fs::path& file, Document& doc);

// The `ports` of a profile, checked; a bind to every address adds a warning.
std::vector<PortSpec> ports_of(const fs::path& file, Document& doc,
                               std::vector<std::string>& warnings);

// The `ready` of a profile, checked against its `ports` (the port must be exposed, as tcp).
std::optional<ReadyPort> ready_of(const fs::path& file, Document& doc,
                                  const std::vector<PortSpec>& ports);

// The pause and idle rules of a profile (docs/pause.md).
PausePolicy pause_policy_of(const fs::path& file, Document& doc);

// The warm pool of a profile (docs/pools.md), if it has one.
std::optional<PoolPolicy> pool_policy_of(const fs::path& file, Document& doc);

} // namespace sandboxer::profile_internal
