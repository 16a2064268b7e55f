#pragma once

#include <string>
#include <string_view>

struct evp_md_ctx_st; // libcrypto's EVP_MD_CTX

namespace sandboxer {

// The SHA-256 digest of `data` as 64 lowercase hex digits.
std::string sha256_hex(std::string_view data);
// The same as a tagged digest, the form every hash sandboxer stores or prints takes:
// "sha256:" and the 64 hex digits.
std::string sha256_digest(std::string_view data);

// A digest of bytes that arrive in pieces (a copy's stream, its files).
class Sha256 {
public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void update(std::string_view data);
  // The 64 hex digits; once.
  std::string hex();

private:
  ::evp_md_ctx_st* m_context = nullptr;
};

} // namespace sandboxer
