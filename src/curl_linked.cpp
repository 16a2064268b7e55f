// libcurl linked in (cmake/static_curl.cmake: the HTTP-only static build): always there.
#include "src/curl_on_demand.hpp"

namespace sandboxer {

std::string curl_load_error() {
  return {};
}

} // namespace sandboxer
