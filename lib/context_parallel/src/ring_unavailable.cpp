// Ring for a build without NCCL: it says so (ring_available()) and refuses to be made, with the
// way to get it.
#include "cuflash/context_parallel/ring.h"

#include <string>

#include "cuflash/error.h"

namespace cuflash::context_parallel {
namespace {

[[noreturn]] void refuse_without_nccl(const std::string& what) {
  throw Error(Error::Kind::unsupported,
              what + ": this build has no NCCL (configure with -DCUFLASH_NCCL=ON and NCCL "
                     "installed, or NCCL_ROOT pointing at it)");
}

}  // namespace

bool ring_available() { return false; }
std::string nccl_version() { return ""; }

struct Ring::Impl {};

Ring::Ring(const std::vector<int>&) { refuse_without_nccl("context_parallel::Ring"); }
Ring::~Ring() = default;
int Ring::ranks() const { return 0; }
int Ring::device(int) const { return 0; }
cudaStream_t Ring::stream(int) const { return nullptr; }
void Ring::forward(const ForwardArgs&, Layout, const std::vector<RankForward>&) {
  refuse_without_nccl("context_parallel::Ring::forward");
}
void Ring::backward(const BackwardArgs&, Layout, const std::vector<RankBackward>&) {
  refuse_without_nccl("context_parallel::Ring::backward");
}
CommunicationTimes Ring::last_communication() const { return {}; }
DevicePasses ring_passes(int, ShardCopies) { refuse_without_nccl("context_parallel::ring_passes"); }

}  // namespace cuflash::context_parallel
