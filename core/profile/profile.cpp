// Profiles (sandboxer/profile.hpp): the public calls. The loader's parts are in core/profile/.
#include "core/profile/profile.hpp"

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

#include "core/errors.hpp"
#include "core/names.hpp"
#include "core/owner.hpp"
#include "core/profile/internal.hpp"
#include "core/sha256.hpp"
#include "sdk/json/utf8.hpp"

namespace sandboxer {
namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace profile_internal;

std::string Profile::location_of(const std::string& json_pointer) const {
  std::string pointer = json_pointer;
  while (true) {
    if (auto it = locations.find(pointer); it != locations.end()) {
      return it->second;
    }
    size_t slash = pointer.rfind('/');
    if (slash == std::string::npos) {
      break;
    }
    pointer.resize(slash);
  }
  return path.string();
}

fs::path Profile::directory_of(const std::string& json_pointer) const {
  // location_of gives "file:line:col" (or the bare file): the file is what precedes the last two
  // numeric fields, so a path with ':' in it survives.
  std::string where = location_of(json_pointer);
  for (int field = 0; field < 2; ++field) {
    size_t colon = where.rfind(':');
    if (colon == std::string::npos || colon + 1 == where.size() ||
        where.find_first_not_of("0123456789", colon + 1) != std::string::npos) {
      break;
    }
    where.resize(colon);
  }
  fs::path file = where.empty() ? path : fs::path(where);
  return fs::absolute(file).parent_path();
}

std::vector<fs::path> profile_search_path(const std::optional<std::string>& cli_dir) {
  std::vector<fs::path> dirs;
  if (cli_dir && !cli_dir->empty()) {
    dirs.emplace_back(*cli_dir);
  }
  // $SANDBOXER_PROFILES may list several directories, separated by ':' like $PATH.
  for (auto& dir : directories_in("SANDBOXER_PROFILES")) {
    dirs.push_back(std::move(dir));
  }
  dirs.emplace_back("./profiles");
  if (auto config = config_home()) {
    dirs.push_back(*config / "sandboxer" / "profiles");
  }
  dirs.emplace_back("/etc/sandboxer/profiles");
  // The profiles shipped with sandboxer, installed beside the binary (cmake --install: PREFIX/bin
  // and PREFIX/share/sandboxer/profiles), wherever the prefix is.
  std::error_code ec;
  if (auto exe = fs::read_symlink("/proc/self/exe", ec); !ec) {
    dirs.push_back(exe.parent_path().parent_path() / "share" / "sandboxer" / "profiles");
  }
  return dirs;
}

fs::path find_profile(const std::string& name_or_path, const std::vector<fs::path>& search) {
  if (looks_like_path(name_or_path)) {
    if (is_file(name_or_path)) {
      return name_or_path;
    }
    throw NotFoundError(fmt::format("profile file {} not found (a value with \"/\" or a .yaml/.yml "
                                    "ending is read as a path; give a bare name to search the "
                                    "profile directories)",
                                    name_or_path));
  }
  if (auto found = find_in(name_or_path, search, std::nullopt)) {
    return *found;
  }
  throw NotFoundError(not_found_message(name_or_path, search));
}

Config load_config(const fs::path& file) {
  // An empty file (or one of comments only) configures nothing, as no file does.
  if (is_empty_document(file)) {
    Config config;
    config.path = file;
    return config;
  }
  Document doc = parse_document(file);
  return config_of(file, doc);
}

fs::path config_path() {
  if (const char* explicit_path = std::getenv("SANDBOXER_CONFIG");
      explicit_path && *explicit_path) {
    return explicit_path;
  }
  auto config = config_home();
  return config ? *config / "sandboxer" / "config.yaml" : fs::path("/etc/sandboxer/config.yaml");
}

Profile load_profile(const fs::path& file, const std::vector<fs::path>& search) {
  std::vector<fs::path> stack;
  Loaded loaded = load_chain(file, search, stack);
  return checked_profile(file, loaded.doc, std::move(loaded.chain));
}

std::vector<std::pair<std::string, fs::path>> list_profiles(const std::vector<fs::path>& search) {
  std::map<std::string, fs::path> found;
  for (const auto& dir : search) {
    std::error_code error;
    std::vector<fs::path> files;
    for (fs::directory_iterator it(dir, error), end; !error && it != end; it.increment(error)) {
      std::string extension = it->path().extension().string();
      if ((extension == ".yaml" || extension == ".yml") && is_file(it->path())) {
        files.push_back(it->path());
      }
    }
    // Sorted, so that x.yaml wins over x.yml in one directory, as in find_profile.
    std::sort(files.begin(), files.end());
    for (const auto& path : files) {
      found.emplace(path.stem().string(), path);
    }
  }
  return {found.begin(), found.end()};
}

} // namespace sandboxer
