// The kernel names LaunchRecord reports (kernel_names.h): a profiler's demangled name without
// its return type, parameter list and the library's internal namespace.
#include <catch2/catch.hpp>

#include "kernel_names.h"

using cuflash::detail::display_kernel_name;

TEST_CASE("kernel names drop the return type, the parameters and cuflash::detail::",
          "[kernel_names]") {
  CHECK(display_kernel_name(
            "void cuflash::detail::sm90::forward_kernel<__half, cuflash::detail::sm90::"
            "ForwardConfig<64, 3, 128>, (cuflash::detail::sm90::ForwardKernel)0>(cuflash::detail::"
            "sm90::ForwardTmaParams<__half>)") ==
        "sm90::forward_kernel<__half, sm90::ForwardConfig<64, 3, 128>, (sm90::ForwardKernel)0>");
  CHECK(display_kernel_name("void cuflash::detail::merge_partials_kernel<float>(cuflash::detail::"
                            "MergeParams<float>, int (*)(int))") == "merge_partials_kernel<float>");
  CHECK(display_kernel_name("void kernel()") == "kernel");
}

TEST_CASE("kernel names the runtime did not demangle come back as they are", "[kernel_names]") {
  CHECK(display_kernel_name("_ZN7cuflash6detail4sm9014forward_kernelI6__halfEEvv") ==
        "_ZN7cuflash6detail4sm9014forward_kernelI6__halfEEvv");
  CHECK(display_kernel_name("").empty());
  CHECK(display_kernel_name("void ") == "");
}
