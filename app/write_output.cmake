# cmake -DCUFLASH=<binary> -DARGS=<comma-separated arguments> -DOUTPUT=<file> -P write_output.cmake
# Runs the binary and writes its stdout to the file; fails the build when the binary fails.
string(REPLACE "," ";" args "${ARGS}")
execute_process(COMMAND ${CUFLASH} ${args}
  OUTPUT_FILE ${OUTPUT}.tmp RESULT_VARIABLE result ERROR_VARIABLE error)
if(NOT result EQUAL 0)
  file(REMOVE ${OUTPUT}.tmp)
  message(FATAL_ERROR "${CUFLASH} ${args} failed (${result}): ${error}")
endif()
file(RENAME ${OUTPUT}.tmp ${OUTPUT})
