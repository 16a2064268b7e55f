#pragma once

#include <string>

namespace sandboxer {

// Why libcurl could not be loaded (see curl_on_demand.cpp), or empty: it was, or it has not been
// needed yet.
std::string curl_load_error();

} // namespace sandboxer
