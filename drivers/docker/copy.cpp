#include "drivers/docker/copy.hpp"

#include <fmt/format.h>

#include <sandboxer/error.hpp>

namespace sandboxer::drivers::docker {
namespace {

// Go's os.FileMode bits (the engine's stat is Go's).
constexpr uint64_t k_go_dir = 1ULL << 31;
constexpr uint64_t k_go_symlink = 1ULL << 27;
constexpr uint64_t k_go_device = 1ULL << 26;
constexpr uint64_t k_go_pipe = 1ULL << 25;
constexpr uint64_t k_go_socket = 1ULL << 24;
constexpr uint64_t k_go_setuid = 1ULL << 23;
constexpr uint64_t k_go_setgid = 1ULL << 22;
constexpr uint64_t k_go_char_device = 1ULL << 21;
constexpr uint64_t k_go_sticky = 1ULL << 20;
constexpr uint64_t k_go_irregular = 1ULL << 19;

// More links than this on the way is a loop, as ELOOP is for the kernel (which allows 40).
constexpr int k_max_link_hops = 40;

} // namespace

PathInfo path_info_of_stat(const nlohmann::json& stat) {
  const uint64_t go_mode = stat.value("mode", uint64_t{0});
  PathInfo info;
  info.mode = static_cast<uint32_t>(go_mode & 0777);
  info.mode |= (go_mode & k_go_setuid) ? 04000 : 0;
  info.mode |= (go_mode & k_go_setgid) ? 02000 : 0;
  info.mode |= (go_mode & k_go_sticky) ? 01000 : 0;
  if (go_mode & k_go_dir) {
    info.kind = PathInfo::Kind::directory;
  } else if (go_mode & k_go_symlink) {
    info.kind = PathInfo::Kind::symlink;
    info.link_target = stat.value("linkTarget", "");
  } else if (go_mode &
             (k_go_device | k_go_pipe | k_go_socket | k_go_char_device | k_go_irregular)) {
    info.kind = PathInfo::Kind::other;
  } else {
    info.kind = PathInfo::Kind::file;
  }
  if (info.kind == PathInfo::Kind::file || info.kind == PathInfo::Kind::other) {
    info.size = stat.value("size", uint64_t{0});
  }
  return info;
}

PathInfo stat_following_links(EngineApi& api, const std::string& container,
                              const std::string& path) {
  std::string at = path;
  for (int hop = 0; hop <= k_max_link_hops; ++hop) {
    auto stat = api.stat_archive_path(container, at);
    if (!stat) {
      if (hop == 0) {
        return {};
      }
      // A link to nothing: the link itself, as stat(2) would fail and lstat(2) see it.
      PathInfo dangling;
      dangling.kind = PathInfo::Kind::symlink;
      dangling.mode = 0777;
      dangling.link_target = at;
      return dangling;
    }
    PathInfo info = path_info_of_stat(*stat);
    if (info.kind != PathInfo::Kind::symlink) {
      return info;
    }
    // The engine resolves the whole chain in the container's root, so the next stat is usually
    // the last; an empty or relative answer is not one to follow.
    if (!info.link_target.starts_with("/") || info.link_target == at) {
      throw DriverError(DriverError::Kind::error,
                        fmt::format("docker: the engine's stat of {} in container {} gave a link "
                                    "target that cannot be followed: \"{}\"",
                                    path, container.substr(0, 12), info.link_target));
    }
    at = info.link_target;
  }
  throw DriverError(DriverError::Kind::error,
                    fmt::format("docker: {} in container {}: too many levels of symbolic links",
                                path, container.substr(0, 12)));
}

} // namespace sandboxer::drivers::docker
