# Kernel library sources (generated instantiations are listed in instantiations/list.cmake).
set(CUFLASH_KERNEL_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/api.cu)
