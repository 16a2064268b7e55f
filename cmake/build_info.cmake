# Writes build_info.hpp (the commit, the compiler, the date) at every build, touching it only when
# it changes: `sandboxer --version` names the commit it was built from without a stale configure.
# Run with -DSOURCE_DIR=... -DOUTPUT=... -DCOMPILER=...
execute_process(COMMAND git -C "${SOURCE_DIR}" rev-parse --short=12 HEAD
                OUTPUT_VARIABLE commit OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET
                RESULT_VARIABLE failed)
if(failed OR commit STREQUAL "")
  set(commit "unknown")
else()
  execute_process(COMMAND git -C "${SOURCE_DIR}" status --porcelain --untracked-files=no
                  OUTPUT_VARIABLE dirty OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(NOT dirty STREQUAL "")
    string(APPEND commit "-dirty")
  endif()
endif()
# The man page's date: $SOURCE_DATE_EPOCH's when set (reproducible builds), else the commit's,
# so that it changes with the sources rather than with the day of the build.
if(DEFINED ENV{SOURCE_DATE_EPOCH})
  string(TIMESTAMP date "%Y-%m-%d" UTC)
else()
  execute_process(COMMAND git -C "${SOURCE_DIR}" log -1 --format=%cs
                  OUTPUT_VARIABLE date OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
endif()
set(text "#pragma once\n#define SANDBOXER_COMMIT \"${commit}\"\n#define SANDBOXER_COMPILER \"${COMPILER}\"\n#define SANDBOXER_DATE \"${date}\"\n")
if(EXISTS "${OUTPUT}")
  file(READ "${OUTPUT}" old)
endif()
if(NOT old STREQUAL text)
  file(WRITE "${OUTPUT}" "${text}")
endif()
