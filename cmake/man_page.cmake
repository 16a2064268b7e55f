# Writes the man page by running the built binary (`sandboxer man`), so that it is made from the
# same command definitions as --help. Run with -DEXE=... -DOUTPUT=...
execute_process(COMMAND "${EXE}" man OUTPUT_FILE "${OUTPUT}" RESULT_VARIABLE failed
                ERROR_VARIABLE errors)
if(failed)
  message(FATAL_ERROR "sandboxer man failed: ${errors}")
endif()
