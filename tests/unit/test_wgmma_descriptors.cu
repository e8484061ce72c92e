// The wgmma matrix descriptors (sm90/wgmma.cuh), on the host: a descriptor advanced by a k-step's
// offset is the descriptor built from the k-step's address, for every shared-space address a
// CTA can have; k_major_descriptor(), which advances, agrees with the address it describes.
#include <catch2/catch.hpp>
#include <cstdint>

#include "kernels/common/shared_memory.cuh"
#include "kernels/sm90/wgmma.cuh"

namespace {

namespace sm90 = cuflash::detail::sm90;

// Shared-space addresses stay below the CTA's shared memory plus the 1 KiB the system reserves
// in front of it: 228 KiB, below the 2^18 that the descriptor's 14-bit field (address >> 4) holds.
constexpr uint32_t kSharedWindowBytes = uint32_t(cuflash::detail::kMaxSmemBytes) + 1024;
static_assert(kSharedWindowBytes <= (1u << 18), "the descriptor's address field would carry");

// The descriptor of a K-major operand built straight from its address, as the hardware reads it.
template <int kRows, int kCols>
uint64_t k_major_from_address(sm90::SwizzledTile<kRows, kCols> tile, int row0, int k0) {
  const uint32_t start =
      tile.base + (k0 / 64) * tile.kColumnBlockBytes + row0 * sm90::kSwizzleBytes + (k0 % 64) * 2;
  return sm90::swizzled_descriptor(start, 16, sm90::kSwizzleAtomBytes);
}

template <int kRows, int kCols>
void check_k_major_tiles() {
  using Tile = sm90::SwizzledTile<kRows, kCols>;
  int checked = 0;
  for (uint32_t base = 0; base + Tile::kBytes <= kSharedWindowBytes;
       base += sm90::kSwizzleAtomBytes) {
    for (int row0 = 0; row0 < kRows; row0 += 8) {
      for (int k0 = 0; k0 < kCols; k0 += 16) {
        const Tile tile{base};
        if (sm90::k_major_descriptor(tile, row0, k0) != k_major_from_address(tile, row0, k0)) {
          FAIL("tile " << kRows << "x" << kCols << " at " << base << ", row0 " << row0 << ", k0 "
                       << k0);
        }
        ++checked;
      }
    }
  }
  CHECK(checked > 0);
}

TEST_CASE("wgmma descriptors: advancing by an offset equals building from the sum",
          "[unit][wgmma]") {
  // Every 16-byte-aligned start of the shared window, with offsets up to the largest k-step jump
  // (a column block of 256 rows, 32 KiB) and the window's far end.
  const uint32_t offsets[] = {0, 16, 32, 48, 96, 1024, 10240, 16384, 32768, 65536, 131072};
  int64_t checked = 0;
  for (uint32_t start = 0; start < kSharedWindowBytes; start += 16) {
    const uint64_t k_major = sm90::swizzled_descriptor(start, 16, sm90::kSwizzleAtomBytes);
    const uint64_t n_major = sm90::swizzled_descriptor(start, 10240, sm90::kSwizzleAtomBytes);
    for (uint32_t offset : offsets) {
      if (start + offset >= kSharedWindowBytes) continue;
      const uint32_t end = start + offset;
      if (sm90::advanced_descriptor(k_major, offset) !=
              sm90::swizzled_descriptor(end, 16, sm90::kSwizzleAtomBytes) ||
          sm90::advanced_descriptor(n_major, offset) !=
              sm90::swizzled_descriptor(end, 10240, sm90::kSwizzleAtomBytes)) {
        FAIL("start " << start << ", offset " << offset);
      }
      ++checked;
    }
  }
  CHECK(checked > 100000);
}

TEST_CASE("wgmma descriptors: K-major operands of the kernels' tile shapes, at every address",
          "[unit][wgmma]") {
  check_k_major_tiles<64, 64>();    // forward Q and K at head_dim 64, 64-row blocks
  check_k_major_tiles<80, 128>();   // backward Q and dO on 80-row query blocks
  check_k_major_tiles<128, 128>();  // backward K and V, forward K at head_dim 128
  check_k_major_tiles<192, 64>();   // forward Q on tall tiles at head_dim 64
  check_k_major_tiles<64, 256>();   // head_dim 256: four column blocks
}

}  // namespace
