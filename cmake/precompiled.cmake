# sandboxer_precompile(TARGET [HEADER...]): TARGET's sources compile against one precompiled
# header of the third-party and standard headers that nearly every file includes (nlohmann/json,
# fmt, spdlog), plus HEADER... Parsing these is most of a file's compile time here (measured in
# docs/testing.md). Only headers that never change go in: a precompiled header of our own would
# make a change to it recompile every file of the target, included or not.
# A build can turn it off with -DCMAKE_DISABLE_PRECOMPILE_HEADERS=ON.
set(SANDBOXER_PRECOMPILED_HEADERS
  <chrono> <filesystem> <functional> <map> <memory> <optional> <string> <string_view> <vector>
  <nlohmann/json.hpp> <fmt/format.h> <spdlog/spdlog.h>)

# GCC 12 loses the system-header mark of what a precompiled header holds, and its false
# -Warray-bounds and -Wstringop-* on std::string's own inlined code (GCC bugs 105329, 105651) then
# reach our files, which -Werror fails: the same files compile without them unprecompiled. Those
# three stay off in precompiled targets; ASan checks bounds at run time in the sanitizer build.
function(sandboxer_precompile target)
  target_precompile_headers(${target} PRIVATE ${SANDBOXER_PRECOMPILED_HEADERS} ${ARGN})
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    target_compile_options(${target} PRIVATE -Wno-array-bounds -Wno-stringop-overflow
                                             -Wno-stringop-overread)
  endif()
endfunction()
