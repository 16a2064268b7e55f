// SHA-256 from libcrypto (Debian's OpenSSL), loaded the first time a digest is asked for.
//
// Linked normally, libcrypto costs every start of sandboxer about 2.3 ms of dynamic loading
// (measured: 3.3 ms vs 5.6 ms for `--version`, 300 runs), paid by `list` and every other command
// that never hashes. Only commits (the history's hash chain), profile loading and `ledger verify`
// hash, so the library is opened with dlopen() on first use, as libcurl is (curl_on_demand.cpp).

#include "core/sha256.hpp"

#include <dlfcn.h>
#include <openssl/evp.h>

#include <sandboxer/error.hpp>

#include "sdk/bind_symbol.hpp"

namespace sandboxer {
namespace {

struct CryptoLibrary {
  int (*digest)(const void*, size_t, unsigned char*, unsigned int*, const EVP_MD*,
                ENGINE*) = nullptr;
  const EVP_MD* (*sha256)() = nullptr;
  // The streaming half, for what is hashed as it moves (`cp`).
  EVP_MD_CTX* (*context_new)() = nullptr;
  void (*context_free)(EVP_MD_CTX*) = nullptr;
  int (*init)(EVP_MD_CTX*, const EVP_MD*, ENGINE*) = nullptr;
  int (*update)(EVP_MD_CTX*, const void*, size_t) = nullptr;
  int (*final)(EVP_MD_CTX*, unsigned char*, unsigned int*) = nullptr;
  std::string error; // why it could not be loaded; empty when it was
};

CryptoLibrary load() {
  CryptoLibrary lib;
  void* handle = ::dlopen("libcrypto.so.3", RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* why = ::dlerror();
    lib.error = std::string("cannot load libcrypto (") + (why ? why : "libcrypto.so.3 not found") +
                "); install it with: apt-get install libssl3";
    return lib;
  }
  if (!bind_symbol(handle, "EVP_Digest", lib.digest) ||
      !bind_symbol(handle, "EVP_sha256", lib.sha256) ||
      !bind_symbol(handle, "EVP_MD_CTX_new", lib.context_new) ||
      !bind_symbol(handle, "EVP_MD_CTX_free", lib.context_free) ||
      !bind_symbol(handle, "EVP_DigestInit_ex", lib.init) ||
      !bind_symbol(handle, "EVP_DigestUpdate", lib.update) ||
      !bind_symbol(handle, "EVP_DigestFinal_ex", lib.final)) {
    lib = CryptoLibrary();
    lib.error = "the libcrypto found lacks the EVP digest functions; install libssl3";
  }
  return lib;
}

// Thread-safe: reap's workers commit in parallel.
const CryptoLibrary& library() {
  static const CryptoLibrary lib = load();
  return lib;
}

const CryptoLibrary& loaded_library() {
  const CryptoLibrary& lib = library();
  if (!lib.error.empty()) {
    throw Error(ExitCode::runtime, lib.error);
  }
  return lib;
}

std::string hex_of(const unsigned char* digest, unsigned int size) {
  if (size != 32) {
    throw Error(ExitCode::runtime, "libcrypto could not compute a SHA-256 digest");
  }
  static constexpr char k_hex[] = "0123456789abcdef";
  std::string hex(64, '0');
  for (unsigned i = 0; i < 32; ++i) {
    hex[2 * i] = k_hex[digest[i] >> 4];
    hex[2 * i + 1] = k_hex[digest[i] & 0xf];
  }
  return hex;
}

} // namespace

std::string sha256_hex(std::string_view data) {
  const CryptoLibrary& lib = loaded_library();
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  if (lib.digest(data.data(), data.size(), digest, &size, lib.sha256(), nullptr) != 1) {
    size = 0;
  }
  return hex_of(digest, size);
}

Sha256::Sha256() {
  const CryptoLibrary& lib = loaded_library();
  m_context = lib.context_new();
  if (!m_context || lib.init(m_context, lib.sha256(), nullptr) != 1) {
    throw Error(ExitCode::runtime, "libcrypto could not start a SHA-256 digest");
  }
}

Sha256::~Sha256() {
  if (m_context) {
    library().context_free(m_context);
  }
}

void Sha256::update(std::string_view data) {
  if (library().update(m_context, data.data(), data.size()) != 1) {
    throw Error(ExitCode::runtime, "libcrypto could not compute a SHA-256 digest");
  }
}

std::string Sha256::hex() {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  if (library().final(m_context, digest, &size) != 1) {
    size = 0;
  }
  return hex_of(digest, size);
}

std::string sha256_digest(std::string_view data) {
  return "sha256:" + sha256_hex(data);
}

} // namespace sandboxer
