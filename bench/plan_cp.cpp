// loom_bench_plan_cp: context-parallel planning (dissertation §3.3.2) measured.
//   1. planning time for 1M tokens on 8 GPUs (mask + W_b + LPT), target < 100 ms;
//   2. Table 3.4's four masks (and Fig 3.5's) at 64k tokens on 8 GPUs: LPT vs the ILP
//      optimum vs zigzag, in key blocks of work;
//   3. a Table 3.3 analogue: one attention layer of LLM-S/M/L on 8 A40s under causal CP
//      (zigzag), inter-GPU only (LPT), intra-GPU only (zigzag + split) and both, from the
//      CU list-scheduling model of cp_intra_gpu.cpp, averaged over Fig 3.5's masks;
//   4. the K/V all-gather of 64k tokens over 2 nodes x 4 A40s.
// Usage: loom_bench_plan_cp [ilp-time-limit-s (default 10)]. Prints Markdown.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>

#include "core/cluster.hpp"
#include "core/presets.hpp"
#include "schedulers/planners/cp/cp_plan.hpp"

namespace {

using namespace loom;
using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

MaskSpec spec_of(MaskKind kind, std::int64_t seq, std::uint64_t seed = 1) {
  MaskSpec spec;
  spec.kind = kind;
  spec.seq = seq;
  spec.seed = seed;
  return spec;
}

void planning_time() {
  std::printf(
      "## Planning time, 1,048,576 tokens, cp 8 (mask + W_b + LPT; medians of 7, and the "
      "fastest total: the container's CPUs are shared)\n\n");
  std::printf(
      "| mask | generate ms | W_b ms | LPT ms | total ms | fastest total ms |\n"
      "|---|---:|---:|---:|---:|---:|\n");
  for (const std::string& name : mask_kind_names()) {
    std::vector<double> gen, work, lpt, total;
    (void)block_workloads(generate_mask(spec_of(parse_mask_kind(name), 1 << 20)), BlockSizes{});
    for (int rep = 0; rep < 7; ++rep) {
      const auto t0 = Clock::now();
      const AttentionMask mask = generate_mask(spec_of(parse_mask_kind(name), 1 << 20));
      const auto t1 = Clock::now();
      const std::vector<std::int64_t> w = block_workloads(mask, BlockSizes{});
      const auto t2 = Clock::now();
      const std::vector<int> owners = lpt_owners(w, 8);
      gen.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
      work.push_back(std::chrono::duration<double, std::milli>(t2 - t1).count());
      lpt.push_back(ms_since(t2));
      total.push_back(ms_since(t0));
    }
    auto median = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return v[v.size() / 2];
    };
    std::printf("| %s | %.2f | %.2f | %.2f | %.2f | %.2f |\n", name.c_str(), median(gen),
                median(work), median(lpt), median(total),
                *std::min_element(total.begin(), total.end()));
  }
}

void lpt_vs_ilp(double ilp_limit_s) {
  std::printf("\n## 64k tokens on 8 GPUs: makespan in key blocks (ILP limit %.0f s)\n\n",
              ilp_limit_s);
  std::printf(
      "| mask | zigzag | LPT | ILP | ILP proven | ILP bound | LPT gap vs ILP | LPT vs bound | "
      "zigzag / LPT | ILP s |\n|---|---:|---:|---:|---|---:|---:|---:|---:|---:|\n");
  for (MaskKind kind :
       {MaskKind::kLambda, MaskKind::kCausal, MaskKind::kCausalBlockwise, MaskKind::kSharedQuestion,
        MaskKind::kPrefix, MaskKind::kEmbedded, MaskKind::kPacked}) {
    const AttentionMask mask = generate_mask(spec_of(kind, 65536));
    const std::vector<std::int64_t> w = block_workloads(mask, BlockSizes{});
    CpPlanRequest request;
    request.cp = 8;
    request.ilp.time_limit_s = ilp_limit_s;
    request.distribution = CpDistribution::kZigzag;
    const CpPlan zz = plan_cp_from_workloads(w, mask.size(), request);
    request.distribution = CpDistribution::kLpt;
    const CpPlan lpt = plan_cp_from_workloads(w, mask.size(), request);
    request.distribution = CpDistribution::kIlp;
    const auto start = Clock::now();
    const CpPlan ilp = plan_cp_from_workloads(w, mask.size(), request);
    const double ilp_s = ms_since(start) / 1000;
    auto pct = [](std::int64_t a, std::int64_t b) {
      return 100.0 * (static_cast<double>(a) / static_cast<double>(b) - 1);
    };
    std::printf("| %s | %lld | %lld | %lld | %s | %lld | %.3f%% | %.3f%% | %.3f | %.2f |\n",
                to_string(kind), static_cast<long long>(zz.makespan),
                static_cast<long long>(lpt.makespan), static_cast<long long>(ilp.makespan),
                ilp.optimal ? "yes" : "no (time limit)", static_cast<long long>(ilp.lower_bound),
                pct(lpt.makespan, ilp.makespan), pct(lpt.makespan, ilp.lower_bound),
                static_cast<double>(zz.makespan) / static_cast<double>(lpt.makespan), ilp_s);
  }
}

struct Llm {
  const char* name;
  const char* preset;
  double paper[3][3];  // inter only / intra only / both over causal CP, at 16k, 32k, 64k
};

