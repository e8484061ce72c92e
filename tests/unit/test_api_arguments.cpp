// Arguments the public API (and single-GPU context parallelism over it) refuses on the host,
// before anything reaches a device (so these run without a GPU): each throws cuflash::Error of
// kind invalid_argument naming what is wrong.
#include <catch2/catch.hpp>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>

#include "cuflash/attention.h"
#include "cuflash/context_parallel/single_gpu.h"
#include "cuflash/host_runner.h"

using Catch::Matchers::Contains;
using cuflash::Error;

namespace {

// Throws `call` an invalid_argument Error whose message contains `words`?
void require_invalid(const std::function<void()>& call, const std::string& words) {
  try {
    call();
  } catch (const Error& e) {
    INFO(e.what());
    CHECK(e.kind() == Error::Kind::invalid_argument);
    CHECK_THAT(e.what(), Contains(words));
    return;
  }
  FAIL("no cuflash::Error thrown (expected one saying '" << words << "')");
}

// Device memory is never touched before the checks: any aligned address serves.
alignas(256) unsigned char g_memory[4096];

// A varlen batch of `batch` sequences of at most 16 tokens (queries and keys), whose totals the
// caller sets; thd tensors of `total` tokens, 4 heads of head_dim 64.
template <typename Args>
Args varlen_args(int64_t batch, int64_t total_q, int64_t total_k) {
  Args args;
  args.shape = cuflash::AttentionShape{batch, 4, 4, 16, 16, 64};
  args.dtype = cuflash::DType::fp16;
  args.varlen.cu_seqlens_q = reinterpret_cast<const int32_t*>(g_memory);
  args.varlen.cu_seqlens_k = reinterpret_cast<const int32_t*>(g_memory);
  args.varlen.total_q = total_q;
  args.varlen.total_k = total_k;
  return args;
}

}  // namespace

TEST_CASE("api: a varlen total above batch x the longest length is refused", "[api][varlen]") {
  // 2 sequences of at most 16 tokens hold at most 32: a total of 1000 (a buffer's capacity, say)
  // would size nothing and be written past the workspace.
  require_invalid([] { cuflash::forward(varlen_args<cuflash::ForwardArgs>(2, 1000, 32)); },
                  "varlen.total_q (1000) is more than shape.batch x shape.seq_q (32)");
  require_invalid([] { cuflash::backward(varlen_args<cuflash::BackwardArgs>(2, 32, 33)); },
                  "varlen.total_k (33) is more than shape.batch x shape.seq_k (32)");
}

TEST_CASE("api: forward_args() of an inconsistent varlen problem throws, never reads past",
          "[api][varlen]") {
  cuflash::Problem p;
  p.shape = cuflash::AttentionShape{1, 4, 4, 8, 8, 64};
  p.layout = cuflash::Layout::thd;
  p.seqlens_q = {3, 5};  // seqlens_k left empty: one length short of each sequence's pair
  const cuflash::DenseTensors tensors;
  require_invalid([&] { cuflash::forward_args(p, tensors); },
                  "seqlens_q gives 2 lengths and seqlens_k 0");
  p.seqlens_k = {3, 5};
  p.alibi_slopes = {0.5f, 0.25f, 0.125f};  // neither [heads] nor [sequences, heads]
  cuflash::DenseTensors with_slopes;
  with_slopes.alibi_slopes = reinterpret_cast<const float*>(g_memory);
  require_invalid([&] { cuflash::forward_args(p, with_slopes); }, "3 ALiBi slopes for 4 heads");
}

