// The one bitfield-mask predicate (core/bitfield_mask.hpp) that the CP planner and the
// attention kernels share: the window and sink rules, and the tile-skip test's soundness
// with a window (the kernels' own tests cover window 0 against the CPU reference).
#include "core/bitfield_mask.hpp"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace loom {
namespace {

constexpr std::uint64_t kText = kTextBit | modality_bit(1) | kCausalBit;

TEST(BitfieldMaskCore, SinkBitIsInertWithoutAWindow) {
  // Window 0 is the kernels' call: bit 62 must change nothing there.
  for (std::int64_t k = 0; k <= 5; ++k) {
    EXPECT_EQ(may_attend(kText, kText, 5, k), may_attend(kText, kText | kSinkBit, 5, k)) << k;
    EXPECT_TRUE(may_attend(kText, kText, 5, k));
  }
}

TEST(BitfieldMaskCore, WindowBindsOnlyCausalQueries) {
  const std::uint64_t image = modality_bit(1);  // no causal bit: bidirectional
  EXPECT_TRUE(may_attend(image, image, 100, 0, 4));
  EXPECT_TRUE(may_attend(image, image, 0, 100, 4));
  EXPECT_TRUE(may_attend(kText, kText, 10, 7, 4));               // 10 - 7 < 4
  EXPECT_FALSE(may_attend(kText, kText, 10, 6, 4));              // outside the window
  EXPECT_TRUE(may_attend(kText, kText | kSinkBit, 10, 0, 4));    // sinks stay visible
  EXPECT_FALSE(may_attend(kText, kText | kSinkBit, 10, 11, 4));  // but never a later key
}

TEST(BitfieldMaskCore, AWindowOnlyRemovesPairsSoTileSkippingStaysSound) {
  std::mt19937_64 rng(11);
  for (int trial = 0; trial < 100; ++trial) {
    std::vector<std::uint64_t> w(64);
    for (auto& x : w)
      x = (rng() & 0x7) | ((rng() & 1) ? kCausalBit : 0) | ((rng() % 8 == 0) ? kSinkBit : 0);
    TileSummary tiles[2] = {TileSummary::empty(), TileSummary::empty()};
    for (int t = 0; t < 64; ++t) tiles[t / 32].add(w[t], t);
    const std::int64_t window = 1 + static_cast<std::int64_t>(rng() % 40);
    for (int i = 0; i < 64; ++i)
      for (int j = 0; j < 64; ++j) {
        const bool windowed = may_attend(w[i], w[j], i, j, window);
        if (windowed) {
          ASSERT_TRUE(may_attend(w[i], w[j], i, j)) << i << " " << j;
        }
        if (tile_is_empty(tiles[i / 32], tiles[j / 32])) {
          ASSERT_FALSE(windowed) << i << " " << j;
        }
      }
  }
}

}  // namespace
}  // namespace loom
