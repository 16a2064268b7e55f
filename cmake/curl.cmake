# libcurl for the HTTP transport (sdk/http_curl.cpp): Debian's own libcurl.so.4, opened with
# dlopen() the first time a request is sent (sdk/curl_on_demand.cpp), so commands that never talk
# HTTP do not pay for loading it. Only its headers are used at build time. Security updates to
# Debian's curl and OpenSSL reach sandboxer with `apt-get upgrade`, no rebuild needed.
#
# Sets SANDBOXER_CURL_SOURCES (the .cpp for the core) and the target sandboxer_curl (headers).
find_package(CURL REQUIRED)
add_library(sandboxer_curl INTERFACE)
target_include_directories(sandboxer_curl INTERFACE ${CURL_INCLUDE_DIRS})
target_link_libraries(sandboxer_curl INTERFACE ${CMAKE_DL_LIBS})
set(SANDBOXER_CURL_SOURCES curl_on_demand.cpp)