TEST_CASE("api: single-GPU context parallelism checks the whole problem's tensors first",
          "[api][context_parallel]") {
  // B=1, H=2, S=64, D=64 bhsd: a head is 4096 elements apart. Chunks of 16 rows would not see
  // heads 1024 elements apart overlap; the whole problem does.
  const cuflash::AttentionShape shape{1, 2, 2, 64, 64, 64};
  auto* data = static_cast<void*>(g_memory);
  const cuflash::TensorRef dense =
      cuflash::make_tensor_ref(data, cuflash::Layout::bhsd, 1, 2, 64, 64);
  cuflash::ForwardArgs forward;
  forward.shape = shape;
  forward.q = forward.k = forward.v = forward.out = dense;
  forward.lse = reinterpret_cast<float*>(g_memory);
  forward.out.head_stride = 1024;  // heads overlap
  require_invalid([&] { cuflash::context_parallel::single_gpu_forward(forward, 2); },
                  "out.head_stride");

  cuflash::BackwardArgs backward = cuflash::backward_args_for(forward);
  backward.out = backward.dout = backward.dq = backward.dk = backward.dv = dense;
  backward.dq.data = g_memory + 2;  // not 16-byte aligned
  require_invalid([&] { cuflash::context_parallel::single_gpu_backward(backward, 2); },
                  "dq.data must be 16-byte aligned");
}

TEST_CASE("api: merge_attention_partials refuses outputs over its partials", "[api][merge]") {
  cuflash::MergePartialsArgs args;
  args.splits = 2;
  args.seq_q = 4;
  args.head_dim = 8;  // partial_out: 2 x 4 rows x 8 floats = 256 bytes, partial_lse 32 bytes
  args.partial_out = reinterpret_cast<const float*>(g_memory);
  args.partial_lse = reinterpret_cast<const float*>(g_memory + 256);
  args.out = cuflash::make_tensor_ref(g_memory + 1024, cuflash::Layout::bhsd, 1, 1, 4, 8);
  args.lse = reinterpret_cast<float*>(g_memory + 2048);
  cuflash::MergePartialsArgs over_out = args;
  over_out.out.data = g_memory + 64;  // inside partial_out
  require_invalid([&] { cuflash::merge_attention_partials(over_out); }, "out overlaps partial_out");
  cuflash::MergePartialsArgs over_lse = args;
  over_lse.lse = reinterpret_cast<float*>(g_memory + 272);  // inside partial_lse
  require_invalid([&] { cuflash::merge_attention_partials(over_lse); }, "lse overlaps partial_lse");
}

namespace {

// Dense fp16 backward arguments of B=1, H=2, S=64, D=64 (bhsd) over g_memory: every check of
// the tensors passes.
cuflash::BackwardArgs dense_backward_args() {
  const cuflash::TensorRef dense =
      cuflash::make_tensor_ref(g_memory, cuflash::Layout::bhsd, 1, 2, 64, 64);
  cuflash::BackwardArgs args;
  args.shape = cuflash::AttentionShape{1, 2, 2, 64, 64, 64};
  args.q = args.k = args.v = args.out = args.dout = args.dq = args.dk = args.dv = dense;
  args.lse = reinterpret_cast<const float*>(g_memory);
  return args;
}

}  // namespace

TEST_CASE("api: gradient sums are given whole or not at all", "[api][sums]") {
  // enabled() looks at sums.dq: dk and dv alone would be ignored and the gradients written in
  // the dtype instead.
  cuflash::BackwardArgs args = dense_backward_args();
  args.sums.dk = args.sums.dv = args.dk;
  require_invalid([&] { cuflash::backward(args); },
                  "sums.dk or sums.dv is set but sums.dq is null");
  require_invalid([&] { cuflash::check_dense_backward_args(args, "caller"); },
                  "caller: sums.dk or sums.dv is set");
}

