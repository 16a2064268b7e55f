# libcurl for the HTTP transport (src/http_curl.cpp), one of two ways:
#
# - static: an HTTP(S)-only libcurl built here from Debian's curl source package, which
#   scripts/fetch-curl-source.sh unpacks in .deps/curl, and linked in with OpenSSL's static
#   archives. Loading Debian's libcurl.so costs 5-10 ms per command on a small VM, because it links
#   every protocol curl knows and ~30 libraries with them (Kerberos, LDAP, RTMP, libssh2, GnuTLS);
#   this one adds ~0.5 ms to every start-up (OpenSSL's relative relocations) and nothing
#   else.
# - on-demand: without that source, Debian's libcurl.so.4 opened with dlopen() on first use
#   (src/curl_on_demand.cpp), so commands that never talk HTTP do not pay for it.
#
# Sets SANDBOXER_CURL_MODE (static | on-demand), SANDBOXER_CURL_SOURCES (the .cpp for the core) and
# the target sandboxer_curl (headers, and with static the library).
set(SANDBOXER_CURL_SOURCE "${PROJECT_SOURCE_DIR}/.deps/curl"
    CACHE PATH "Debian's curl source package, unpacked (scripts/fetch-curl-source.sh)")
option(SANDBOXER_STATIC_CURL "Link an HTTP-only libcurl built from SANDBOXER_CURL_SOURCE" ON)

add_library(sandboxer_curl INTERFACE)

set(curl_static_possible FALSE)
if(SANDBOXER_STATIC_CURL AND EXISTS "${SANDBOXER_CURL_SOURCE}/CMakeLists.txt")
  set(OPENSSL_USE_STATIC_LIBS TRUE)
  find_package(OpenSSL 3)
  set(curl_static_possible ${OPENSSL_FOUND})
endif()
if(curl_static_possible)
  include(ExternalProject)
  # A new Debian version (fetch-curl-source.sh writes it) is built in a directory of its own.
  set(curl_version_file "${SANDBOXER_CURL_SOURCE}.version")
  set(curl_version unknown)
  if(EXISTS "${curl_version_file}")
    file(STRINGS "${curl_version_file}" curl_version LIMIT_COUNT 1)
    set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${curl_version_file}")
  endif()
  set(curl_binary_dir "${CMAKE_BINARY_DIR}/curl-static-${curl_version}")
  set(curl_library "${curl_binary_dir}/lib/libcurl.a")
  set(curl_launcher "")
  if(SANDBOXER_CCACHE)
    set(curl_launcher "-DCMAKE_C_COMPILER_LAUNCHER=${SANDBOXER_CCACHE}")
  endif()
  # Only what the transport uses: HTTP and HTTPS (TLS by OpenSSL, verified against Debian's CA
  # store, as Debian's libcurl does), unix sockets, proxies from the environment. No other
  # protocol, compression, IDN, PSL, HTTP/2 or Kerberos: each would bring a library back.
  ExternalProject_Add(curl_static
    SOURCE_DIR "${SANDBOXER_CURL_SOURCE}"
    BINARY_DIR "${curl_binary_dir}"
    CMAKE_ARGS
      -DCMAKE_BUILD_TYPE=Release
      ${curl_launcher}
      -DCMAKE_POSITION_INDEPENDENT_CODE=ON
      -DBUILD_SHARED_LIBS=OFF
      -DBUILD_CURL_EXE=OFF
      -DBUILD_TESTING=OFF
      -DENABLE_MANUAL=OFF
      -DCURL_ENABLE_EXPORT_TARGET=OFF
      -DPICKY_COMPILER=OFF
      -DHTTP_ONLY=ON
      -DCURL_DISABLE_COOKIES=ON
      -DCURL_DISABLE_NETRC=ON
      -DCURL_DISABLE_ALTSVC=ON
      -DCURL_DISABLE_HSTS=ON
      -DCURL_USE_OPENSSL=ON
      -DOPENSSL_USE_STATIC_LIBS=ON
      -DCURL_ZLIB=OFF
      -DCURL_BROTLI=OFF
      -DCURL_ZSTD=OFF
      -DUSE_NGHTTP2=OFF
      -DUSE_LIBIDN2=OFF
      -DCURL_USE_LIBPSL=OFF
      -DCURL_USE_LIBSSH2=OFF
      -DCURL_USE_GSSAPI=OFF
      -DENABLE_UNIX_SOCKETS=ON
      -DENABLE_THREADED_RESOLVER=ON
      -DCURL_CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt
      -DCURL_CA_PATH=/etc/ssl/certs
    BUILD_COMMAND ${CMAKE_COMMAND} --build . --target libcurl
    INSTALL_COMMAND ""
    BUILD_BYPRODUCTS "${curl_library}"
    # Its own ninja decides what is out of date (a hand edit under .deps/curl, too); a no-op
    # when nothing is, and nothing relinks then.
    BUILD_ALWAYS TRUE
    EXCLUDE_FROM_ALL TRUE)
  add_library(sandboxer_curl_archive STATIC IMPORTED GLOBAL)
  set_target_properties(sandboxer_curl_archive PROPERTIES IMPORTED_LOCATION "${curl_library}")
  add_dependencies(sandboxer_curl_archive curl_static)
  target_link_libraries(sandboxer_curl INTERFACE sandboxer_curl_archive OpenSSL::SSL OpenSSL::Crypto
                                                 Threads::Threads ${CMAKE_DL_LIBS})
  target_include_directories(sandboxer_curl INTERFACE "${SANDBOXER_CURL_SOURCE}/include")
  target_compile_definitions(sandboxer_curl INTERFACE CURL_STATICLIB)
  set(SANDBOXER_CURL_MODE static)
  set(SANDBOXER_CURL_SOURCES curl_linked.cpp)
else()
  if(SANDBOXER_STATIC_CURL)
    message(STATUS "sandboxer: no curl source in ${SANDBOXER_CURL_SOURCE} (or no OpenSSL static "
                   "archives: libssl-dev): run scripts/fetch-curl-source.sh for the static libcurl")
  endif()
  find_package(CURL REQUIRED)
  # Only the headers: the library is opened at run time.
  target_include_directories(sandboxer_curl INTERFACE ${CURL_INCLUDE_DIRS})
  target_link_libraries(sandboxer_curl INTERFACE ${CMAKE_DL_LIBS})
  set(SANDBOXER_CURL_MODE on-demand)
  set(SANDBOXER_CURL_SOURCES curl_on_demand.cpp)
endif()
if(SANDBOXER_CURL_MODE STREQUAL "static")
  message(STATUS "sandboxer: libcurl static (Debian's curl ${curl_version}, HTTP only)")
else()
  message(STATUS "sandboxer: libcurl on-demand")
endif()