// Table 3.3 (64k, its printed ratios) and Fig B.1 (32k, 16k: its times divided).
constexpr Llm kTable33Llms[] = {
    {"LLM-S", "llama3-s", {{0.97, 1.34, 1.29}, {0.89, 1.14, 1.15}, {0.95, 1.08, 1.19}}},
    {"LLM-M", "llama3-m", {{0.98, 1.13, 1.16}, {0.89, 1.02, 1.08}, {0.94, 1.04, 1.10}}},
    {"LLM-L", "llama3-l", {{0.95, 1.07, 1.16}, {0.93, 1.05, 1.04}, {0.93, 1.02, 1.03}}},
};

/// Table 3.3 and Fig B.1: one attention layer under the four policies, with the intra-GPU
/// split read both ways ([AMBIG] §3.3.2.2): 16 sub-blocks per row, and sub-blocks of 16
/// query blocks' worth of keys.
void table_3_3_analogue() {
  std::printf(
      "\n## Table 3.3 / Fig B.1 analogue: one attention layer, cp 8, A40 (84 SMs), mean over "
      "prefix/embedded/packed x 5 seeds; split = 16 per row | of 2,048 keys\n\n");
  std::printf(
      "| seq | LLM | causal CP (zigzag) ms | inter only (LPT) | intra only | both | paper "
      "(inter / intra / both) |\n|---|---|---:|---:|---:|---:|---|\n");
  const GpuSpec a40 = gpu_preset("A40");
  const std::int64_t seqs[] = {16384, 32768, 65536};
  for (int s = 0; s < 3; ++s) {
    for (const Llm& llm : kTable33Llms) {
      const LayerSpec layer = module_preset(llm.preset)->layer;
      const IntraGpuOptions base = intra_gpu_options(
          a40, {layer.heads, layer.kv_heads, layer.hidden / layer.heads}, BlockSizes{});
      IntraGpuOptions per_row = base;
      per_row.sub_blocks_per_row = 16;
      IntraGpuOptions by_size = base;
      by_size.sub_block = sub_block_of(16, BlockSizes{});
      // zigzag, LPT, then zigzag and LPT under each split
      double t[6] = {0, 0, 0, 0, 0, 0};
      int n = 0;
      for (MaskKind kind : {MaskKind::kPrefix, MaskKind::kEmbedded, MaskKind::kPacked}) {
        for (std::uint64_t seed = 1; seed <= 5; ++seed, ++n) {
          const AttentionMask mask = generate_mask(spec_of(kind, seqs[s], seed));
          const std::vector<std::int64_t> w = block_workloads(mask, BlockSizes{});
          CpPlanRequest request;
          request.cp = 8;
          request.distribution = CpDistribution::kZigzag;
          const CpPlan zz = plan_cp_from_workloads(w, mask.size(), request);
          request.distribution = CpDistribution::kLpt;
          const CpPlan lpt = plan_cp_from_workloads(w, mask.size(), request);
          t[0] += cp_attention_time_s(zz, base);
          t[1] += cp_attention_time_s(lpt, base);
          t[2] += cp_attention_time_s(zz, per_row);
          t[3] += cp_attention_time_s(lpt, per_row);
          t[4] += cp_attention_time_s(zz, by_size);
          t[5] += cp_attention_time_s(lpt, by_size);
        }
      }
      std::printf(
          "| %lldk | %s | %.2f | %.2fx | %.2fx \\| %.2fx | %.2fx \\| %.2fx | %.2fx / %.2fx / "
          "%.2fx |\n",
          static_cast<long long>(seqs[s] / 1024), llm.name, 1e3 * t[0] / n, t[0] / t[1],
          t[0] / t[2], t[0] / t[4], t[0] / t[3], t[0] / t[5], llm.paper[s][0], llm.paper[s][1],
          llm.paper[s][2]);
    }
  }
}

void allgather() {
  Cluster cluster;
  cluster.nodes = 2;
  cluster.gpus_per_node = 4;
  cluster.gpu = gpu_preset("A40");
  cluster.intra_node = *link_preset("pcie4");
  cluster.inter_node = *link_preset("ib-hdr");
  const LayerSpec layer = module_preset("llama3-l")->layer;
  KvShape shape;
  shape.kv_heads = layer.kv_heads;
  shape.head_dim = layer.hidden / layer.heads;
  std::printf(
      "\n## K/V all-gather, 64k tokens, LLM-L (8 KV heads x 128, bf16), 2 nodes x 4 A40 "
      "(PCIe 4.0, IB HDR)\n\n| mask | distribution | max received MiB | time ms |\n"
      "|---|---|---:|---:|\n");
  for (MaskKind kind : {MaskKind::kCausal, MaskKind::kEmbedded}) {
    for (CpDistribution d : {CpDistribution::kZigzag, CpDistribution::kLpt}) {
      CpPlanRequest request;
      request.cp = 8;
      request.distribution = d;
      const CpPlan plan = plan_cp(generate_mask(spec_of(kind, 65536)), request);
      const AllGatherCost cost = kv_allgather_cost(plan, shape, cluster, {0, 1, 2, 3, 4, 5, 6, 7});
      const double received =
          *std::max_element(cost.received_bytes.begin(), cost.received_bytes.end());
      std::printf("| %s | %s | %.1f | %.3f |\n", to_string(kind), to_string(d), received / 1048576,
                  cost.time_s * 1e3);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  const double ilp_limit_s = argc > 1 ? std::stod(argv[1]) : 10.0;
  planning_time();
  lpt_vs_ilp(ilp_limit_s);
  table_3_3_analogue();
  allgather();
  return 0;
}
