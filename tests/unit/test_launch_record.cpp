// LaunchRecord (cuflash/attention.h) on the host: which record a launch goes to and which call it
// belongs to. The launches are reported straight to record_launch(), as launch_kernel() does,
// for an address that holds no kernel: the runtime names none (and, without a GPU, cannot), so
// the name stays empty. The names of real launches are checked on the GPU ("[launches]").
#include <array>
#include <catch2/catch.hpp>
#include <thread>

#include "cuflash/attention.h"
#include "launch_log.h"

using cuflash::LaunchRecord;
using cuflash::detail::record_launch;
using cuflash::detail::RecordedCall;

namespace {

const int kNotAKernel = 0;

void launch(int threads) { record_launch(&kNotAKernel, dim3(4, 2, 1), threads, 1024); }

}  // namespace

TEST_CASE("a launch goes to the thread's innermost record", "[launch_record]") {
  launch(32);  // no record lives: nothing to do
  LaunchRecord outer;
  launch(64);
  {
    LaunchRecord inner;
    launch(128);
    REQUIRE(inner.launches().size() == 1);
    CHECK(inner.launches()[0].threads == 128);
  }
  launch(256);
  std::thread([] { launch(512); }).join();  // another thread's launch
  REQUIRE(outer.launches().size() == 2);
  CHECK(outer.launches()[0].threads == 64);
  CHECK(outer.launches()[1].threads == 256);
  CHECK(outer.launches()[0].grid == std::array<unsigned, 3>{4, 2, 1});
  CHECK(outer.launches()[0].shared_bytes == 1024);
  CHECK(outer.launches()[0].kernel.empty());
  CHECK(outer.launches()[0].call.empty());
}

TEST_CASE("a launch belongs to the outermost call", "[launch_record]") {
  LaunchRecord record;
  {
    const RecordedCall forward("forward");
    launch(128);
    const RecordedCall merge("merge_attention_partials");  // as forward() merging its splits
    launch(256);
  }
  {
    const RecordedCall backward("backward");
    launch(384);
  }
  REQUIRE(record.launches().size() == 3);
  CHECK(record.launches()[0].call == "forward");
  CHECK(record.launches()[1].call == "forward");
  CHECK(record.launches()[2].call == "backward");
}
