// TP communication overlap (cost.tp_overlap): Transformer Engine's userbuffers ring exchange
// runs the GEMMs beside sequence parallelism's all-gather and reduce-scatter as tp GEMMs over
// 1/tp of the tokens, one per peer's chunk, and sums the reduce-scatter's partial chunks in
// one more kernel; "ideal" prices every GEMM whole, as Loom did before.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "core/config.hpp"
#include "core/errors.hpp"
#include "core/layer_kernels.hpp"
#include "gpt_fixture.hpp"
#include "test_support.hpp"

namespace loom {
namespace {

constexpr int kTokens = 4096;

constexpr LinkSpec kNvlink{450e9, 2e-6};

std::vector<Kernel> kernels(TpOverlap overlap, int tp, bool sequence_parallel = true,
                            LinkSpec link = kNvlink) {
  const LayerSpec l = test::gpt_layer(8192, 64);
  const GpuPerformance gpu(gpu_preset("H100"), 2);
  return layer_kernels(
      l, MicrobatchShape{{kTokens}}, tp, gpu, link,
      LayerKernelOptions{.sequence_parallel = sequence_parallel, .tp_overlap = overlap});
}

double seconds(const std::vector<Kernel>& ks, const std::string& name) {
  return test::find_kernel(ks, name).seconds;
}

TEST(TpOverlap, RingExchangeRunsTheGemmsBesideTheCollectivesAsOneGemmPerPeerChunk) {
  // A GPT layer, h = 8192, f = 4h, TP 8 over 4,096 tokens: each split GEMM is 8 GEMMs of
  // 512 rows (every chunk its own waves over the SMs and its own launch), each step after
  // the first waiting for its chunk's exchange if that takes longer: G + 7 max(G, X), X
  // one ring step of a [512 x h] bf16 chunk (every exchanged tensor here is h wide).
  const int tp = 8;
  const double h = 8192, f = 4 * h, T = kTokens, rows = T / tp;
  const GpuPerformance gpu(gpu_preset("H100"), 2);
  const auto ring = kernels(TpOverlap::kRingExchange, tp);
  const auto whole = kernels(TpOverlap::kIdeal, tp);
  const double exchange = ring_step_seconds(rows * h * 2, kNvlink);
  const auto ring_time = [&](const GemmShape& chunk, double x) {
    const double g = gpu.gemm_seconds(chunk);
    return g + (tp - 1) * std::max(g, x);
  };
  struct Split {
    const char* name;
    GemmShape chunk;  // one of the tp GEMMs
  };
  for (const Split& s : {Split{"qkv", {rows, 3 * h / tp, h}},  // after the all-gather
                         Split{"mlp fc1", {rows, f / tp, h}},
                         Split{"attention output", {rows, h, h / tp}},  // before the RS
                         Split{"mlp fc2", {rows, h, f / tp}},
                         Split{"attention output dgrad", {rows, h / tp, h}},  // after the AG
                         Split{"mlp fc2 dgrad", {rows, f / tp, h}}}) {
    EXPECT_DOUBLE_EQ(seconds(ring, s.name), ring_time(s.chunk, exchange)) << s.name;
    EXPECT_GE(seconds(ring, s.name), seconds(whole, s.name)) << s.name;
    EXPECT_EQ(test::find_kernel(ring, s.name).flops, test::find_kernel(whole, s.name).flops);
  }
  // The GEMMs whose collectives TE overlaps in bulk stay whole: the weight gradients and the
  // data gradients before the backward's reduce-scatter.
  for (const char* name : {"qkv dgrad", "mlp fc1 dgrad", "qkv wgrad", "attention output wgrad",
                           "mlp fc1 wgrad", "mlp fc2 wgrad"})
    EXPECT_DOUBLE_EQ(seconds(ring, name), seconds(whole, name)) << name;
  // The reduce-scatter side sums the tp partial chunks of its T / tp output rows.
  for (const char* linear : {"attention output", "mlp fc2"}) {
    const Kernel& reduce = test::find_kernel(ring, std::string(linear) + " ring-exchange reduce");
    EXPECT_DOUBLE_EQ(reduce.bytes, (tp + 1) * rows * h * 2) << linear;
    EXPECT_EQ(reduce.bound, KernelBound::kMemory);
  }
  // The ideal overlap has no such kernel: its GEMMs are whole, its collectives free.
  for (const Kernel& k : whole) EXPECT_EQ(k.name.find("ring-exchange"), std::string::npos);
  // On a link 100x slower the exchange outlasts every chunk's GEMM: the steps wait for it.
  const LinkSpec slow{4.5e9, 2e-6};
  const double slow_exchange = ring_step_seconds(rows * h * 2, slow);
  const auto starved = kernels(TpOverlap::kRingExchange, tp, true, slow);
  const GemmShape qkv_chunk{rows, 3 * h / tp, h};
  ASSERT_GT(slow_exchange, gpu.gemm_seconds(qkv_chunk));
  EXPECT_DOUBLE_EQ(seconds(starved, "qkv"), gpu.gemm_seconds(qkv_chunk) + (tp - 1) * slow_exchange);
}

TEST(TpOverlap, AggregateHalvesTheAllGatherChunksOnly) {
  // TE's `aggregate` exchanges two chunks per step on the all-gather side: tp / 2 GEMMs of
  // 2T / tp rows; its reduce-scatter ring has no aggregated form and keeps tp chunks.
  const int tp = 8;
  const double h = 8192, T = kTokens;
  const GpuPerformance gpu(gpu_preset("H100"), 2);
  const auto aggregate = kernels(TpOverlap::kRingExchangeAggregate, tp);
  const double g = gpu.gemm_seconds({2 * T / tp, 3 * h / tp, h});
  const double x = ring_step_seconds(2 * T / tp * h * 2, kNvlink);  // two chunks a step
  EXPECT_DOUBLE_EQ(seconds(aggregate, "qkv"), g + (tp / 2 - 1) * std::max(g, x));
  EXPECT_DOUBLE_EQ(seconds(aggregate, "attention output"),
                   seconds(kernels(TpOverlap::kRingExchange, tp), "attention output"));
}

TEST(TpOverlap, UnderFp8TheGatheredChunksAreFp8AndTheExpertsStayWhole) {
  // Transformer Engine's all-gather buffers "use fp8 when using fp8 recipe" (initialize_ub):
  // a gathered chunk is 1 byte an element, the reduce-scatter's partial sums bf16.
  const int tp = 8;
  const double h = 8192, rows = kTokens / tp;
  LayerSpec l = test::gpt_layer(8192, 64);
  const GpuPerformance gpu(gpu_preset("H100"), 2), fp8(gpu_preset("H100"), 1, 2);
  const LinkSpec slow{4.5e9, 2e-6};  // exchanges outlast the GEMMs: the bytes show
  const auto ks = layer_kernels(l, MicrobatchShape{{kTokens}}, tp, gpu, slow,
                                LayerKernelOptions{.sequence_parallel = true,
                                                   .fp8 = Fp8Recipe::kCurrent,
                                                   .tp_overlap = TpOverlap::kRingExchange});
  const auto ring_time = [&](const GemmShape& chunk, double bytes) {
    return fp8.gemm_seconds(chunk) + (tp - 1) * ring_step_seconds(rows * h * bytes, slow);
  };
  EXPECT_DOUBLE_EQ(seconds(ks, "qkv"), ring_time({rows, 3 * h / tp, h}, 1));
  EXPECT_DOUBLE_EQ(seconds(ks, "attention output"), ring_time({rows, h, h / tp}, 2));
  EXPECT_DOUBLE_EQ(seconds(ks, "attention output dgrad"), ring_time({rows, h / tp, h}, 1));
  // A MoE layer splits its attention's GEMMs; its experts have their own exchange.
  l.experts = 8;
  l.top_k = 2;
  l.expert_ffn = 4096;
  const auto moe = [&](TpOverlap overlap) {
    return layer_kernels(l, MicrobatchShape{{kTokens}}, tp, gpu, kNvlink,
                         LayerKernelOptions{.sequence_parallel = true, .tp_overlap = overlap});
  };
  const auto ring = moe(TpOverlap::kRingExchange), whole = moe(TpOverlap::kIdeal);
  EXPECT_GT(seconds(ring, "qkv"), seconds(whole, "qkv"));
  for (const char* name : {"experts fc1", "experts fc2", "experts fc2 dgrad"})
    EXPECT_DOUBLE_EQ(seconds(ring, name), seconds(whole, name)) << name;
}

TEST(TpOverlap, NothingSplitsWithoutSequenceParallelismOrTensorParallelism) {
  // TE's userbuffers overlap needs sequence parallelism (its ring exchanges are SP's
  // all-gather and reduce-scatter); at TP 1 there is nothing to exchange.
  const auto same = [](const std::vector<Kernel>& a, const std::vector<Kernel>& b) {
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) EXPECT_DOUBLE_EQ(a[i].seconds, b[i].seconds) << a[i].name;
  };
  same(kernels(TpOverlap::kRingExchange, 8, false), kernels(TpOverlap::kIdeal, 8, false));
  same(kernels(TpOverlap::kRingExchange, 1), kernels(TpOverlap::kIdeal, 1));
}

TEST(TpOverlap, TheConfigKeyNeedsTheOverlapAndNamesItsValues) {
  const std::string config =
      test::source_path("validation/megatron-bridge-2511/llama3-70b-h100.toml");
  EXPECT_EQ(load_config(config, {}).cost.tp_overlap, TpOverlap::kRingExchange);
  EXPECT_EQ(load_config(config, {"cost.tp_overlap=ideal"}).cost.tp_overlap, TpOverlap::kIdeal);
  try {
    load_config(config, {"cost.tp_overlap=pipeline"});
    FAIL() << "no such overlap";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("cost.tp_overlap"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("ring-exchange-aggregate"), std::string::npos) << e.what();
  }
  try {
    load_config(config, {"cost.tp_comm_overlap=false", "cost.tp_overlap=ideal"});
    FAIL() << "tp_overlap without the overlap";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("set cost.tp_comm_overlap = true"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace loom
