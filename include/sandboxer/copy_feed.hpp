#pragma once

#include <functional>

#include <sandboxer/driver.hpp>

namespace sandboxer {

// For a driver whose copy_in hands the stream to a program's stdin (tar, ssh, docker exec -i):
// runs `use` with a readable fd that carries everything `source` gives, fed by a thread as it is
// read, then the end of the stream. Returns what `use` returned. When `use` stops reading early,
// the feed stops; a failure of the source (an unreadable local file, a signal) is rethrown after
// `use` returned, before anything `use` threw, since the program saw a cut stream because of it.
int with_source_as_fd(CopySource& source, const std::function<int(int fd)>& use);

} // namespace sandboxer
