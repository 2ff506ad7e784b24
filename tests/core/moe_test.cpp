// Mixture of experts (docs/moe.md): the published parameter and FLOP counts of Qwen3, the
// experts' grouped GEMMs at their real per-expert shapes, their state sharded by parallel.ep,
// the dispatch and combine all-to-alls in the IR with their closed form, and the errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "app/pytorch_csv.hpp"
#include "core/config.hpp"
#include "core/cost_analytical.hpp"
#include "core/evaluator.hpp"
#include "core/layer_kernels.hpp"
#include "core/memory_model.hpp"
#include "core/model_flops.hpp"
#include "core/validate.hpp"
#include "gpt_fixture.hpp"
#include "schedulers/lowering/passes.hpp"
#include "test_support.hpp"

namespace loom {
namespace {

std::string bridge(const std::string& run) {
  return test::source_path("validation/megatron-bridge-2511/" + run + ".toml");
}

struct Counts {
  double total = 0;
  double active = 0;  ///< what one token runs through: top_k of the routed experts
};
Counts parameter_counts(const Config& c) {
  const auto cost = make_cost_model(c);
  Counts n;
  for (int l = 0; l < c.model.num_layers(); ++l) {
    const LayerSpec& s = c.model.layer(l);
    n.total += cost->parameters(l);
    n.active += cost->parameters(l) -
                (s.moe() ? expert_parameters(s) * (1 - double(s.top_k) / s.experts) : 0.0);
  }
  return n;
}

TEST(Moe, Qwen3HasItsPublishedParameterCounts) {
  // Qwen3 technical report (Yang et al. 2025), Table 2: 30B-A3B has 30.5B parameters, 3.3B
  // activated; 235B-A22B has 235B, 22B activated.
  const Counts small = parameter_counts(load_config(bridge("qwen3-30b-a3b-b200"), {}));
  EXPECT_NEAR(small.total / 1e9, 30.5, 0.05);
  EXPECT_NEAR(small.active / 1e9, 3.3, 0.06);
  const Counts large = parameter_counts(load_config(bridge("qwen3-235b-a22b-b200"), {}));
  EXPECT_NEAR(large.total / 1e9, 235, 0.5);
  EXPECT_NEAR(large.active / 1e9, 22, 0.25);
}

/// Training model FLOPs per token of a `s`-token sequence.
double flops_per_token(const Model& model, int s) {
  double flops = 0;
  for (int l = 0; l < model.num_layers(); ++l)
    flops += training_flops_multiplier(model, l) * layer_forward_flops(model, l, {{s}});
  return flops / s;
}

TEST(Moe, MegatronBridgeTflopsFollowFromItsTokensPerSecond) {
  // validation/megatron-bridge-2511 (DGX-B200, seq 4096): Qwen3 30B-A3B 9299 tokens/s/GPU
  // at 214 model TFLOP/s/GPU; 235B-A22B 3269 at 484. Only the top_k routed experts count
  // (and no router): the page rounds to whole TFLOP/s.
  const Config small = load_config(bridge("qwen3-30b-a3b-b200"), {});
  const Config large = load_config(bridge("qwen3-235b-a22b-b200"), {});
  EXPECT_NEAR(flops_per_token(small.model, 4096) * 9299 / 1e12, 214, 0.5);
  EXPECT_NEAR(flops_per_token(large.model, 4096) * 3269 / 1e12, 484, 0.5);
}

const Kernel& find(const std::vector<Kernel>& ks, const std::string& name) {
  return test::find_kernel(ks, name);
}

std::vector<Kernel> qwen3_kernels(int ep) {
  const Config c = load_config(bridge("qwen3-30b-a3b-b200"), {"cost.fp8=\"off\""});
  const GpuPerformance gpu(c.cluster.gpu, 2);
  return layer_kernels(c.model.layer(1), MicrobatchShape{{4096}}, 1, gpu, c.cluster.intra_node,
                       LayerKernelOptions{.expert_parallel = ep});
}

TEST(Moe, ExpertsRunAsGroupedGemmsOfTheirOwnTokens) {
  // 4096 tokens x top 8 = 32768 routed copies per rank, balanced. With ep 8 a rank holds 16
  // of the 128 experts, 2048 tokens each; with ep 1 all 128, 256 tokens each: the same
  // FLOPs in GEMMs a quarter as tall, which the tile model runs less efficiently.
  const auto ep8 = qwen3_kernels(8), ep1 = qwen3_kernels(1);
  const double flops = 2.0 * 32768 * (2 * 768) * 2048;  // fc1: gate and up projections
  EXPECT_DOUBLE_EQ(find(ep8, "experts fc1").flops, flops);
  EXPECT_DOUBLE_EQ(find(ep1, "experts fc1").flops, flops);
  EXPECT_GT(find(ep1, "experts fc1").seconds, find(ep8, "experts fc1").seconds);
  EXPECT_DOUBLE_EQ(find(ep8, "experts fc2 wgrad").flops, 2.0 * 32768 * 768 * 2048);
  // The router: a 2048 x 128 linear over every token, never in FP8.
  EXPECT_DOUBLE_EQ(find(ep8, "router").flops, 2.0 * 4096 * 128 * 2048);
  // The phases the lowering cuts the layer at.
  EXPECT_EQ(find(ep8, "experts fc1").moe, MoePhase::kExperts);
  EXPECT_EQ(find(ep8, "token unpermute").moe, MoePhase::kCombined);
  EXPECT_EQ(find(ep8, "qkv").moe, MoePhase::kOutside);
  EXPECT_EQ(find(ep8, "router").moe, MoePhase::kOutside);
}

TEST(Moe, ExpertParallelismShardsTheExpertsAndTheirState) {
  const Config c = load_config(bridge("qwen3-30b-a3b-b200"), {"cost.fp8=\"off\""});
  const auto cost = make_cost_model(c);
  const LayerSpec& layer = c.model.layer(1);
  MemoryConstants memory;  // no distributed optimizer: every rank keeps its own state
  const StaticMemory one = layer_state_bytes(*cost, c.model, 1, 1, memory, 8);
  memory.expert_parallel = 8;
  const StaticMemory eight = layer_state_bytes(*cost, c.model, 1, 1, memory, 8);
  const double experts = expert_parameters(layer);
  EXPECT_DOUBLE_EQ(one.parameters - eight.parameters, experts * 7 / 8 * 2);
  EXPECT_DOUBLE_EQ(one.optimizer - eight.optimizer, experts * 7 / 8 * 12);
  // The distributed optimizer shards every parameter's state over dp x cp in the end:
  // the experts' 1/ep over the dp / ep ranks holding the same ones.
  memory.distributed_optimizer = true;
  const StaticMemory sharded = layer_state_bytes(*cost, c.model, 1, 1, memory, 8);
  EXPECT_NEAR(sharded.optimizer, cost->parameters(1) * 12 / 8, 1e-3);
}

/// Every all-to-all of a schedule.
std::vector<const Collective*> all_to_alls_of(const Schedule& s) {
  std::vector<const Collective*> out;
  for (const RankId r : s.rank_ids()) {
    for (const Op& op : s.programs[r]) {
      const auto* c = std::get_if<Collective>(&op);
      if (c && c->kind == CollectiveKind::kAllToAll) out.push_back(c);
    }
  }
  return out;
}

TEST(Moe, EachMoeLayerPassMovesItsTokensTwiceOverTheExpertGroup) {
  const auto study = test::fixture("moe-small.toml", {"parallel.ep=2"});
  const Schedule& s = study->schedule;
  // 4 MoE layers (the first of 5 is dense), 4 microbatches, 4 lanes: F and B each run a
  // dispatch and a combine.
  const auto all_to_alls = all_to_alls_of(s);
  for (const Collective* c : all_to_alls) {
    // Megatron's order (tp-cp-ep-dp-pp) puts a stage's EP ranks on neighbouring GPUs.
    const auto& members = s.group_members(c->group);
    ASSERT_EQ(members.size(), 2u);
    EXPECT_EQ(s.ranks[members[1]].gpu - s.ranks[members[0]].gpu, 1);
    // Each token of the rank's microbatch goes to top 2 experts: 512 x 2 x 256 x 2 bytes.
    EXPECT_DOUBLE_EQ(c->bytes, 512.0 * 2 * 256 * 2);
  }
  EXPECT_EQ(all_to_alls.size(), 4u * 4 * 4 * 4);
  EXPECT_EQ(to_string(CollectiveKind::kAllToAll), std::string("alltoall"));
}

TEST(Moe, ExpertTensorParallelismSplitsTheExpertsOverTheTpGroup) {
  // tp 2 with sequence parallelism: each GPU dispatches its own half of the tokens to the
  // same GPU of its expert-parallel peer, which sits one TP group further.
  const auto study = test::fixture(
      "moe-small.toml",
      {"parallel.ep=2", "parallel.tp=2", "parallel.dp=2", "parallel.sequence_parallel=true"});
  const Schedule& s = study->schedule;
  EXPECT_NO_THROW(validate(s, *study->problem.model));
  const auto all_to_alls = all_to_alls_of(s);
  for (const Collective* c : all_to_alls) {
    const auto& members = s.group_members(c->group);
    EXPECT_EQ(s.ranks[members[1]].gpu - s.ranks[members[0]].gpu, 2);
    EXPECT_DOUBLE_EQ(c->bytes, 512.0 / 2 * 2 * 256 * 2);
  }
  EXPECT_EQ(all_to_alls.size(), 4u * 4 * 4 * 2);

  // Qwen3's layer at tp 2: every expert GEMM half as wide; the TP group gathers the routed
  // tokens its peers sent (4096 x 8 copies of 2048) and reduce-scatters the outputs.
  const Config c = load_config(bridge("qwen3-30b-a3b-b200"), {"cost.fp8=\"off\""});
  const GpuPerformance gpu(c.cluster.gpu, 2);
  auto kernels = [&](int tp, int ep) {
    return layer_kernels(c.model.layer(1), MicrobatchShape{{4096}}, tp, gpu, c.cluster.intra_node,
                         LayerKernelOptions{.sequence_parallel = tp > 1, .expert_parallel = ep});
  };
  const auto tp1 = kernels(1, 8), tp2 = kernels(2, 8);
  EXPECT_DOUBLE_EQ(find(tp2, "experts fc1").flops, find(tp1, "experts fc1").flops / 2);
  EXPECT_DOUBLE_EQ(find(tp2, "experts fc2 wgrad").flops, find(tp1, "experts fc2 wgrad").flops / 2);
  EXPECT_DOUBLE_EQ(find(tp2, "router").flops, find(tp1, "router").flops / 2);  // its own half
  const Kernel& gather = find(tp2, "etp all-gather + reduce-scatter (experts)");
  EXPECT_DOUBLE_EQ(gather.bytes, 4096.0 * 8 * 2048 * 2);
  EXPECT_EQ(gather.moe, MoePhase::kExperts);
  for (const Kernel& k : tp2) EXPECT_EQ(k.name.find("(mlp)"), std::string::npos) << k.name;
  // Without expert parallelism the layer's input is gathered whole, as for a dense MLP.
  const auto gathered = kernels(2, 1);
  EXPECT_DOUBLE_EQ(find(gathered, "tp reduce-scatter + all-gather (mlp)").bytes, 4096.0 * 2048 * 2);
  for (const Kernel& k : gathered) EXPECT_EQ(k.name.find("etp"), std::string::npos) << k.name;
}

TEST(Moe, AnAllToAllInsideANodeTakesItsClosedForm) {
  // Four ranks on one node's NVSwitch, 1 MB each: every GPU link carries 3/4 MB each way.
  Schedule s = test::ranks_on({0, 1, 2, 3});
  const GroupId g = s.add_group({0_rank, 1_rank, 2_rank, 3_rank});
  for (const RankId r : s.rank_ids())
    s.programs[r] = {Collective{.kind = CollectiveKind::kAllToAll, .group = g, .bytes = 1e6}};
  const Cluster cluster = test::small_cluster(1, 4);
  const double expected = 0.75e6 / cluster.intra_node.bandwidth + transfer_time(cluster, 0, 1, 0);
  EXPECT_NEAR(evaluate(s, cluster).iteration_time_s(), expected, 1e-15);
}

/// One half of an overlapped pair: three computes of 1 ms with an all-to-all of `bytes`
/// between each (a MoE layer's attention, experts and rest).
std::vector<Op> pair_half(Pass pass, MicrobatchId mb, GroupId group, double bytes) {
  const Compute part{.pass = pass, .microbatch = mb, .seconds = 1e-3, .continues = true};
  Compute last = part;
  last.continues = false;
  const Collective a2a{.kind = CollectiveKind::kAllToAll, .group = group, .bytes = bytes};
  return {part, a2a, part, a2a, last};
}

/// The iteration of two ranks on one node, each running one woven pair.
double woven_pair_seconds(double bytes, double slowdown) {
  Schedule s = test::ranks_on({0, 1});
  const GroupId g = s.add_group({0_rank, 1_rank});
  for (const RankId r : s.rank_ids()) {
    s.programs[r] =
        lowering::weave_overlapped_pair(pair_half(Pass::kF, MicrobatchId{1}, g, bytes),
                                        pair_half(Pass::kB, MicrobatchId{0}, g, bytes), slowdown);
  }
  return evaluate(s, test::small_cluster(1, 2)).iteration_time_s();
}

TEST(Moe, AnOverlappedPairCostsWhatItsOverlapLeaves) {
  // Each half runs to its all-to-all, issues it on the comm stream and hands over; the
  // compute under the other half's all-to-all gives it 20 SMs (DeepSeek-V3 §3.2.2), here
  // x 1.2. With all-to-alls shorter than a compute part they all hide: 6 parts + 4 slowed
  // ones' extra = 6.8 ms. With longer ones the comm stream sets the pace: the first part,
  // four all-to-alls back to back, the last part.
  const Cluster cluster = test::small_cluster(1, 2);
  auto a2a_seconds = [&](double bytes) { return transfer_time(cluster, 0, 1, bytes / 2); };
  const double short_bytes = 1e7 * 0.4, long_bytes = 1e7 * 3;
  ASSERT_LT(a2a_seconds(short_bytes), 1e-3);
  EXPECT_NEAR(woven_pair_seconds(short_bytes, 1.2), 6e-3 + 4 * 0.2e-3, 1e-12);
  ASSERT_GT(a2a_seconds(long_bytes), 1.2e-3);
  EXPECT_NEAR(woven_pair_seconds(long_bytes, 1.2), 2e-3 + 4 * a2a_seconds(long_bytes), 1e-12);
  // Against F + B with every all-to-all blocking: 6 ms + 4 all-to-alls.
  EXPECT_LT(woven_pair_seconds(long_bytes, 1.2), 6e-3 + 4 * a2a_seconds(long_bytes));
}

TEST(Moe, CombinedOneFOneBPairsTheSteadyStateAndNeedsExperts) {
  for (const char* scheduler : {"1f1b", "interleaved-1f1b"}) {
    const std::string name(scheduler);
    const auto study = test::fixture(
        "moe-small.toml", {"schedule.name=" + name, "schedule.microbatches=8",
                           "schedule." + name + ".overlap_moe_a2a=true", "parallel.ep=4"});
    int pairs = 0, async = 0;
    for (const Op& op : study->schedule.programs[0_rank]) {
      if (const auto* c = std::get_if<Compute>(&op);
          c && c->overlapped && c->pass == Pass::kF && !c->continues)
        ++pairs;
      if (const auto* c = std::get_if<Collective>(&op); c && c->kind == CollectiveKind::kAllToAll)
        async += c->async;
    }
    EXPECT_GT(pairs, 0) << name;
    EXPECT_GT(async, 0) << name;
    EXPECT_NO_THROW(validate(study->schedule, *study->problem.model)) << name;
    const std::string error = test::input_error([&] {
      test::fixture(
          "moe-small.toml",
          {"schedule.name=" + name, "schedule." + name + ".overlap_moe_a2a=true", "parallel.ep=1"});
    });
    EXPECT_NE(error.find("schedule." + name + ".overlap_moe_a2a"), std::string::npos) << error;
    EXPECT_NE(error.find("parallel.ep = 1"), std::string::npos) << error;
  }
}

TEST(Moe, WovenPairsRoundTripThroughPytorchsActionFormat) {
  for (const char* scheduler : {"dualpipe-v", "1f1b"}) {
    const std::string name(scheduler);
    std::vector<std::string> overrides = {"schedule.name=" + name, "schedule.microbatches=8",
                                          "parallel.ep=4"};
    if (name == "1f1b") overrides.push_back("schedule.1f1b.overlap_moe_a2a=true");
    const auto study = test::fixture("moe-small.toml", overrides);
    const std::string csv = format_pytorch_csv(study->schedule, false);
    EXPECT_NE(csv.find("OVERLAP_F_B"), std::string::npos) << name;
    const Schedule back = import_pytorch_csv(study->problem, csv, "moe.csv", nullptr);
    EXPECT_TRUE(back.programs == study->schedule.programs) << name;
  }
}

TEST(Moe, BadKeysAreInputErrorsNamingTheKeyAndTheFix) {
  const std::string moe = test::source_path("tests/data/moe-small.toml");
  auto error = [&](const std::string& file, std::vector<std::string> overrides) {
    return test::input_error([&] { load_config(file, overrides); });
  };
  EXPECT_NE(error(moe, {"parallel.ep=3"}).find("'parallel.ep': 3 does not divide dp x cp = 4"),
            std::string::npos);
  EXPECT_NE(error(moe, {"parallel.dp=8", "cluster.nodes=4", "parallel.ep=16"})
                .find("does not divide dp x cp"),
            std::string::npos);
  EXPECT_NE(error(moe, {"parallel.dp=6", "cluster.nodes=3", "parallel.ep=3"})
                .find("does not divide the 8 experts of module 'llm'"),
            std::string::npos);
  EXPECT_NE(error(moe, {"parallel.tp=2", "parallel.dp=2"}).find("needs sequence parallelism"),
            std::string::npos);
  EXPECT_NE(error(moe, {"parallel.tp=2", "parallel.dp=2", "parallel.sequence_parallel=true",
                        "parallel.etp=1"})
                .find("'parallel.etp': 1 differs from parallel.tp = 2"),
            std::string::npos);
  EXPECT_NE(error(test::source_path("configs/examples/uniform-1f1b.toml"), {"parallel.etp=1"})
                .find("the model has none"),
            std::string::npos);
  EXPECT_NE(error(moe, {"model.modules.llm.top_k=9"}).find("lower top_k"), std::string::npos);
  EXPECT_NE(error(moe, {"model.modules.llm.dense_layers=5"}).find("leave none"), std::string::npos);
  const std::string dense = test::source_path("configs/examples/uniform-1f1b.toml");
  EXPECT_NE(error(dense, {"parallel.ep=2"}).find("the model has none"), std::string::npos);
  EXPECT_NE(error(dense, {"model.modules.llm.top_k=2"}).find("set experts"), std::string::npos);
  EXPECT_NE(error(moe, {"parallel.order=\"cp-tp-dp-pp\""}).find("does not start with tp"),
            std::string::npos);
  EXPECT_NE(error(moe, {"parallel.order=\"tp-ep-cp-dp-pp\""}).find("right before dp"),
            std::string::npos);
  EXPECT_NE(error(moe, {"parallel.order=\"tp-cp-dp\""}).find("leaves out"), std::string::npos);
  EXPECT_NE(error(moe, {"parallel.order=\"tp-cp-dp-dp\""}).find("twice"), std::string::npos);
}

}  // namespace
}  // namespace loom