TEST_CASE("api: a varlen batch or paged K/V given in part is refused, not run densely",
          "[api][varlen][paged]") {
  // Key offsets without query offsets once ran as a dense batch.
  auto forward = varlen_args<cuflash::ForwardArgs>(2, 32, 32);
  forward.varlen.cu_seqlens_q = nullptr;
  require_invalid([&] { cuflash::forward(forward); }, "forward: varlen.cu_seqlens_q is null");
  require_invalid([&] { cuflash::check_problem_args(forward, "caller"); },
                  "caller: varlen.cu_seqlens_q is null");
  auto backward = varlen_args<cuflash::BackwardArgs>(2, 32, 32);
  backward.varlen.cu_seqlens_q = nullptr;
  backward.varlen.cu_seqlens_k = nullptr;  // the totals alone
  require_invalid([&] { cuflash::backward(backward); }, "backward: varlen.cu_seqlens_q is null");
  require_invalid([&] { cuflash::check_dense_backward_args(backward, "caller"); },
                  "caller: varlen.cu_seqlens_q is null");
  // Pools without a block table once failed on "k.data is null", naming neither.
  cuflash::ForwardArgs paged;
  paged.shape = cuflash::AttentionShape{1, 4, 4, 1, 64, 64};
  paged.paged.k_pages = g_memory;
  paged.paged.v_pages = g_memory;
  paged.paged.num_pages = 4;
  paged.paged.page_size = 16;
  require_invalid([&] { cuflash::forward(paged); }, "forward: paged.block_table is null");
  require_invalid([&] { cuflash::check_dense_forward_args(paged, "caller"); },
                  "caller: paged.block_table is null");
}

TEST_CASE("api: check_problem_args() refuses what forward() and backward() refuse of a problem",
          "[api]") {
  cuflash::ForwardArgs forward;
  forward.shape = cuflash::AttentionShape{1, 4, 4, 16, 16, 300};  // no tensors: not read
  try {
    cuflash::check_problem_args(forward, "ring");
    FAIL("head_dim 300 taken");
  } catch (const Error& e) {
    CHECK(e.kind() == Error::Kind::unsupported);
    CHECK_THAT(e.what(), Contains("ring: head_dim 300 is not supported"));
  }
  forward.shape.head_dim = 64;
  CHECK_NOTHROW(cuflash::check_problem_args(forward, "ring"));
  forward.softcap = -1.f;
  require_invalid([&] { cuflash::check_problem_args(forward, "ring"); }, "ring: softcap");
  cuflash::BackwardArgs backward;
  backward.shape = cuflash::AttentionShape{1, 4, 3, 16, 16, 64};
  require_invalid([&] { cuflash::check_problem_args(backward, "ring"); },
                  "ring: shape.heads (4) must be a multiple of shape.heads_kv (3)");
  backward.shape.heads_kv = 4;
  backward.scale = 1e-35f;
  require_invalid([&] { cuflash::check_problem_args(backward, "ring"); }, "ring: scale");
}

TEST_CASE("api: the dense argument checks refuse a diagonal_offset as forward() does",
          "[api][context_parallel]") {
  cuflash::ForwardArgs forward;
  const cuflash::BackwardArgs dense = dense_backward_args();
  forward.shape = dense.shape;
  forward.q = dense.q;
  forward.k = dense.k;
  forward.v = dense.v;
  forward.out = dense.out;
  forward.lse = reinterpret_cast<float*>(g_memory);
  forward.diagonal_offset = int64_t{1} << 40;
  require_invalid([&] { cuflash::check_dense_forward_args(forward, "caller"); },
                  "diagonal_offset (1099511627776) must lie within +-2^32");
  cuflash::BackwardArgs backward = dense;
  backward.diagonal_offset = -(int64_t{1} << 40);
  require_invalid([&] { cuflash::check_dense_backward_args(backward, "caller"); },
                  "must lie within +-2^32");
}

TEST_CASE("api: context-parallel backward refuses gradient sums it would not add to",
          "[api][context_parallel]") {
  cuflash::BackwardArgs whole = dense_backward_args();
  whole.sums.dq = whole.dq;
  whole.sums.dk = whole.sums.dv = whole.dk;
  cuflash::BackwardArgs partial = dense_backward_args();
  partial.sums.dk = partial.dk;  // not on (enabled() looks at dq), but not off either
  for (const cuflash::BackwardArgs& args : {whole, partial}) {
    try {
      cuflash::context_parallel::single_gpu_backward(args, 2);
      FAIL("single_gpu_backward took gradient sums");
    } catch (const Error& e) {
      INFO(e.what());
      CHECK(e.kind() == Error::Kind::unsupported);
      CHECK_THAT(e.what(), Contains("sums (fp32 gradient sums) are not supported"));
    }
  }
}

