// The gRPC half of the driver is a shared module whose bytes are part of the executable
// (embed_module.S): the program stays one file, and only a command that talks to Modal pays for
// mapping grpc++ and its ~55 libraries. It is loaded from an anonymous memory file.

#include "drivers/modal/module_loader.hpp"

#include <cerrno>
#include <cstring>
#include <dlfcn.h>
#include <fmt/format.h>
#include <mutex>
#include <sys/mman.h>
#include <unistd.h>

#include <sandboxer/error.hpp>

extern "C" const char sandboxer_modal_module_begin[];
extern "C" const char sandboxer_modal_module_end[];

namespace sandboxer::drivers::modal {
namespace {

using Kind = DriverError::Kind;

struct Loaded {
  OpenDriverFunction open = nullptr;
  std::string error;
};

Loaded load() {
  const size_t size =
      static_cast<size_t>(sandboxer_modal_module_end - sandboxer_modal_module_begin);
  int fd = ::memfd_create("sandboxer-modal-driver", MFD_CLOEXEC);
  if (fd < 0) {
    return {nullptr, fmt::format("cannot make a memory file for the modal driver: {}",
                                 std::strerror(errno))};
  }
  for (size_t done = 0; done < size;) {
    ssize_t n = ::write(fd, sandboxer_modal_module_begin + done, size - done);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      int saved = errno;
      ::close(fd);
      return {nullptr,
              fmt::format("cannot write the modal driver to memory: {}", std::strerror(saved))};
    }
    done += static_cast<size_t>(n);
  }
  // The fd stays open: the mapping, and debuggers, refer to it by this path.
  const std::string path = fmt::format("/proc/self/fd/{}", fd);
  void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* why = ::dlerror();
    ::close(fd);
    return {nullptr,
            fmt::format("cannot load the modal driver's gRPC libraries ({}); install them with: "
                        "apt-get install libgrpc++1.51 libprotobuf32",
                        why ? why : "unknown error")};
  }
  void* symbol = ::dlsym(handle, "sandboxer_modal_open_driver_v1");
  if (!symbol) {
    return {nullptr, "the modal driver module has no entry point (a broken build)"};
  }
  return {reinterpret_cast<OpenDriverFunction>(symbol), ""};
}

} // namespace

OpenDriverFunction load_module() {
  static std::once_flag once;
  static Loaded loaded;
  std::call_once(once, [] { loaded = load(); });
  if (!loaded.open) {
    throw DriverError(Kind::error, loaded.error);
  }
  return loaded.open;
}

} // namespace sandboxer::drivers::modal
