# cuflash_default_cuda_architectures(<out-var>): the GPU architectures to compile for when the
# user names none: those of the GPUs this machine has (as CMake's "native" would, but with 90a
# for compute capability 9.0, whose wgmma kernels exist only in sm_90a code), read from
# nvidia-smi; the portable default list when there is no GPU or no nvidia-smi.
set(CUFLASH_DEFAULT_CUDA_ARCHITECTURES "80;86;89;90a")

function(cuflash_default_cuda_architectures out_var)
  set(architectures "")
  find_program(CUFLASH_NVIDIA_SMI nvidia-smi)
  if(CUFLASH_NVIDIA_SMI)
    execute_process(
      COMMAND ${CUFLASH_NVIDIA_SMI} --query-gpu=compute_cap --format=csv,noheader
      RESULT_VARIABLE result OUTPUT_VARIABLE capabilities ERROR_QUIET
      OUTPUT_STRIP_TRAILING_WHITESPACE TIMEOUT 20)
    if(result EQUAL 0)
      string(REPLACE "\n" ";" capabilities "${capabilities}")
      foreach(capability IN LISTS capabilities)
        string(STRIP "${capability}" capability)
        # The kernels need compute capability 8.0 or newer.
        if(capability MATCHES "^([0-9]+)\\.([0-9]+)$" AND CMAKE_MATCH_1 GREATER_EQUAL 8)
          set(architecture "${CMAKE_MATCH_1}${CMAKE_MATCH_2}")
          if(architecture STREQUAL "90")
            set(architecture "90a")
          endif()
          list(APPEND architectures ${architecture})
        endif()
      endforeach()
      list(REMOVE_DUPLICATES architectures)
    endif()
  endif()
  if(architectures)
    message(STATUS "cuflash: compiling for the GPUs found here: ${architectures}")
  else()
    set(architectures "${CUFLASH_DEFAULT_CUDA_ARCHITECTURES}")
    message(STATUS "cuflash: no GPU found here; compiling for ${architectures}")
  endif()
  set(${out_var} "${architectures}" PARENT_SCOPE)
endfunction()
