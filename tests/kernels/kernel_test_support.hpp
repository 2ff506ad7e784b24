#pragma once
// Inputs shared by the kernel tests (reference and CUDA): deterministic random tensors and
// the bitfield masks of dissertation Fig 3.4/3.5.
#include <cstdint>
#include <random>
#include <vector>

#include "core/bitfield_mask.hpp"

namespace loom::kernels::test {

/// n floats uniform in [-1, 1), from a fixed seed.
inline std::vector<float> random_vector(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> out(n);
  for (float& x : out) x = dist(rng);
  return out;
}

/// A text-only LLM sequence: causal bit + text bit on every token.
inline std::vector<std::uint64_t> causal_text(int batch, int tokens) {
  return std::vector<std::uint64_t>(static_cast<size_t>(batch) * tokens,
                                    kCausalBit | modality_bit(0));
}

/// Fig 3.5a "prefix": `image` bidirectional encoder-A tokens (bit 1), then causal text
/// tokens that may attend to both modalities.
inline std::vector<std::uint64_t> image_then_text(int batch, int tokens, int image) {
  std::vector<std::uint64_t> mask(static_cast<size_t>(batch) * tokens);
  for (int b = 0; b < batch; ++b)
    for (int t = 0; t < tokens; ++t)
      mask[static_cast<size_t>(b) * tokens + t] =
          t < image ? modality_bit(1) : kCausalBit | modality_bit(0) | modality_bit(1);
  return mask;
}

}  // namespace loom::kernels::test
