# sandboxer_precompile(TARGET [HEADER...]): TARGET's sources compile against one precompiled
# header of the third-party and standard headers that nearly every file includes (nlohmann/json,
# fmt, spdlog), plus HEADER... Parsing these is most of a file's compile time here (measured in
# docs/testing.md). Only headers that never change go in: a precompiled header of our own would
# make a change to it recompile every file of the target, included or not.
# sandboxer_precompile_headers(TARGET HEADER...): the same with HEADER... alone, for targets that
# do not link fmt and spdlog (the fake Modal server).
# A build can turn both off with -DCMAKE_DISABLE_PRECOMPILE_HEADERS=ON.
set(SANDBOXER_PRECOMPILED_HEADERS
  <chrono> <filesystem> <functional> <map> <memory> <optional> <string> <string_view> <vector>
  <nlohmann/json.hpp> <fmt/format.h> <spdlog/spdlog.h>)

function(sandboxer_precompile target)
  sandboxer_precompile_headers(${target} ${SANDBOXER_PRECOMPILED_HEADERS} ${ARGN})
endfunction()

function(sandboxer_precompile_headers target)
  # In a unity build a target of one or two unity sources parses the headers once or twice
  # anyway: precompiling them first would only add a compile (the modal module's grpc++ header
  # took 27 s to precompile, for one source).
  get_target_property(unity ${target} UNITY_BUILD)
  if(unity)
    get_target_property(sources ${target} SOURCES)
    list(FILTER sources INCLUDE REGEX "\\.(cpp|cc|cxx)$")
    list(LENGTH sources count)
    get_target_property(batch ${target} UNITY_BUILD_BATCH_SIZE)
    if(NOT batch)
      set(batch 8)
    endif()
    math(EXPR two_batches "2 * ${batch}")
    if(count LESS_EQUAL two_batches)
      return()
    endif()
  endif()
  target_precompile_headers(${target} PRIVATE ${ARGN})
  # GCC 12 loses the system-header mark of what a precompiled header holds, and its false
  # -Warray-bounds and -Wstringop-* on std::string's own inlined code (GCC bugs 105329, 105651)
  # then reach our files, which -Werror fails: the same files compile without them unprecompiled.
  # Those three stay off in precompiled targets; ASan checks bounds at run time in the sanitizer
  # build.
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    target_compile_options(${target} PRIVATE -Wno-array-bounds -Wno-stringop-overflow
                                             -Wno-stringop-overread)
  endif()
endfunction()
