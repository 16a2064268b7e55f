#pragma once
// The profile loader's internals, shared by its files (docs/profile-format.md):
//   document.cpp  YAML text -> Document (JSON and the origin of every JSON pointer): the format
//   extends.cpp   finding profile files and merging an `extends` chain: where documents come from
//   checks.cpp    the rules every field must follow, and the typed Profile they make
//   sinks.cpp     the `events` sinks (a profile's and config.yaml's)
//   ports.cpp     the `ports` a sandbox exposes
//   ready.cpp     the `ready` port that must answer before create returns
//   pause.cpp     the pause and idle rules (ttl.paused_max, ttl.idle, pause:, resume:, cost:)
//   pool.cpp      the warm pool (pool: {size, max_age})
//   config.cpp    config.yaml
//   document_reader.hpp  reading a document with located errors, for the three above
//   profile.cpp   the public calls (sandboxer/profile.hpp)
// yaml-cpp is used by document.cpp only: nothing YAML-shaped leaves it.

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/profile/profile.hpp"

namespace sandboxer::profile_internal {

namespace fs = std::filesystem;
using json = nlohmann::json;

inline const std::vector<std::string> k_common_keys = {
    "name",   "description", "extends", "driver", "ttl",   "labels", "env",  "secrets",
    "events", "snapshots",   "ports",   "ready",  "pause", "resume", "cost", "pool"};

inline const std::vector<std::string> k_sink_types = {"jsonl", "http", "stderr", "fd", "exec"};

// A profile without any `ttl` still gets a deadline, so a forgotten sandbox is reaped.
inline constexpr Seconds k_default_ttl{3600};

// Where one value of a document was written and, for a scalar, its text after expansion (so that
// `PYTHON_VERSION: 3.10` stays "3.10" in `env` instead of going through a double).
struct NodeInfo {
  // What Profile::locations exports: the value itself for a scalar (a driver's "invalid latency"
  // points at the latency), the key for a map or list (where the block starts).
  std::string location;
  // The key of a map entry, or the item of a list: where "unknown key" errors point.
  std::string entry_location;
  std::optional<std::string> text;
};

using InfoMap = std::map<std::string, NodeInfo>;

// One parsed (or merged) profile document.
struct Document {
  json value = json::object();
  InfoMap info;
};

[[noreturn]] void fail(const std::string& where, const std::string& message);

// document.cpp
void require_utf8(const std::string& text, const std::string& where);
// A JSON pointer reference token: "~" and "/" are escaped as RFC 6901 says.
std::string escape_token(const std::string& key);
bool is_variable_name(std::string_view name);
bool contains(const std::vector<std::string>& list, const std::string& word);
std::string suggestion(const std::string& word, const std::vector<std::string>& candidates,
                       const std::string& what);
std::string expand_variables(const std::string& text, const std::string& where);
std::string read_text(const fs::path& file);
Document parse_document(const fs::path& file);
// Empty, or comments only.
bool is_empty_document(const fs::path& file);

// extends.cpp
bool looks_like_path(const std::string& text);
bool is_file(const fs::path& path);
std::optional<fs::path> find_in(const std::string& name, const std::vector<fs::path>& dirs,
                                const std::optional<fs::path>& except);
std::string not_found_message(const std::string& name, const std::vector<fs::path>& dirs);
struct Loaded {
  Document doc;
  std::vector<fs::path> chain;
};
Loaded load_chain(const fs::path& file, const std::vector<fs::path>& search,
                  std::vector<fs::path>& stack);
std::string expand_home(const std::string& path);

// config.cpp
Config config_of(const fs::path& file, Document& doc);
// checks.cpp
Profile checked_profile(const fs::path& file, Document& doc, std::vector<fs::path> chain);

} // namespace sandboxer::profile_internal
