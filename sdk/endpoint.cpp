#include <arpa/inet.h>
#include <cstdlib>
#include <fmt/format.h>

#include <sandboxer/endpoint.hpp>
#include <sandboxer/error.hpp>

namespace sandboxer {
namespace {

// An address in 127.0.0.0/8 written as one (not a name such as 127.example.com), or localhost.
bool is_loopback_host(const std::string& host) {
  in_addr address{};
  if (host == "localhost" || host == "[::1]") {
    return true;
  }
  return inet_pton(AF_INET, host.c_str(), &address) == 1 && (ntohl(address.s_addr) >> 24) == 127;
}

// The host of an http:// URL's authority, brackets kept for IPv6, without any user part (in
// http://127.0.0.1@example.com the host is example.com).
std::string host_of(const std::string& url) {
  std::string authority = url.substr(url.find("://") + 3);
  authority = authority.substr(0, authority.find_first_of("/?#"));
  authority = authority.substr(authority.rfind('@') + 1);
  return authority.starts_with("[") ? authority.substr(0, authority.find(']') + 1)
                                    : authority.substr(0, authority.find(':'));
}

} // namespace

std::string checked_endpoint(std::string url, const std::string& what,
                             const std::string& credential) {
  while (url.ends_with("/")) {
    url.pop_back();
  }
  if (url.starts_with("https://")) {
    return url;
  }
  if (!url.starts_with("http://")) {
    throw DriverError(DriverError::Kind::invalid_spec,
                      fmt::format("{} \"{}\": expected an https:// URL", what, url));
  }
  if (!is_loopback_host(host_of(url))) {
    throw DriverError(DriverError::Kind::invalid_spec,
                      fmt::format("{} {}: plain http is allowed only to a loopback address (a "
                                  "local test server); use https:// so the {} is encrypted",
                                  what, url, credential));
  }
  return url;
}

std::string env_or_empty(const char* name) {
  const char* value = std::getenv(name);
  return value ? value : "";
}

} // namespace sandboxer
