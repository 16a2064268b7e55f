// Where profile documents come from: files found by name, and the merge of an `extends` chain.
#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <memory>

#include <sandboxer/error.hpp>

#include "core/names.hpp"
#include "core/owner.hpp"
#include "core/profile/internal.hpp"
#include "core/profile/profile.hpp"
#include "core/sha256.hpp"
#include "sdk/json/utf8.hpp"

namespace sandboxer::profile_internal {

// Removes `pointer` and everything below it from `info`.
void erase_subtree(InfoMap& info, const std::string& pointer) {
  info.erase(pointer);
  std::string prefix = pointer + "/";
  for (auto it = info.lower_bound(prefix); it != info.end() && it->first.starts_with(prefix);) {
    it = info.erase(it);
  }
}

void copy_subtree(const InfoMap& from, InfoMap& to, const std::string& pointer) {
  if (auto it = from.find(pointer); it != from.end()) {
    to[pointer] = it->second;
  }
  std::string prefix = pointer + "/";
  for (auto it = from.lower_bound(prefix); it != from.end() && it->first.starts_with(prefix);
       ++it) {
    to[it->first] = it->second;
  }
}

// A secret reference is replaced as a whole: merging {env: A} with {file: F} would make a
// reference with both, which is never what the child meant.
bool replaced_whole(const std::string& pointer) {
  constexpr std::string_view k_secrets = "/secrets/";
  return pointer.starts_with(k_secrets) && pointer.find('/', k_secrets.size()) == std::string::npos;
}

// Lays `child` (at `pointer`) over `base`: maps merge key by key, the child winning; lists and
// scalars replace. Origins follow the values.
void overlay(json& base, InfoMap& base_info, const json& child, const InfoMap& child_info,
             const std::string& pointer) {
  if (base.is_object() && child.is_object() && !replaced_whole(pointer)) {
    if (auto it = child_info.find(pointer); it != child_info.end()) {
      base_info[pointer] = it->second;
    }
    for (const auto& [key, value] : child.items()) {
      std::string child_pointer = pointer + "/" + escape_token(key);
      if (base.contains(key)) {
        overlay(base[key], base_info, value, child_info, child_pointer);
      } else {
        base[key] = value;
        copy_subtree(child_info, base_info, child_pointer);
      }
    }
    return;
  }
  base = child;
  erase_subtree(base_info, pointer);
  copy_subtree(child_info, base_info, pointer);
}

bool looks_like_path(const std::string& text) {
  return text.find('/') != std::string::npos || text.ends_with(".yaml") || text.ends_with(".yml");
}

bool is_file(const fs::path& path) {
  std::error_code ignored;
  return fs::is_regular_file(path, ignored);
}

bool same_file(const fs::path& a, const fs::path& b) {
  std::error_code ignored;
  return fs::equivalent(a, b, ignored);
}

// <dir>/<name>.yaml or .yml in the first directory of `dirs` that has one, skipping `self`.
std::optional<fs::path> find_in(const std::string& name, const std::vector<fs::path>& dirs,
                                const std::optional<fs::path>& self) {
  for (const auto& dir : dirs) {
    for (const char* extension : {".yaml", ".yml"}) {
      fs::path candidate = dir / (name + extension);
      if (is_file(candidate) && !(self && same_file(candidate, *self))) {
        return candidate;
      }
    }
  }
  return std::nullopt;
}

std::string not_found_message(const std::string& name, const std::vector<fs::path>& dirs) {
  std::vector<std::string> shown;
  for (const auto& dir : dirs) {
    shown.push_back(dir.empty() ? "." : dir.string());
  }
  std::string message =
      fmt::format("profile \"{}\" not found; looked in: {}", name, fmt::join(shown, ", "));
  std::vector<std::string> names;
  for (const auto& entry : list_profiles(dirs)) {
    names.push_back(entry.first);
  }
  if (auto guess = closest_match(name, names)) {
    message += fmt::format("; did you mean \"{}\"?", *guess);
  }
  return message;
}

// The file an `extends: value` in `file` names. A name never resolves to `file` itself, so that
// ~/.config/sandboxer/profiles/ci.yaml can extend the ci.yaml of /etc/sandboxer/profiles.
fs::path resolve_extends(const std::string& value, const fs::path& file,
                         const std::vector<fs::path>& search, const std::string& where) {
  fs::path dir = file.parent_path();
  if (looks_like_path(value)) {
    fs::path target =
        fs::path(value).is_absolute() ? fs::path(value) : (dir / value).lexically_normal();
    if (!is_file(target)) {
      fail(where, fmt::format("extends: profile file {} not found", target.string()));
    }
    return target;
  }
  std::vector<fs::path> dirs = {dir};
  dirs.insert(dirs.end(), search.begin(), search.end());
  if (auto found = find_in(value, dirs, file)) {
    return *found;
  }
  fail(where, "extends: " + not_found_message(value, dirs));
}

fs::path identity_of(const fs::path& file) {
  std::error_code ignored;
  fs::path canonical = fs::weakly_canonical(file, ignored);
  return canonical.empty() ? fs::absolute(file, ignored) : canonical;
}

// Loads `file` and, recursively, what it extends. `stack` holds the files being loaded, for
// cycle detection.
Loaded load_chain(const fs::path& file, const std::vector<fs::path>& search,
                  std::vector<fs::path>& stack) {
  Loaded loaded{parse_document(file), {}};
  auto extends = loaded.doc.value.find("extends");
  if (extends == loaded.doc.value.end() || extends->is_null()) {
    return loaded;
  }
  std::string where = loaded.doc.info["/extends"].location;
  if (!extends->is_string() || extends->get<std::string>().empty()) {
    fail(where, "extends: expected a profile name or path");
  }
  fs::path parent = resolve_extends(extends->get<std::string>(), file, search, where);
  stack.push_back(file);
  fs::path parent_identity = identity_of(parent);
  for (size_t i = 0; i < stack.size(); ++i) {
    if (identity_of(stack[i]) == parent_identity) {
      std::vector<std::string> cycle;
      for (size_t j = i; j < stack.size(); ++j) {
        cycle.push_back(stack[j].string());
      }
      cycle.push_back(parent.string());
      fail(where, fmt::format("extends cycle: {}", fmt::join(cycle, " -> ")));
    }
  }
  Loaded base = load_chain(parent, search, stack);
  stack.pop_back();
  // A profile's own name and parent are not inherited.
  for (const char* key : {"name", "extends"}) {
    base.doc.value.erase(key);
    erase_subtree(base.doc.info, std::string("/") + key);
  }
  overlay(base.doc.value, base.doc.info, loaded.doc.value, loaded.doc.info, "");
  loaded.doc = std::move(base.doc);
  loaded.chain = {parent};
  loaded.chain.insert(loaded.chain.end(), base.chain.begin(), base.chain.end());
  return loaded;
}

std::string expand_home(const std::string& path) {
  const auto home_dir = home_directory();
  if (!home_dir || path.empty() || path[0] != '~') {
    return path;
  }
  const std::string home = home_dir->string();
  if (path.size() == 1) {
    return home;
  }
  if (path[1] == '/') {
    return home + path.substr(1);
  }
  return path; // ~user is not ours to resolve
}

} // namespace sandboxer::profile_internal