TEST_CASE("api: forward_args() refuses a scale or softcap that float would round to 0", "[api]") {
  cuflash::Problem p;
  p.shape = cuflash::AttentionShape{1, 2, 2, 64, 64, 64};
  p.scale = 1e-50;  // below 2^-100; as a float 0, the default 1/sqrt(head_dim)
  require_invalid([&] { cuflash::forward_args(p, cuflash::DenseTensors{}); },
                  "problem.scale must be 0 or within [2^-100, 2^100], got 1e-50");
  p.scale = 0.0;
  p.softcap = -2.0;
  require_invalid([&] { cuflash::forward_args(p, cuflash::DenseTensors{}); },
                  "problem.softcap must be 0 or within");
}

TEST_CASE("api: the host runner refuses key lengths without query lengths", "[api][varlen]") {
  // seqlens_k alone makes no varlen batch: it would be ignored while the reference refuses it.
  cuflash::Problem p;
  p.shape = cuflash::AttentionShape{1, 2, 2, 8, 8, 64};
  p.seqlens_k = {8};
  const cuflash::HostBytes tensor(size_t(p.shape.q_elements()) * 2);  // fp16, dense
  require_invalid(
      [&] { cuflash::run_forward(p, tensor, tensor, tensor, cuflash::library_passes()); },
      "seqlens_k needs seqlens_q");
}

namespace {

// Room for the dense tensors below, each in a region of its own.
alignas(256) unsigned char g_regions[1 << 18];

// fp16 B=1, H=2, S=16, D=64 (bhsd) tensor number `region`: 4096 bytes each, 4096 apart.
cuflash::TensorRef region_tensor(int region) {
  return cuflash::make_tensor_ref(g_regions + 4096 * region, cuflash::Layout::bhsd, 1, 2, 16, 64);
}

// Forward and backward arguments whose every tensor, LSE and workspace lie apart.
cuflash::BackwardArgs apart_backward_args() {
  cuflash::BackwardArgs args;
  args.shape = cuflash::AttentionShape{1, 2, 2, 16, 16, 64};
  args.q = region_tensor(0);
  args.k = region_tensor(1);
  args.v = region_tensor(2);
  args.out = region_tensor(3);
  args.dout = region_tensor(4);
  args.dq = region_tensor(5);
  args.dk = region_tensor(6);
  args.dv = region_tensor(7);
  args.lse = reinterpret_cast<const float*>(g_regions + 4096 * 8);
  args.workspace = g_regions + 4096 * 9;
  args.workspace_bytes = cuflash::backward_workspace_size(args.shape, args.dtype);
  REQUIRE(4096 * 9 + args.workspace_bytes <= sizeof(g_regions));
  return args;
}

cuflash::ForwardArgs apart_forward_args() {
  const cuflash::BackwardArgs apart = apart_backward_args();
  cuflash::ForwardArgs args;
  args.shape = apart.shape;
  args.q = apart.q;
  args.k = apart.k;
  args.v = apart.v;
  args.out = apart.out;
  args.lse = reinterpret_cast<float*>(g_regions + 4096 * 8);
  return args;
}

}  // namespace

