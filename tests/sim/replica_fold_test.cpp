// Symmetric folding of data-parallel replicas (core/replica_fold.hpp): a folded run must
// give the unfolded run's iteration time (within 0.1 %), throughput and per-rank memory on
// both backends, including layouts whose replicas share nodes and NICs, and folding must
// turn itself off, saying why, wherever replicas are not identical.
#include <gtest/gtest.h>

#include <algorithm>

#include "app/study_run.hpp"
#include "core/evaluator.hpp"
#include "core/timeline.hpp"
#include "test_support.hpp"

namespace loom {
namespace {

/// A 1F1B-family job with table costs whose messages and gradients are big enough to
/// contend: pipeline activations of 16 MiB and a ring all-reduce of every rank's gradients.
std::string job(int pp, int dp, int tp, int nodes, int nics, const std::string& scheduler,
                int chunks = 1) {
  return "[[model.modules]]\nname = \"llm\"\nkind = \"llm\"\nlayers = 32\nhidden = 4096\n"
         "heads = 32\n[cost]\nmodel = \"table\"\n[cost.table.llm]\nforward = \"1ms\"\n"
         "input_grad = \"1ms\"\nweight_grad = \"1ms\"\nactivation_bytes = \"64MiB\"\n"
         "output_bytes = \"16MiB\"\nparameters = 5e7\n"
         "[cluster]\nnodes = " +
         std::to_string(nodes) +
         "\ngpus_per_node = 8\ngpu = \"H100\"\nnics_per_node = " + std::to_string(nics) +
         "\nintra_node = { preset = \"nvlink4\" }\ninter_node = { preset = \"ib-ndr\" }\n"
         "[parallel]\npp = " +
         std::to_string(pp) + "\ndp = " + std::to_string(dp) + "\ntp = " + std::to_string(tp) +
         "\n[schedule]\nname = \"" + scheduler +
         "\"\nmicrobatches = 8\nchunks = " + std::to_string(chunks) + "\n";
}

struct Case {
  const char* name;
  int pp, dp, tp, nodes, nics;
  const char* scheduler;
  int chunks;
  int simulated;  ///< replicas the fold keeps
};

// u = lcm(pp x tp, 8) / (pp x tp) replicas fill whole nodes; the fold keeps 2u (or the
// smallest k x u, k >= 2, that divides dp).
const Case kCases[] = {
    {"two_replicas_per_node_one_nic", 4, 16, 1, 8, 1, "1f1b", 1, 4},
    {"replicas_straddle_nodes", 3, 32, 1, 12, 1, "1f1b", 1, 16},
    {"tp2_one_replica_per_two_nodes", 8, 8, 2, 16, 8, "zb-h1", 1, 2},
    {"interleaved_three_blocks_of_two", 4, 12, 1, 6, 1, "interleaved-1f1b", 2, 4},
};

class FoldAgrees : public ::testing::TestWithParam<Case> {};

TEST_P(FoldAgrees, OnIterationTimeThroughputAndMemory) {
  const Case& c = GetParam();
  test::TempDir dir;
  const std::string path =
      dir.write("job.toml", job(c.pp, c.dp, c.tp, c.nodes, c.nics, c.scheduler, c.chunks));
  const auto folded = prepare_study(path, {}, Folding::kAllowed);
  const auto whole = prepare_study(path, {}, Folding::kOff);
  ASSERT_TRUE(folded->fold.folded()) << folded->fold.describe();
  EXPECT_EQ(folded->fold.simulated, c.simulated);
  EXPECT_EQ(folded->schedule.replica_fold * c.simulated, c.dp);
  EXPECT_EQ(folded->fold.describe(), "simulated " + std::to_string(c.simulated) + " of " +
                                         std::to_string(c.dp) + " replicas; symmetric");

  const Metrics mf =
      compute_metrics(folded->schedule, evaluate(folded->schedule, folded->config.cluster));
  const Metrics mw =
      compute_metrics(whole->schedule, evaluate(whole->schedule, whole->config.cluster));
  EXPECT_NEAR(mf.iteration_time_s / mw.iteration_time_s, 1.0, 1e-3);
  EXPECT_NEAR(mf.throughput_samples_per_s / mw.throughput_samples_per_s, 1.0, 1e-3);
  // Every rank of the job has the memory of its counterpart in the simulated replicas.
  const int per = folded->schedule.num_ranks() / c.simulated;
  for (const RankId r : mw.per_rank.ids()) {
    EXPECT_EQ(mw.per_rank[r].peak_memory_bytes,
              mf.per_rank[RankId{r.value() % (per * c.simulated)}].peak_memory_bytes)
        << "rank " << r;
  }

  // SimGrid, where links are shared: each run in its own child process.
  const double sim_folded = iteration_time(path, {}, "simgrid");
  const double sim_whole = iteration_time(path, {"sim.fold=false"}, "simgrid");
  EXPECT_NEAR(sim_folded / sim_whole, 1.0, 1e-3) << sim_folded << " vs " << sim_whole;
  // With one NIC per node the pipeline and all-reduce flows really contend: SimGrid is
  // well above the contention-free evaluator (30-50 % on these jobs).
  if (c.nics == 1) {
    EXPECT_GT(sim_whole, 1.2 * mw.iteration_time_s);
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, FoldAgrees, ::testing::ValuesIn(kCases),
                         [](const auto& p) { return std::string(p.param.name); });

TEST(ReplicaFold, AgreesOnTheThousandGpuBenchConfig) {
  const std::string path = test::source_path("configs/bench/pp16-dp64.toml");
  const double folded = iteration_time(path, {}, "simgrid");
  const double whole = iteration_time(path, {"sim.fold=false"}, "simgrid");
  EXPECT_NEAR(folded / whole, 1.0, 1e-3) << folded << " vs " << whole;
  const auto study = prepare_study(path, {}, Folding::kAllowed);
  EXPECT_EQ(study->fold.describe(), "simulated 2 of 64 replicas; symmetric");
}

TEST(ReplicaFold, TiedEmbeddingsAndTheDistributedOptimizerFoldExactly) {
  // Megatron's GPT at 32 replicas: each replica's embedding all-reduce is a group inside
  // it (folded on the shifted group, its ring not widened by the fold), and ZeRO-1 shards
  // the optimizer state and step over all 32 replicas, not the 2 simulated.
  const std::string path = test::source_path("validation/megatron-narayanan-2021/n1-39.1b.toml");
  const std::vector<std::string> zero1 = {"parallel.distributed_optimizer=true"};
  const auto folded = prepare_study(path, zero1, Folding::kAllowed);
  const auto whole = prepare_study(path, zero1, Folding::kOff);
  ASSERT_TRUE(folded->fold.folded()) << folded->fold.describe();
  const Metrics mf =
      compute_metrics(folded->schedule, evaluate(folded->schedule, folded->config.cluster));
  const Metrics mw =
      compute_metrics(whole->schedule, evaluate(whole->schedule, whole->config.cluster));
  EXPECT_NEAR(mf.iteration_time_s / mw.iteration_time_s, 1.0, 1e-9);
  for (const RankId r : mf.per_rank.ids())
    EXPECT_EQ(mf.per_rank[r].peak_memory_bytes, mw.per_rank[r].peak_memory_bytes) << r;
  const double sim_folded = iteration_time(path, zero1, "simgrid");
  std::vector<std::string> unfolded = zero1;
  unfolded.push_back("sim.fold=false");
  EXPECT_NEAR(sim_folded / iteration_time(path, unfolded, "simgrid"), 1.0, 1e-3);
}

TEST(ReplicaFold, OverlappedGradientBucketsFoldExactly) {
  // Every replica splits its last backward and issues its buckets alike, on one group per
  // rank across all 32 replicas: the fold keeps the ring's size and the answer.
  const std::string path = test::source_path("validation/megatron-narayanan-2021/n1-39.1b.toml");
  const std::vector<std::string> overlap = {"parallel.overlap_grad_reduce=true"};
  const auto folded = prepare_study(path, overlap, Folding::kAllowed);
  const auto whole = prepare_study(path, overlap, Folding::kOff);
  ASSERT_TRUE(folded->fold.folded()) << folded->fold.describe();
  EXPECT_NEAR(evaluate(folded->schedule, folded->config.cluster).iteration_time_s() /
                  evaluate(whole->schedule, whole->config.cluster).iteration_time_s(),
              1.0, 1e-9);
  std::vector<std::string> unfolded = overlap;
  unfolded.push_back("sim.fold=false");
  EXPECT_NEAR(iteration_time(path, overlap, "simgrid") / iteration_time(path, unfolded, "simgrid"),
              1.0, 1e-3);
}

TEST(ReplicaFold, AFailoverInEveryReplicaStaysSymmetricAndExact) {
  // A failure in `loom sim` is Bamboo's failover ([schedule.bamboo] failed_over), which every
  // replica runs alike: folding stays on, and must still give the unfolded answer.
  test::TempDir dir;
  const std::string path = dir.write(
      "job.toml", job(4, 16, 1, 8, 1, "bamboo") + "[schedule.bamboo]\nfailed_over = [2]\n");
  const auto folded = prepare_study(path, {}, Folding::kAllowed);
  const auto whole = prepare_study(path, {}, Folding::kOff);
  ASSERT_TRUE(folded->fold.folded()) << folded->fold.describe();
  const double evaluator_folded =
      compute_metrics(folded->schedule, evaluate(folded->schedule, folded->config.cluster))
          .iteration_time_s;
  const double evaluator_whole =
      compute_metrics(whole->schedule, evaluate(whole->schedule, whole->config.cluster))
          .iteration_time_s;
  EXPECT_NEAR(evaluator_folded / evaluator_whole, 1.0, 1e-3);
  const double sim_folded = iteration_time(path, {}, "simgrid");
  const double sim_whole = iteration_time(path, {"sim.fold=false"}, "simgrid");
  EXPECT_NEAR(sim_folded / sim_whole, 1.0, 1e-3) << sim_folded << " vs " << sim_whole;
}

/// A small MoE model (tests/data/moe-small.toml's layers) at pp 2 on 8-GPU nodes, `dp`
/// replicas, expert parallelism `ep`, placed by `order`.
std::string moe_job(int dp, int ep, const std::string& order, int nodes) {
  return "[[model.modules]]\nname = \"llm\"\nkind = \"llm\"\nlayers = 5\nhidden = 256\n"
         "heads = 4\nkv_heads = 2\ngated_mlp = true\nexperts = 8\ntop_k = 2\nexpert_ffn = 128\n"
         "shared_experts = 1\ndense_layers = 1\nffn = 512\nvocab = 1024\n"
         "[workload]\ntokens = { text = 512 }\n[cost]\nmodel = \"analytical\"\n"
         "[cluster]\nnodes = " +
         std::to_string(nodes) +
         "\ngpus_per_node = 8\ngpu = \"H100\"\nnics_per_node = 1\n"
         "intra_node = { preset = \"nvlink4\" }\ninter_node = { preset = \"ib-ndr\" }\n"
         "[parallel]\norder = \"" +
         order + "\"\npp = 2\ndp = " + std::to_string(dp) + "\nep = " + std::to_string(ep) +
         "\n[schedule]\nname = \"1f1b\"\nmicrobatches = 4\n";
}

struct MoeCase {
  const char* name;
  const char* order;
  int dp, ep, nodes;
  int simulated;
  std::vector<std::string> overrides = {};
};

// Loom's order: 4 replicas (pp 2) fill a node and hold one group of 4 (or half of one of
// 8: blocks of 8). Megatron's: a node holds 8 replicas' copies of one stage.
const MoeCase kMoeCases[] = {
    {"loom_order_ep4", "tp-cp-pp-dp", 16, 4, 4, 8},
    {"loom_order_ep8_groups_span_nodes", "tp-cp-pp-dp", 32, 8, 8, 16},
    {"megatron_order_ep4", "tp-cp-ep-dp-pp", 32, 4, 8, 16},
    {"loom_order_ep4_fsdp", "tp-cp-pp-dp", 16, 4, 4, 8, {"parallel.fsdp=true"}},
};

class MoeFoldAgrees : public ::testing::TestWithParam<MoeCase> {};

TEST_P(MoeFoldAgrees, WithExpertParallelGroupsWholeInsideBlocks) {
  const MoeCase& c = GetParam();
  test::TempDir dir;
  const std::string path = dir.write("job.toml", moe_job(c.dp, c.ep, c.order, c.nodes));
  const auto folded = prepare_study(path, c.overrides, Folding::kAllowed);
  const auto whole = prepare_study(path, c.overrides, Folding::kOff);
  ASSERT_TRUE(folded->fold.folded()) << folded->fold.describe();
  EXPECT_EQ(folded->fold.simulated, c.simulated);
  const Metrics mf =
      compute_metrics(folded->schedule, evaluate(folded->schedule, folded->config.cluster));
  const Metrics mw =
      compute_metrics(whole->schedule, evaluate(whole->schedule, whole->config.cluster));
  EXPECT_NEAR(mf.iteration_time_s / mw.iteration_time_s, 1.0, 1e-9);
  // The experts' optimizer state shards over the job's dp / ep, not the simulated.
  for (const RankId r : mf.per_rank.ids()) {
    EXPECT_EQ(mf.per_rank[r].peak_memory_bytes, mw.per_rank[r].peak_memory_bytes) << r;
  }
  std::vector<std::string> unfolded = c.overrides;
  unfolded.push_back("sim.fold=false");
  const double sim_folded = iteration_time(path, c.overrides, "simgrid");
  const double sim_whole = iteration_time(path, unfolded, "simgrid");
  EXPECT_NEAR(sim_folded / sim_whole, 1.0, 1e-3) << sim_folded << " vs " << sim_whole;
}

INSTANTIATE_TEST_SUITE_P(Orders, MoeFoldAgrees, ::testing::ValuesIn(kMoeCases),
                         [](const auto& p) { return std::string(p.param.name); });

TEST(ReplicaFold, TurnsOffForRoutingThatDrawsLoadsPerGroup) {
  test::TempDir dir;
  const std::string path = dir.write("job.toml", moe_job(16, 4, "tp-cp-pp-dp", 4));
  const auto study =
      prepare_study(path, {"model.modules.llm.routing=\"zipf:1.2\""}, Folding::kAllowed);
  EXPECT_FALSE(study->fold.folded());
  EXPECT_NE(study->fold.reason.find("routes by zipf:1.2"), std::string::npos) << study->fold.reason;
}

TEST(ReplicaFold, AnAllToAllGroupOutOfStepIsAnAsymmetry) {
  test::TempDir dir;
  const auto study =
      prepare_study(dir.write("job.toml", moe_job(16, 4, "tp-cp-pp-dp", 4)), {}, Folding::kAllowed);
  ASSERT_TRUE(study->fold.folded());
  Schedule s = study->schedule;
  EXPECT_EQ(replica_asymmetry(s), "");
  // Replica 5 runs replica 1's program shifted by one group of 4 replicas.
  std::get<Compute>(s.programs[10_rank][0]).seconds *= 1.5;
  EXPECT_EQ(replica_asymmetry(s), "replica 5 rank 10 op #0 differs from replica 1's");
  // An expert-parallel group over replicas 1-4 straddles two windows of 4.
  s = study->schedule;
  for (auto& group : s.groups) {
    if (group.size() == 4 && s.ranks[group[0]].replica == ReplicaId{0} &&
        s.ranks[group[3]].replica == ReplicaId{3}) {
      for (RankId& m : group) m += 2;  // pp 2: one replica on
      break;
    }
  }
  EXPECT_NE(replica_asymmetry(s), "");
}

TEST(ReplicaFold, TurnsOffForSamplesThatDiffer) {
  test::TempDir dir;
  std::string csv = "sample_id,text_tokens\n";
  for (int i = 0; i < 16 * 8; ++i)
    csv += std::to_string(i) + "," + std::to_string(512 + 64 * (i % 7)) + "\n";
  const std::string samples = dir.write("samples.csv", csv);
  const std::string path = dir.write(
      "job.toml", job(4, 16, 1, 8, 1, "1f1b") + "[workload]\ncsv = \"" + samples + "\"\n");
  const auto study = prepare_study(path, {}, Folding::kAllowed);
  EXPECT_FALSE(study->fold.folded());
  EXPECT_EQ(study->schedule.replica_fold, 1);
  EXPECT_NE(study->fold.describe().find("not folded: the samples differ in cost (workload.csv)"),
            std::string::npos)
      << study->fold.describe();
}

TEST(ReplicaFold, TurnsOffForPerModuleLayouts) {
  const auto study = prepare_study(
      test::source_path("configs/paper/hetero-1b7b-64k-v75-colocated.toml"), {}, Folding::kAllowed);
  EXPECT_FALSE(study->fold.folded());
  EXPECT_NE(study->fold.reason.find("per-module layouts"), std::string::npos) << study->fold.reason;
}

TEST(ReplicaFold, TurnsOffWhereBlocksOfNodesDiffer) {
  // pp 3 on 8-GPU nodes: 8 replicas fill 3 nodes; 20 replicas are not whole blocks, so
  // the nodes do not all look alike.
  test::TempDir dir;
  const std::string path = dir.write("job.toml", job(3, 20, 1, 8, 1, "1f1b"));
  const auto study = prepare_study(path, {}, Folding::kAllowed);
  EXPECT_FALSE(study->fold.folded());
  EXPECT_NE(study->fold.reason.find("20 replicas are not whole blocks of 8"), std::string::npos)
      << study->fold.reason;
  // Too few blocks to keep two and still save anything.
  const auto three =
      prepare_study(dir.write("three.toml", job(3, 24, 1, 9, 1, "1f1b")), {}, Folding::kAllowed);
  EXPECT_FALSE(three->fold.folded());
}

TEST(ReplicaFold, NoFoldSwitchesItOff) {
  test::TempDir dir;
  const std::string path = dir.write("job.toml", job(4, 16, 1, 8, 1, "1f1b"));
  const auto study = prepare_study(path, {"sim.fold=false"}, Folding::kAllowed);
  EXPECT_FALSE(study->fold.folded());
  EXPECT_EQ(study->fold.describe(), "not folded: sim.fold = false");
  EXPECT_EQ(study->schedule.num_ranks(), 4 * 16);
}

TEST(ReplicaFold, TurnsOffForKernelNoise) {
  test::TempDir dir;
  const std::string path = dir.write("job.toml", job(4, 16, 1, 8, 1, "1f1b"));
  const auto study = prepare_study(path, {"cost.jitter=0.01"}, Folding::kAllowed);
  EXPECT_FALSE(study->fold.folded());
  EXPECT_NE(study->fold.reason.find("cost.jitter"), std::string::npos) << study->fold.reason;
  EXPECT_EQ(study->schedule.num_ranks(), 4 * 16);
}

TEST(ReplicaFold, AsymmetryNamesTheFirstDifference) {
  test::TempDir dir;
  const auto study = prepare_study(dir.write("job.toml", job(4, 4, 1, 2, 1, "1f1b")), {});
  Schedule s = study->schedule;
  EXPECT_EQ(replica_asymmetry(s), "");
  std::get<Compute>(s.programs[8_rank][0]).seconds *= 1.5;  // replica 2, rank 8: a straggler
  EXPECT_EQ(replica_asymmetry(s), "replica 2 rank 8 op #0 differs from replica 0's");
  s = study->schedule;
  s.ranks[5_rank].gpu += 1;
  EXPECT_NE(replica_asymmetry(s).find("is not placed as replica 0's rank 1"), std::string::npos);
}

}  // namespace
}  // namespace loom
