// libcurl, loaded the first time a driver sends a request rather than when the program starts.
//
// Linked normally, libcurl and the 30 libraries it pulls in (TLS, Kerberos, LDAP, ...) make up
// about three quarters of the dynamic loader's work at every start of sandboxer: some 15-25 ms on
// a small VM, paid by `list`, `reap` and every other command that never talks HTTP. So the core
// does not link libcurl; this file defines the few libcurl functions it calls, and each one
// forwards to the real library, opened with dlopen() on first use. The code that uses libcurl
// (http_curl.cpp) is written against <curl/curl.h> as usual.

#include "sdk/curl_on_demand.hpp"

#include <cstdarg>
#include <curl/curl.h>
#include <dlfcn.h>
#include <string>

#include "sdk/bind_symbol.hpp"

namespace sandboxer {
namespace {

struct CurlLibrary {
  CURLcode (*global_init)(long) = nullptr;
  CURL* (*easy_init)() = nullptr;
  void (*easy_cleanup)(CURL*) = nullptr;
  void (*easy_reset)(CURL*) = nullptr;
  CURLcode (*easy_perform)(CURL*) = nullptr;
  CURLcode (*easy_setopt)(CURL*, CURLoption, ...) = nullptr;
  CURLcode (*easy_getinfo)(CURL*, CURLINFO, ...) = nullptr;
  const char* (*easy_strerror)(CURLcode) = nullptr;
  char* (*version)() = nullptr;
  std::string soname;
  curl_slist* (*slist_append)(curl_slist*, const char*) = nullptr;
  void (*slist_free_all)(curl_slist*) = nullptr;
  std::string error; // why it could not be loaded; empty when it was
};

CurlLibrary load() {
  CurlLibrary lib;
  // The soname of libcurl's ABI 4, built with GnuTLS (Debian's libcurl3-gnutls, which git needs, so
  // it is usually there) or OpenSSL (libcurl4). The GnuTLS build first: both pull in the same ~30
  // libraries (the OpenSSL one gets GnuTLS through LDAP and RTMP, and the GnuTLS one OpenSSL's
  // libcrypto through libssh2), but its curl_global_init() skips OpenSSL's configuration
  // (openssl.cnf) and takes ~1.1 ms instead of ~1.9 ms here (bench/docker.sh,
  // docs/drivers/docker.md).
  void* handle = nullptr;
  for (const char* name : {"libcurl-gnutls.so.4", "libcurl.so.4"}) {
    if ((handle = ::dlopen(name, RTLD_NOW | RTLD_LOCAL))) {
      lib.soname = name;
      break;
    }
  }
  if (!handle) {
    const char* why = ::dlerror();
    lib.error = std::string("cannot load libcurl (") + (why ? why : "libcurl.so.4 not found") +
                "); install it with: apt-get install libcurl4";
    return lib;
  }
  const bool complete = bind_symbol(handle, "curl_global_init", lib.global_init) &&
                        bind_symbol(handle, "curl_easy_init", lib.easy_init) &&
                        bind_symbol(handle, "curl_easy_cleanup", lib.easy_cleanup) &&
                        bind_symbol(handle, "curl_easy_reset", lib.easy_reset) &&
                        bind_symbol(handle, "curl_easy_perform", lib.easy_perform) &&
                        bind_symbol(handle, "curl_easy_setopt", lib.easy_setopt) &&
                        bind_symbol(handle, "curl_easy_getinfo", lib.easy_getinfo) &&
                        bind_symbol(handle, "curl_easy_strerror", lib.easy_strerror) &&
                        bind_symbol(handle, "curl_slist_append", lib.slist_append) &&
                        bind_symbol(handle, "curl_slist_free_all", lib.slist_free_all);
  bind_symbol(handle, "curl_version", lib.version); // only for --version: optional
  if (!complete) {
    lib = CurlLibrary();
    lib.error =
        "the libcurl found lacks functions sandboxer needs; install libcurl4 (7.68 or later)";
  }
  return lib;
}

// Thread-safe: reap destroys in parallel, and the first requests may start together.
const CurlLibrary& library() {
  static const CurlLibrary lib = load();
  return lib;
}

// The type of an option's argument is encoded in its number (curl.h: CURLOPTTYPE_*).
bool takes_long(CURLoption option) {
  return option < CURLOPTTYPE_OBJECTPOINT;
}
bool takes_off_t(CURLoption option) {
  return option >= CURLOPTTYPE_OFF_T && option < CURLOPTTYPE_BLOB;
}

} // namespace

std::string curl_load_error() {
  return library().error;
}

std::string curl_version_text() {
  const CurlLibrary& lib = library();
  if (!lib.error.empty()) {
    return lib.error;
  }
  return std::string(lib.version ? lib.version() : "libcurl") + " (" + lib.soname + ")";
}

} // namespace sandboxer

using sandboxer::library;

extern "C" {

CURLcode curl_global_init(long flags) {
  return library().global_init ? library().global_init(flags) : CURLE_FAILED_INIT;
}

CURL* curl_easy_init() {
  return library().easy_init ? library().easy_init() : nullptr;
}

// Only ever called on a handle that curl_easy_init() made, so the library is loaded.
void curl_easy_cleanup(CURL* curl) {
  library().easy_cleanup(curl);
}

void curl_easy_reset(CURL* curl) {
  library().easy_reset(curl);
}

CURLcode curl_easy_perform(CURL* curl) {
  return library().easy_perform(curl);
}

CURLcode curl_easy_setopt(CURL* curl, CURLoption option, ...) {
  va_list args;
  va_start(args, option);
  CURLcode code;
  if (sandboxer::takes_long(option)) {
    code = library().easy_setopt(curl, option, va_arg(args, long));
  } else if (sandboxer::takes_off_t(option)) {
    code = library().easy_setopt(curl, option, va_arg(args, curl_off_t));
  } else {
    // Object and function pointers and blobs: all passed as a pointer.
    code = library().easy_setopt(curl, option, va_arg(args, void*));
  }
  va_end(args);
  return code;
}

// Every CURLINFO takes a pointer to where the answer goes.
CURLcode curl_easy_getinfo(CURL* curl, CURLINFO info, ...) {
  va_list args;
  va_start(args, info);
  void* out = va_arg(args, void*);
  va_end(args);
  return library().easy_getinfo(curl, info, out);
}

const char* curl_easy_strerror(CURLcode code) {
  return library().easy_strerror ? library().easy_strerror(code) : "libcurl is not loaded";
}

curl_slist* curl_slist_append(curl_slist* list, const char* text) {
  return library().slist_append ? library().slist_append(list, text) : nullptr;
}

void curl_slist_free_all(curl_slist* list) {
  if (list) {
    library().slist_free_all(list);
  }
}

} // extern "C"
