// Attention kernel benchmark: forward and backward time of the bitfield-mask kernels for
// several mask shapes of one sequence, with the fraction of tile pairs block skipping
// removes, so the speedup of sparse multimodal masks over a full mask can be read off
// (dissertation §3.3.2.1 / §3.4.2: empty mask blocks are skipped). Needs a GPU; exits 2
// without one. Prints one JSON object per mask on stdout.
//   loom_attention_bench --tokens 8192 --heads 16 --kv-heads 16 --dim 128
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "core/bitfield_mask.hpp"
#include "kernels/cuda/attention.hpp"
#include "kernels/cuda/check.hpp"
#include "kernels/cuda/device.hpp"
#include "kernels/reference/attention_ref.hpp"

namespace {

using namespace loom::kernels;
using loom::kCausalBit;
using loom::modality_bit;

struct MaskCase {
  std::string name;
  std::vector<std::uint64_t> words;
};

/// full: one bidirectional modality; causal: text only; prefix: an image then causal
/// text (Fig 3.5a); two-images: two encoders' images (each sees only itself) then text.
std::vector<MaskCase> masks(int tokens, int image) {
  const std::uint64_t text = kCausalBit | modality_bit(0) | modality_bit(1) | modality_bit(2);
  std::vector<MaskCase> out;
  out.push_back({"full", std::vector<std::uint64_t>(tokens, modality_bit(1))});
  out.push_back({"causal", std::vector<std::uint64_t>(tokens, kCausalBit | modality_bit(0))});
  std::vector<std::uint64_t> prefix(tokens, text), two(tokens, text);
  for (int t = 0; t < image && t < tokens; ++t) {
    prefix[t] = modality_bit(1);
    two[t] = t < image / 2 ? modality_bit(1) : modality_bit(2);
  }
  out.push_back({"prefix", prefix});
  out.push_back({"two-images", two});
  return out;
}

struct Events {
  cudaEvent_t marks[3];
  Events() {
    for (cudaEvent_t& e : marks) LOOM_CUDA_CHECK(cudaEventCreate(&e));
  }
  ~Events() {
    for (cudaEvent_t e : marks) cudaEventDestroy(e);
  }
  float ms(int from) const {
    float t = 0;
    LOOM_CUDA_CHECK(cudaEventElapsedTime(&t, marks[from], marks[from + 1]));
    return t;
  }
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Time the bitfield-mask attention kernels (forward, backward) per mask shape"};
  int tokens = 8192, heads = 16, kv_heads = 16, dim = 128, image = -1, repeats = 10;
  app.add_option("--tokens", tokens, "Sequence length (default 8192)");
  app.add_option("--heads", heads, "Query heads (default 16)");
  app.add_option("--kv-heads", kv_heads, "Key/value heads (default 16)");
  app.add_option("--dim", dim, "Head dimension, at most 128 (default 128)");
  app.add_option("--image", image, "Image tokens before the text (default tokens / 2)");
  app.add_option("--repeats", repeats, "Timed runs; the median is printed (default 10)");
  CLI11_PARSE(app, argc, argv);
  if (cuda_device_count() == 0) {
    std::cerr << "loom_attention_bench: no usable CUDA device\n";
    return 2;
  }
  try {
    const AttentionShape s = AttentionShape::dense(1, tokens, heads, kv_heads, dim);
    const size_t q_size = static_cast<size_t>(tokens) * s.ld_q;
    const size_t kv_size = static_cast<size_t>(tokens) * s.ld_k;
    DeviceBuffer<float> q(q_size), k(kv_size), v(kv_size), o(q_size), d_o(q_size), dq(q_size),
        dk(kv_size), dv(kv_size), lse(static_cast<size_t>(tokens) * heads),
        delta(static_cast<size_t>(tokens) * heads);
    for (DeviceBuffer<float>* b : {&q, &k, &v, &d_o})
      LOOM_CUDA_CHECK(cudaMemset(b->data(), 0, b->bytes()));
    double full_ms = 0;
    for (const MaskCase& m : masks(tokens, image < 0 ? tokens / 2 : image)) {
      const auto mask = DeviceBuffer<std::uint64_t>::from_host(m.words);
      const AttentionStats stats = attention_tile_stats(s, m.words.data());
      std::vector<float> fwd, bwd;
      Events ev;
      for (int r = 0; r <= repeats; ++r) {  // r == 0 warms up
        LOOM_CUDA_CHECK(cudaEventRecord(ev.marks[0]));
        attention_forward(s, q.data(), k.data(), v.data(), mask.data(), o.data(), lse.data(),
                          nullptr);
        LOOM_CUDA_CHECK(cudaEventRecord(ev.marks[1]));
        attention_delta(s, o.data(), d_o.data(), delta.data(), nullptr);
        attention_backward(s, q.data(), k.data(), v.data(), mask.data(), lse.data(), delta.data(),
                           d_o.data(), dq.data(), dk.data(), dv.data(), nullptr);
        LOOM_CUDA_CHECK(cudaEventRecord(ev.marks[2]));
        LOOM_CUDA_CHECK(cudaEventSynchronize(ev.marks[2]));
        if (r == 0) continue;
        fwd.push_back(ev.ms(0));
        bwd.push_back(ev.ms(1));
      }
      std::sort(fwd.begin(), fwd.end());
      std::sort(bwd.begin(), bwd.end());
      const double f = fwd[fwd.size() / 2], b = bwd[bwd.size() / 2];
      if (m.name == "full") full_ms = f + b;
      std::printf(
          "{\"mask\": \"%s\", \"tokens\": %d, \"heads\": %d, \"dim\": %d, \"skipped_fraction\": "
          "%.4f, \"forward_ms\": %.3f, \"backward_ms\": %.3f, \"speedup_vs_full\": %.3f}\n",
          m.name.c_str(), tokens, heads, dim,
          static_cast<double>(stats.skipped) / static_cast<double>(stats.tile_pairs), f, b,
          full_ms / (f + b));
    }
  } catch (const std::exception& e) {
    std::cerr << "loom_attention_bench: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
