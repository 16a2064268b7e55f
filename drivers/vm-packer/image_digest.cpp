#include "drivers/vm-packer/image_digest.hpp"

#include <cstdlib>
#include <fmt/format.h>
#include <fstream>
#include <sys/stat.h>
#include <unistd.h>

#include <sandboxer/error.hpp>
#include <sandboxer/proc.hpp>

namespace sandboxer::drivers::vm_packer {
namespace {

namespace fs = std::filesystem;

fs::path cache_dir() {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  if (xdg && *xdg) {
    return fs::path(xdg) / "sandboxer" / "image-sha256";
  }
  if (home && *home) {
    return fs::path(home) / ".cache" / "sandboxer" / "image-sha256";
  }
  return {};
}

// One file per image path: the path's characters made safe for a file name.
std::string entry_name(const fs::path& image) {
  std::string name;
  for (char c : image.string()) {
    name += (c == '/' || c == '%') ? fmt::format("%{:02x}", static_cast<unsigned char>(c))
                                   : std::string(1, c);
  }
  return name.size() > 200 ? name.substr(name.size() - 200) : name;
}

std::string identity_of(const fs::path& image, const struct stat& st) {
  return fmt::format("{} {} {} {}.{}", image.string(), st.st_size, st.st_ino, st.st_mtim.tv_sec,
                     st.st_mtim.tv_nsec);
}

} // namespace

std::string image_digest(const fs::path& image) {
  struct stat st {};
  if (::stat(image.c_str(), &st) != 0) {
    throw DriverError(DriverError::Kind::error,
                      fmt::format("cannot read the image {}", image.string()));
  }
  const std::string identity = identity_of(image, st);
  const fs::path dir = cache_dir();
  const fs::path entry = dir.empty() ? fs::path() : dir / entry_name(image);
  if (!entry.empty()) {
    std::ifstream in(entry);
    std::string cached_identity, digest;
    if (std::getline(in, cached_identity) && std::getline(in, digest) &&
        cached_identity == identity && digest.size() == 64) {
      return digest;
    }
  }
  proc::Command command;
  command.argv = {"sha256sum", "--", image.string()};
  command.timeout = std::chrono::minutes(10);
  proc::Result result = proc::run(command);
  if (result.status() != 0 || result.out.size() < 64) {
    throw DriverError(DriverError::Kind::error,
                      fmt::format("cannot hash the image {}: {}", image.string(), result.err));
  }
  std::string digest = result.out.substr(0, 64);
  if (!entry.empty()) {
    std::error_code ec;
    fs::create_directories(dir, ec);
    const fs::path temporary = entry.string() + fmt::format(".{}.tmp", ::getpid());
    {
      std::ofstream out(temporary);
      out << identity << '\n' << digest << '\n';
    }
    fs::rename(temporary, entry, ec); // a cache: losing a race or a write costs a re-hash only
    if (ec) {
      fs::remove(temporary, ec);
    }
  }
  return digest;
}

} // namespace sandboxer::drivers::vm_packer
