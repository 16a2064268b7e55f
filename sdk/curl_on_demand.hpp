#pragma once

#include <string>

namespace sandboxer {

// Why libcurl could not be loaded (see curl_on_demand.cpp), or empty: it was, or it has not been
// needed yet.
std::string curl_load_error();

// "libcurl/7.88.1 GnuTLS/3.7.9 zlib/1.2.13 ... (libcurl-gnutls.so.4)": the library this process
// uses for HTTP, loading it if needed; or why it cannot be loaded. For `--version`.
std::string curl_version_text();

} // namespace sandboxer
