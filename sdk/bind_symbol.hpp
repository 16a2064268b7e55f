#pragma once

#include <dlfcn.h>

namespace sandboxer {

// Points `function` at the symbol `name` of a library opened with dlopen(); false when the
// library lacks it. For the libraries sandboxer loads on first use (libcurl, libcrypto).
template <typename Function> bool bind_symbol(void* handle, const char* name, Function& function) {
  function = reinterpret_cast<Function>(::dlsym(handle, name));
  return function != nullptr;
}

} // namespace sandboxer