namespace loom {
namespace {

LayerSpec moe_layer(int experts, double capacity_factor = 0) {
  LayerSpec l;
  l.hidden = 64;
  l.heads = 4;
  l.experts = experts;
  l.top_k = 2;
  l.expert_ffn = 32;
  l.capacity_factor = capacity_factor;
  return l;
}

TEST(Routing, BalancedGivesEveryRankItsShare) {
  const ExpertLoad load = expert_load(Routing{}, moe_layer(8), 0, 0, 0, 4);
  for (const double s : load.rank_share) EXPECT_DOUBLE_EQ(s, 0.25);
  EXPECT_DOUBLE_EQ(load.busiest_factor(), 1);
  EXPECT_EQ(load.dropped, 0);
}

TEST(Routing, ZipfIsSeededPerLayerMicrobatchAndGroup) {
  Routing zipf = parse_routing("zipf:1.2", "routing", 64, 4, "");
  const ExpertLoad a = expert_load(zipf, moe_layer(64), 1, 3, 0, 8);
  const ExpertLoad b = expert_load(zipf, moe_layer(64), 1, 3, 0, 8);
  EXPECT_EQ(a.rank_share, b.rank_share);  // same seed, same numbers
  EXPECT_NE(a.rank_share, expert_load(zipf, moe_layer(64), 1, 4, 0, 8).rank_share);
  EXPECT_NE(a.rank_share, expert_load(zipf, moe_layer(64), 2, 3, 0, 8).rank_share);
  zipf.seed = 2;
  EXPECT_NE(a.rank_share, expert_load(zipf, moe_layer(64), 1, 3, 0, 8).rank_share);
  double total = 0;
  for (const double s : a.rank_share) total += s;
  EXPECT_NEAR(total, 1, 1e-12);
  EXPECT_GT(a.busiest_factor(), 1.1);  // the busiest rank carries more than its 1/8
  // The busiest expert of a Zipf law with S = 1.2 over 64 experts: 1 / H(64, 1.2) of them.
  double harmonic = 0;
  for (int r = 1; r <= 64; ++r) harmonic += std::pow(r, -1.2);
  const ExpertLoad one = expert_load(zipf, moe_layer(64), 0, 0, 0, 64);
  EXPECT_NEAR(*std::max_element(one.rank_share.begin(), one.rank_share.end()), 1 / harmonic, 1e-12);
}

TEST(Routing, ACapacityFactorDropsWhatExceedsIt) {
  Routing zipf = parse_routing("zipf:1.0", "routing", 8, 1, "");
  // Capacity 1.0: an expert computes at most 1/8 of the copies; the rest is dropped.
  const ExpertLoad load = expert_load(zipf, moe_layer(8, 1.0), 0, 0, 0, 8);
  double harmonic = 0, over = 0;
  for (int r = 1; r <= 8; ++r) harmonic += 1.0 / r;
  for (int r = 1; r <= 8; ++r) over += std::max(0.0, 1.0 / r / harmonic - 1.0 / 8);
  EXPECT_NEAR(load.dropped, over, 1e-12);
  for (const double s : load.rank_share) EXPECT_LE(s, 1.0 / 8 + 1e-15);
  EXPECT_NEAR(load.busiest_factor(), 1, 1e-12);
}

TEST(Routing, ATraceGivesMeasuredLoadsAndBadOnesNameTheLine) {
  test::TempDir dir;
  const std::string good = dir.write("loads.csv", "layer,expert,load\n0,0,3\n0,1,1\n");
  const Routing r = parse_routing("trace:" + good, "routing", 2, 1, "");
  const ExpertLoad load = expert_load(r, moe_layer(2), 0, 7, 0, 2);
  EXPECT_DOUBLE_EQ(load.rank_share[0], 0.75);
  EXPECT_DOUBLE_EQ(load.busiest_factor(), 1.5);
  const std::string bad = dir.write("bad.csv", "layer,expert,load\n0,0,1\n0,5,1\n");
  EXPECT_NE(test::input_error([&] {
              parse_routing("trace:" + bad, "routing", 2, 1, "");
            }).find("bad.csv:3: expert 5 is not one of the 2 experts"),
            std::string::npos);
  EXPECT_NE(test::input_error([&] {
              parse_routing("zipf:-1", "routing", 2, 1, "");
            }).find("no exponent > 0"),
            std::string::npos);
  EXPECT_NE(test::input_error([&] {
              parse_routing("skewed", "routing", 2, 1, "");
            }).find("unknown routing 'skewed'"),
            std::string::npos);
}

TEST(Routing, ImbalanceMovesExpertWorkBetweenRanksAndLosesNone) {
  // Without a capacity factor the group's shares sum to 1: every pass's experts work (F, I
  // and the split W of zb-h1 alike) moves between the members, the total stays.
  auto computes = [](const std::string& routing) {
    const auto study = test::fixture(
        "moe-small.toml",
        {"parallel.ep=4", "schedule.name=zb-h1", "model.modules.llm.routing=\"" + routing + "\""});
    // Per rank: all its compute, and its weight-gradient (W) passes alone.
    std::vector<double> per_rank, weight_passes;
    for (const auto& program : study->schedule.programs) {
      double total = 0, w = 0;
      for (const Op& op : program) {
        if (const auto* c = std::get_if<Compute>(&op)) {
          total += c->seconds;
          if (c->pass == Pass::kW) w += c->seconds;
        }
      }
      per_rank.push_back(total);
      weight_passes.push_back(w);
    }
    return std::pair{per_rank, weight_passes};
  };
  const auto [balanced, balanced_w] = computes("balanced");
  const auto [skewed, skewed_w] = computes("zipf:1.0");
  double sum_balanced = 0, sum_skewed = 0, w_balanced = 0, w_skewed = 0;
  for (size_t r = 0; r < balanced.size(); ++r) {
    sum_balanced += balanced[r];
    sum_skewed += skewed[r];
    w_balanced += balanced_w[r];
    w_skewed += skewed_w[r];
  }
  EXPECT_NEAR(sum_skewed, sum_balanced, 1e-9 * sum_balanced);
  EXPECT_NEAR(w_skewed, w_balanced, 1e-9 * w_balanced);
  EXPECT_NE(balanced, skewed);
  EXPECT_NE(balanced_w, skewed_w);  // the split W carries each rank's share too
}

TEST(Routing, ImbalanceSlowsTheIterationAndTheBusiestRankSetsIt) {
  auto iteration = [](const std::string& routing) {
    const auto study = test::fixture(
        "moe-small.toml", {"parallel.ep=4", "model.modules.llm.routing=\"" + routing + "\""});
    return evaluate(study->schedule, study->config.cluster).iteration_time_s();
  };
  const double balanced = iteration("balanced");
  EXPECT_GT(iteration("zipf:1.0"), balanced);
  EXPECT_GT(iteration("zipf:2.0"), iteration("zipf:1.0"));
  EXPECT_EQ(iteration("zipf:1.0"), iteration("zipf:1.0"));
}

}  // namespace
}  // namespace loom