TEST_CASE("api: an output sharing memory with an input or another output is refused",
          "[api][overlap]") {
  cuflash::ForwardArgs forward = apart_forward_args();
  forward.out = forward.q;  // in place
  require_invalid([&] { cuflash::forward(forward); }, "forward: out overlaps q");
  forward = apart_forward_args();
  forward.lse = reinterpret_cast<float*>(static_cast<unsigned char*>(forward.v.data) + 1000);
  require_invalid([&] { cuflash::forward(forward); }, "lse overlaps v");
  forward = apart_forward_args();
  forward.out = forward.k;
  require_invalid([&] { cuflash::check_dense_forward_args(forward, "caller"); },
                  "caller: out overlaps k");
  // Rows that overlap within a tensor: the message names both strides, either may be wrong.
  forward = apart_forward_args();
  forward.q.seq_stride = 64;
  forward.q.head_stride = 64;
  require_invalid([&] { cuflash::forward(forward); },
                  "q.head_stride (64) makes rows overlap with q.seq_stride (64): it must be at "
                  "least 1024");
  // A workspace of no stated end (the largest size_t) after every tensor is apart from them;
  // one that starts inside V, the highest tensor, overlaps it (the search's bounds once
  // overflowed and let it by).
  forward = apart_forward_args();
  forward.workspace = g_regions + 4096 * 9;
  forward.workspace_bytes = std::numeric_limits<size_t>::max();
  CHECK_NOTHROW(cuflash::check_dense_forward_args(forward, "caller"));
  forward.v = region_tensor(12);
  forward.workspace = static_cast<unsigned char*>(forward.v.data) + 256;
  require_invalid([&] { cuflash::forward(forward); }, "forward: workspace overlaps v");
  require_invalid([&] { cuflash::check_dense_forward_args(forward, "caller"); },
                  "caller: workspace overlaps v");

  cuflash::BackwardArgs backward = apart_backward_args();
  backward.dq = backward.dout;
  require_invalid([&] { cuflash::backward(backward); }, "backward: dq overlaps dout");
  backward = apart_backward_args();
  backward.workspace = backward.dv.data;
  require_invalid([&] { cuflash::backward(backward); }, "dv overlaps workspace");
  backward = apart_backward_args();
  backward.dk = backward.dv;
  require_invalid([&] { cuflash::backward(backward); }, "dk overlaps dv");
  // fp32 sums over Q: 8192 bytes from region 0.
  backward = apart_backward_args();
  backward.sums.dq = cuflash::make_tensor_ref(g_regions, cuflash::Layout::bhsd, 1, 2, 16, 64);
  backward.sums.dk =
      cuflash::make_tensor_ref(g_regions + 4096 * 20, cuflash::Layout::bhsd, 1, 2, 16, 64);
  backward.sums.dv =
      cuflash::make_tensor_ref(g_regions + 4096 * 22, cuflash::Layout::bhsd, 1, 2, 16, 64);
  require_invalid([&] { cuflash::backward(backward); }, "sums.dq overlaps q");
}

TEST_CASE("api: dQ, dK and dV as thirds of one packed buffer are served", "[api][overlap]") {
  // [B=1, S=16, 3, H=2, D=64] fp16 in regions 20-22: token stride 384 elements, dK 128 elements
  // after dQ, dV 256. check_dense_backward_args() runs every check backward() does on dense
  // tensors, without launching.
  cuflash::BackwardArgs args = apart_backward_args();
  unsigned char* packed = g_regions + 4096 * 20;
  const auto third = [&](int index) {
    cuflash::TensorRef t;
    t.data = packed + 2 * 128 * index;
    t.batch_stride = 16 * 384;
    t.head_stride = 64;
    t.seq_stride = 384;
    return t;
  };
  args.dq = third(0);
  args.dk = third(1);
  args.dv = third(2);
  args.workspace = nullptr;  // context parallelism's checks take no workspace of backward()'s
  args.workspace_bytes = 0;
  CHECK_NOTHROW(cuflash::check_dense_backward_args(args, "caller"));
  // dK a 16-byte vector early: its first row takes the last 16 bytes of dQ's last head.
  args.dk.data = packed + 2 * 128 - 16;
  require_invalid([&] { cuflash::check_dense_backward_args(args, "caller"); },
                  "caller: dq overlaps dk");
}
