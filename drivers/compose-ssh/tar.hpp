#pragma once

#include <string>
#include <vector>

namespace sandboxer::drivers::compose_ssh {

struct TarEntry {
  std::string path; // relative, '/'-separated; a trailing '/' makes a directory
  std::string content;
  int mode = 0600;
};

// A POSIX ustar archive of `entries`: the files a call sends to the host in one `tar -x`, with no
// remote shell redirection. Throws std::invalid_argument for a path tar cannot hold (over 255
// bytes, or with no split into 155 + 100) or an absolute one.
std::string tar_archive(const std::vector<TarEntry>& entries);

} // namespace sandboxer::drivers::compose_ssh