namespace loom {
namespace {

TEST(Moe, DeepSeekV3HasItsPublishedCountsWithLatentAttention) {
  // DeepSeek-V3 technical report §4.2: 671B parameters, 37B activated per token, and 14B
  // more in the multi-token-prediction module (one MoE layer, its 2h x h projection and
  // its own copies of the embedding and the head, which Loom shares with the model's).
  const Config c = load_config(bridge("deepseek-v3-b200"), {});
  ASSERT_EQ(c.model.num_layers(), 62);
  ASSERT_TRUE(c.model.layer(61).mtp);
  const Counts n = parameter_counts(c);
  const LayerSpec& mtp = c.model.layer(61);
  const double mtp_total = layer_parameters(mtp);
  EXPECT_DOUBLE_EQ(mtp_total - layer_parameters(c.model.layer(60)), 2.0 * 7168 * 7168);
  EXPECT_NEAR((n.total - mtp_total) / 1e9, 671, 1);
  const double mtp_active = mtp_total - expert_parameters(mtp) * (1 - 8.0 / 256);
  EXPECT_NEAR((n.active - mtp_active) / 1e9, 37, 0.6);
  EXPECT_NEAR((mtp_total + 2.0 * 129280 * 7168) / 1e9, 14, 0.6);
  // MLA's projections per layer: q down 7168 x 1536, q up 1536 x 128 x 192, kv down
  // 7168 x 576, kv up 512 x 128 x 256, output 128 x 128 x 7168.
  const LayerSpec& l = c.model.layer(5);
  double attention = 0;
  for (const AttentionProjection& p : attention_projections(l)) attention += p.in * p.out;
  EXPECT_DOUBLE_EQ(attention, 7168.0 * 1536 + 1536.0 * 128 * 192 + 7168.0 * 576 +
                                  512.0 * 128 * 256 + 128.0 * 128 * 7168);
  // Model FLOPs per token at 4096: the table's 557 TFLOP/s at 2139 tokens/s, the MTP
  // module (one more MoE layer, its 2h x h projection and a second LM head) included.
  EXPECT_NEAR(flops_per_token(c.model, 4096) * 2139 / 1e12, 557, 1.5);
  EXPECT_DOUBLE_EQ(
      layer_forward_flops(c.model, 61, {{4096}}) - layer_forward_flops(c.model, 5, {{4096}}),
      4096 * 2.0 * (2.0 * 7168 * 7168 + 7168.0 * 129280) + 4096 * 2.0 * 7168 * 129280);
  // Scores at 192 and values at 128 per head, causal: 2 s^2 x 128 x (192 + 128) / 2, the
  // part of a layer's FLOPs quadratic in s: f(2s) - 2 f(s) = 2 s^2 x that coefficient.
  Module m = test::tiny_module("m", ModuleKind::kLlm, 1, false);
  m.layers = {l};
  const Model one({m});
  const double s = 1000;
  EXPECT_NEAR(layer_forward_flops(one, 0, {{2000}}) - 2 * layer_forward_flops(one, 0, {{1000}}),
              2 * s * s * 128 * (192 + 128), 1);
}

TEST(Moe, LatentAttentionKeysNeedKvLoraRank) {
  const std::string moe = test::source_path("tests/data/moe-small.toml");
  EXPECT_NE(test::input_error([&] {
              load_config(moe, {"model.modules.llm.q_lora_rank=64"});
            }).find("set kv_lora_rank"),
            std::string::npos);
  EXPECT_NE(test::input_error([&] {
              load_config(bridge("deepseek-v3-b200"), {"parallel.cp=2", "parallel.dp=8"});
            }).find("multi-head latent attention"),
            std::string::npos);
}

}  // namespace
}  // namespace loom
