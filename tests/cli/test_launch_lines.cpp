// The lines `run` logs for the kernels the GPU ran (cli/backends.h, describe_launches()): one a
// kernel of a call, repeated launches of it in one call folded into one line.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "cli/backends.h"

using cuflash::KernelLaunch;

namespace {

KernelLaunch launch(const std::string& call, const std::string& kernel, unsigned ctas) {
  KernelLaunch l;
  l.call = call;
  l.kernel = kernel;
  l.grid = {ctas, 1, 1};
  l.threads = 384;
  l.shared_bytes = 117856;
  return l;
}

}  // namespace

TEST_CASE("run's kernel lines: one a kernel of a call, repeats folded", "[launches]") {
  const std::vector<std::string> lines = cuflash::cli::describe_launches({
      launch("forward", "split::split_forward_kernel<__half>", 132),
      launch("forward", "split::merge_partials_kernel<__half>", 64),
      launch("backward", "sm90::backward_kernel<__half>", 65535),
      launch("backward", "sm90::backward_kernel<__half>", 10),
      launch("backward", "", 8),
  });
  REQUIRE(lines.size() == 4);
  CHECK(lines[0] ==
        "forward: split::split_forward_kernel<__half>, grid 132 x 1 x 1 of 384 threads, 117856 "
        "bytes of shared memory");
  CHECK(lines[1].rfind("forward: split::merge_partials_kernel<__half>, grid 64 x 1 x 1", 0) == 0);
  CHECK(lines[2] ==
        "backward: sm90::backward_kernel<__half>, grid 65535 x 1 x 1 of 384 threads, 117856 "
        "bytes of shared memory (2 launches, the first's grid)");
  CHECK(lines[3].rfind("backward: ?, grid 8 x 1 x 1", 0) == 0);
  CHECK(cuflash::cli::describe_launches({}).empty());
}
