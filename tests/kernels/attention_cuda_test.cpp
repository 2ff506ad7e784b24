// CUDA bitfield-mask attention vs the CPU reference (same tiling, same skipping).
// Tolerances (fp32, __expf): O and lse |err| <= 1e-5 + 1e-4 |ref|; gradients
// |err| <= 1e-4 + 1e-3 |ref| (different summation order over keys/queries).
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "kernels/cuda/attention.hpp"
#include "kernels/cuda/device.hpp"
#include "kernels/reference/attention_ref.hpp"
#include "tests/kernels/cuda_test_support.hpp"
#include "tests/kernels/kernel_test_support.hpp"

namespace loom::kernels {
namespace {

using test::expect_close;
using test::random_vector;
using F = DeviceBuffer<float>;

struct Case {
  const char* name;
  AttentionShape shape;
  std::vector<std::uint64_t> mask;
};

std::vector<Case> cases() {
  std::vector<Case> out;
  out.push_back({"causal d64", AttentionShape::dense(2, 100, 4, 4, 64), test::causal_text(2, 100)});
  out.push_back({"prefix GQA d128", AttentionShape::dense(1, 130, 8, 2, 128),
                 test::image_then_text(1, 130, 64)});
  // Qwen2-vision head size 80 (1280 / 16): lanes past the head dimension idle.
  out.push_back({"bidirectional d80", AttentionShape::dense(1, 77, 2, 2, 80),
                 std::vector<std::uint64_t>(77, modality_bit(1))});
  AttentionShape strided = AttentionShape::dense(1, 64, 2, 2, 32);
  strided.ld_q = strided.ld_k = strided.ld_v = strided.ld_o = 3 * 64;  // fused QKV rows
  std::vector<std::uint64_t> padded = test::image_then_text(1, 64, 20);
  padded[63] = 0;
  out.push_back({"strided with padding", strided, padded});
  return out;
}

TEST(AttentionCuda, ForwardAndBackwardMatchTheReference) {
  LOOM_REQUIRE_GPU();
  for (const Case& c : cases()) {
    const AttentionShape& s = c.shape;
    const size_t rows = static_cast<size_t>(s.batch) * s.tokens;
    const auto q = random_vector(rows * s.ld_q, 1), k = random_vector(rows * s.ld_k, 2),
               v = random_vector(rows * s.ld_v, 3), d_o = random_vector(rows * s.ld_o, 4);
    const size_t stats = rows * s.heads;
    std::vector<float> o(rows * s.ld_o), lse(stats), delta(stats);
    std::vector<float> dq(q.size()), dk(k.size()), dv(v.size());
    attention_forward_ref(s, q.data(), k.data(), v.data(), c.mask.data(), o.data(), lse.data());
    attention_delta_ref(s, o.data(), d_o.data(), delta.data());
    attention_backward_ref(s, q.data(), k.data(), v.data(), c.mask.data(), lse.data(), delta.data(),
                           d_o.data(), dq.data(), dk.data(), dv.data());

    const F dq_in = F::from_host(q), dk_in = F::from_host(k), dv_in = F::from_host(v);
    const F ddo = F::from_host(d_o);
    const auto dmask = DeviceBuffer<std::uint64_t>::from_host(c.mask);
    // Outputs start as copies of the reference with noise so stale values cannot pass.
    F d_out = F::from_host(random_vector(o.size(), 9)), d_lse(stats), d_delta(stats);
    F g_q(q.size()), g_k(k.size()), g_v(v.size());
    attention_forward(s, dq_in.data(), dk_in.data(), dv_in.data(), dmask.data(), d_out.data(),
                      d_lse.data(), nullptr);
    attention_delta(s, d_out.data(), ddo.data(), d_delta.data(), nullptr);
    attention_backward(s, dq_in.data(), dk_in.data(), dv_in.data(), dmask.data(), d_lse.data(),
                       d_delta.data(), ddo.data(), g_q.data(), g_k.data(), g_v.data(), nullptr);
    LOOM_CUDA_CHECK(cudaDeviceSynchronize());
    // Only the head columns are outputs; strided padding columns are not compared.
    const auto heads_only = [&](std::vector<float> x, std::int64_t ld, int width) {
      for (size_t r = 0; r < rows; ++r)
        for (std::int64_t e = width; e < ld; ++e) x[r * ld + e] = 0.0f;
      return x;
    };
    const int qw = s.heads * s.head_dim, kw = s.kv_heads * s.head_dim;
    expect_close(heads_only(d_out.to_host(), s.ld_o, qw), heads_only(o, s.ld_o, qw), 1e-5f, 1e-4f,
                 std::string(c.name) + " O");
    expect_close(d_lse.to_host(), lse, 1e-5f, 1e-4f, std::string(c.name) + " lse");
    expect_close(d_delta.to_host(), delta, 1e-5f, 1e-4f, std::string(c.name) + " delta");
    expect_close(heads_only(g_q.to_host(), s.ld_q, qw), heads_only(dq, s.ld_q, qw), 1e-4f, 1e-3f,
                 std::string(c.name) + " dQ");
    expect_close(heads_only(g_k.to_host(), s.ld_k, kw), heads_only(dk, s.ld_k, kw), 1e-4f, 1e-3f,
                 std::string(c.name) + " dK");
    expect_close(heads_only(g_v.to_host(), s.ld_v, kw), heads_only(dv, s.ld_v, kw), 1e-4f, 1e-3f,
                 std::string(c.name) + " dV");
  }
}

TEST(AttentionCuda, RejectsHeadDimAboveTheKernelLimit) {
  LOOM_REQUIRE_GPU();
  const AttentionShape s = AttentionShape::dense(1, 4, 1, 1, 256);
  EXPECT_THROW(attention_forward(s, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr),
               std::invalid_argument);
}

}  // namespace
}  // namespace loom::kernels
