// Context parallelism in the single layout (parallel.cp; lowering/context_parallel.hpp) on
// Narayanan et al.'s 39.1B GPT (TP 8 x PP 2, 2,048-token sequences, analytical costs):
// where CP ranks run, the ring's steps and bytes, the all-gather form, the split of work,
// the overlap bound of a ring step, the gradient groups and folding. SimGrid against the
// evaluator: tests/sim/simgrid_backend_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <variant>

#include "core/evaluator.hpp"
#include "core/schedule_text.hpp"
#include "core/validate.hpp"
#include "test_support.hpp"

namespace loom {
namespace {

/// The GPT of test::megatron_gpt with `cp` context-parallel ranks (and nodes for them).
std::unique_ptr<Study> gpt(int cp, std::vector<std::string> extra = {}) {
  std::vector<std::string> overrides = {"parallel.cp=" + std::to_string(cp),
                                        "cluster.nodes=" + std::to_string(4 * cp),
                                        "sim.backend=evaluator"};
  overrides.insert(overrides.end(), extra.begin(), extra.end());
  return test::megatron_gpt(overrides);
}

/// K and V of one CP rank's tokens for one layer, per GPU of its TP group.
double kv_block(const Study& study) {
  const LayerSpec& layer = study.config.model.layer(1);
  const int cp = study.config.parallel.cp, tp = study.config.parallel.tp;
  const double tokens = 1.0 * study.problem.samples.front().tokens.at("text") *
                        study.config.schedule.microbatch_size / cp;
  const double head_dim = layer.head_size();
  return tokens * 2 * std::max(1, layer.kv_heads / tp) * head_dim * layer.dtype_bytes;
}

bool cp_message(const Op& op) {
  if (const auto* s = std::get_if<Send>(&op)) return s->tag.context_parallel();
  if (const auto* r = std::get_if<Recv>(&op)) return r->tag.context_parallel();
  return false;
}

TEST(ContextParallel, EveryStageRunsOnCpTpGroupsThatShareTheReplicasSamples) {
  const auto study = gpt(2);
  const Schedule& s = study->schedule;
  ASSERT_EQ(s.cp, 2);
  ASSERT_EQ(s.num_ranks(), 2 /*dp*/ * 2 /*cp*/ * 2 /*pp*/);
  EXPECT_NO_THROW(validate(s, study->config.model));
  for (const RankId r : s.rank_ids()) {
    // rank = (replica x cp + cp rank) x stages + stage; GPUs: replica, stage, CP rank, TP.
    const int stage = r.value() % 2, cp_rank = r.value() / 2 % 2, replica = r.value() / 4;
    EXPECT_EQ(s.cp_rank(r), cp_rank);
    EXPECT_EQ(s.ranks[r].replica, ReplicaId{replica});
    EXPECT_EQ(s.ranks[r].gpu, ((replica * 2 + stage) * 2 + cp_rank) * 8) << to_string(r);
  }
  // Both CP ranks of a replica run every microbatch of it: samples are not duplicated.
  EXPECT_EQ(isize(s.samples), 2);
  // The text form keeps the CP degree and the layers' parts.
  EXPECT_EQ(parse_schedule(format_schedule(s), "cp.txt"), s);
}

TEST(ContextParallel, RingPassesOneKvBlockPerStepForwardAndKvWithGradientsBackward) {
  for (const int cp : {2, 4}) {
    SCOPED_TRACE("cp " + std::to_string(cp));
    const auto study = gpt(cp);
    const Schedule& s = study->schedule;
    const double block = kv_block(*study);
    // Per (rank, pass, microbatch, layer): the CP sends' bytes, and their peers.
    std::map<std::tuple<int, Pass, int, int>, std::vector<double>> sends;
    for (const RankId r : s.rank_ids()) {
      for (const Op& op : s.programs[r]) {
        const auto* send = std::get_if<Send>(&op);
        if (!send || !send->tag.context_parallel()) continue;
        // The next CP rank of the same replica and stage.
        const int stages = s.num_stages;
        const int lane = r.value() / stages, next_lane = lane / cp * cp + (lane % cp + 1) % cp;
        EXPECT_EQ(send->peer, RankId{next_lane * stages + r.value() % stages});
        sends[{r.value(), send->tag.pass, send->tag.microbatch.value(), send->tag.boundary_layer}]
            .push_back(send->bytes);
      }
    }
    int transformer_layers = 0;
    for (int l = 0; l < study->config.model.num_layers(); ++l)
      transformer_layers += study->config.model.layer(l).kind == LayerKind::kTransformer;
    // Every rank's layers, every microbatch, forward and backward.
    EXPECT_EQ(isize(sends), s.num_ranks() / 2 * transformer_layers * 4 /*microbatches*/ * 2)
        << "one entry per rank, pass, microbatch and transformer layer";
    for (const auto& [key, bytes] : sends) {
      if (std::get<1>(key) == Pass::kF) {
        EXPECT_EQ(isize(bytes), cp - 1) << "cp - 1 ring steps";
        for (const double b : bytes) EXPECT_DOUBLE_EQ(b, block);
      } else {
        ASSERT_EQ(isize(bytes), cp) << "cp - 1 steps, then dK/dV home";
        for (int i = 0; i + 1 < cp; ++i) EXPECT_DOUBLE_EQ(bytes[i], 2 * block);
        EXPECT_DOUBLE_EQ(bytes.back(), block);
      }
    }
  }
}

TEST(ContextParallel, AllGatherGathersKvBeforeAttentionAndReduceScattersItsGradients) {
  const auto study = gpt(2, {"parallel.cp_comm=\"all-gather\""});
  const Schedule& s = study->schedule;
  const double block = kv_block(*study);
  std::map<CollectiveKind, int> count;
  for (const RankId r : s.rank_ids()) {
    for (const Op& op : s.programs[r]) {
      EXPECT_FALSE(cp_message(op)) << "no ring messages";
      const auto* c = std::get_if<Collective>(&op);
      if (!c || c->bytes != 2 * block) continue;
      const auto& members = s.group_members(c->group);
      ASSERT_EQ(isize(members), 2);
      EXPECT_TRUE(s.group_in_one_replica(c->group)) << "the CP ring of one stage";
      ++count[c->kind];
    }
  }
  // Forward: one all-gather per layer; backward: all-gather again, then reduce-scatter.
  EXPECT_EQ(count[CollectiveKind::kAllGather], 2 * count[CollectiveKind::kReduceScatter]);
  EXPECT_GT(count[CollectiveKind::kReduceScatter], 0);
}

TEST(ContextParallel, UlyssesMovesQkvToHeadsAndTheOutputBackByAllToAlls) {
  // cp_comm = "a2a": per layer and pass two all-to-alls over the CP group. Forward: the
  // rank's Q, K, V rows (Q half as wide as K and V together here) out, the output in;
  // backward: the output's gradient in, dQ, dK, dV out.
  const auto study = gpt(2, {"parallel.cp_comm=\"a2a\""});
  const Schedule& s = study->schedule;
  const double block = kv_block(*study);
  std::map<double, int> bytes;
  for (const RankId r : s.rank_ids()) {
    for (const Op& op : s.programs[r]) {
      EXPECT_FALSE(cp_message(op)) << "no ring messages";
      const auto* c = std::get_if<Collective>(&op);
      if (!c || c->kind != CollectiveKind::kAllToAll) continue;
      EXPECT_EQ(isize(s.group_members(c->group)), 2);
      EXPECT_TRUE(s.group_in_one_replica(c->group));
      ++bytes[c->bytes];
    }
  }
  ASSERT_EQ(bytes.size(), 2u);
  EXPECT_DOUBLE_EQ(bytes.begin()->first, block / 2);     // the output (or its gradient)
  EXPECT_DOUBLE_EQ(bytes.rbegin()->first, 1.5 * block);  // Q, K, V (or their gradients)
  EXPECT_EQ(bytes.begin()->second, bytes.rbegin()->second);
  // The same work as the ring's, its attention whole between the two exchanges.
  const auto ring = gpt(2);
  double ulysses = 0, p2p = 0;
  for (const RankId r : s.rank_ids()) {
    for (const Op& op : s.programs[r])
      if (const auto* c = std::get_if<Compute>(&op)) ulysses += c->seconds;
    for (const Op& op : ring->schedule.programs[r])
      if (const auto* c = std::get_if<Compute>(&op)) p2p += c->seconds;
  }
  EXPECT_NEAR(ulysses, p2p, p2p * 1e-12);
  // Heads must split over tp x cp.
  EXPECT_NE(test::input_error([] {
              gpt(16, {"parallel.cp_comm=\"a2a\""});
            }).find("splits the attention heads over tp x cp = 128 GPUs"),
            std::string::npos);
}

/// Seconds of compute on rank r (only its forward passes with `forward_only`).
double busy(const Schedule& s, RankId r, bool forward_only = false) {
  double total = 0;
  for (const Op& op : s.programs[r]) {
    const auto* c = std::get_if<Compute>(&op);
    if (c && (!forward_only || c->pass == Pass::kF)) total += c->seconds;
  }
  return total;
}

TEST(ContextParallel, EachCpRankDoesItsShareOfTheWorkAndGradientsReduceOverDpTimesCp) {
  // FLOPs at a fixed fraction of the peak: a rank's work is exactly its FLOPs.
  const std::string flops_only = "cost.efficiency=0.5";
  const auto one = gpt(1, {flops_only});
  const auto one_kernels = gpt(1);
  std::map<int, double> fixed_forward;  // by rank of the cp-1 run
  for (const int cp : {2, 4}) {
    SCOPED_TRACE("cp " + std::to_string(cp));
    const auto study = gpt(cp, {flops_only});
    const Schedule& s = study->schedule;
    const auto kernels = gpt(cp);
    // Linear work, attention (zigzag-balanced) and the LM head all divide by cp, in the
    // forward up to what does not shrink with a rank's tokens (each TP collective's link
    // latencies); in the backward each rank also adds its whole weight gradient into the
    // buffer per microbatch.
    for (const RankId r : s.rank_ids()) {
      const RankId base{r.value() % 2 + r.value() / (2 * cp) * 2};
      const double whole = busy(one->schedule, base, true);
      // forward(cp) = tokens' work / cp + fixed work: the excess over whole / cp is the
      // fixed work x (1 - 1/cp), the same fixed work at every cp.
      const double fixed = (busy(s, r, true) - whole / cp) / (1 - 1.0 / cp);
      const auto first = fixed_forward.emplace(base.value(), fixed).first;
      EXPECT_NEAR(fixed, first->second, 1e-9 * whole);
      EXPECT_GE(fixed, 0);
      EXPECT_LT(fixed, 0.05 * whole);
      EXPECT_GT(busy(s, r), busy(one->schedule, base) / cp);
      // Kernel by kernel, the rank's linears are priced at its own tokens: GEMMs 1/cp as
      // tall with as many launches take more than 1/cp of the time.
      EXPECT_GT(busy(kernels->schedule, r), busy(one_kernels->schedule, base) / cp);
    }
    // Each stage's gradients all-reduce once, over every replica's every CP rank.
    for (const RankId r : s.rank_ids()) {
      int reductions = 0;
      for (const Op& op : s.programs[r]) {
        const auto* c = std::get_if<Collective>(&op);
        if (!c || c->kind != CollectiveKind::kAllReduce || c->tied_embedding) continue;
        ++reductions;
        EXPECT_EQ(isize(s.group_members(c->group)), 2 /*dp*/ * cp);
      }
      EXPECT_EQ(reductions, 1) << to_string(r);
    }
    // Activations kept per GPU divide by cp too (the same layers, 1/cp of the tokens).
    double act1 = 0, act = 0;
    for (const Op& op : one->schedule.programs[RankId{0}])
      if (const auto* c = std::get_if<Compute>(&op)) act1 += c->activation_bytes;
    for (const Op& op : s.programs[RankId{0}])
      if (const auto* c = std::get_if<Compute>(&op)) act += c->activation_bytes;
    EXPECT_NEAR(act, act1 / cp, 1e-9 * act1);
  }
}

TEST(ContextParallel, ARingStepCostsTheSlowerOfItsAttentionBlockAndItsTransfer) {
  // One microbatch, one stage: nothing waits but the ring. The layer's forward spans its
  // parts plus, per step, whatever of the transfer its block's attention does not hide.
  for (const std::string tokens : {"2048", "32768"}) {
    SCOPED_TRACE(tokens + " tokens");
    const auto study = gpt(2, {"parallel.pp=1", "parallel.dp=1", "schedule.microbatches=1",
                               "workload.tokens.text=" + tokens, "model.modules.gpt.layers=2",
                               "schedule.stage_layers=[]"});
    const Schedule& s = study->schedule;
    const Timeline t = evaluate(s, study->config.cluster);
    const auto& program = s.programs[RankId{0}];
    const double transfer =
        transfer_time(study->config.cluster, s.ranks[RankId{0}].gpu, s.ranks[RankId{1}].gpu,
                      kv_block(*study), s.ranks[RankId{0}].tp);
    // The first transformer layer's forward: parts [first, last], one step between.
    size_t first = 0;
    while (!std::holds_alternative<Compute>(program[first]) ||
           !std::get<Compute>(program[first]).continues)
      ++first;
    const double step_compute = std::get<Compute>(program[first + 2]).seconds;
    ASSERT_TRUE(std::holds_alternative<Send>(program[first + 1]));
    ASSERT_TRUE(std::holds_alternative<Recv>(program[first + 3]));
    const size_t last = first + 4;
    const double parts = std::get<Compute>(program[first]).seconds + step_compute +
                         std::get<Compute>(program[last]).seconds;
    const double span = t.timings[RankId{0}][last].end_s - t.timings[RankId{0}][first].start_s;
    EXPECT_NEAR(span, parts + std::max(0.0, transfer - step_compute), 1e-12);
    if (tokens == "32768") {
      EXPECT_GT(step_compute, transfer) << "long sequences hide the ring";
    }
  }
}

TEST(ContextParallel, FoldedReplicasGiveTheUnfoldedIteration) {
  const std::vector<std::string> overrides = {
      "parallel.cp=2", "cluster.nodes=32",         "parallel.dp=8",
      "parallel.pp=1", "schedule.stage_layers=[]", "sim.backend=evaluator"};
  const auto folded =
      prepare_study(test::source_path("validation/megatron-narayanan-2021/n1-39.1b.toml"),
                    overrides, Folding::kAllowed);
  ASSERT_TRUE(folded->fold.folded()) << folded->fold.describe();
  const auto full = prepare_study(
      test::source_path("validation/megatron-narayanan-2021/n1-39.1b.toml"), overrides);
  ASSERT_FALSE(full->fold.folded());
  EXPECT_NEAR(evaluate(folded->schedule, folded->config.cluster).iteration_time_s(),
              evaluate(full->schedule, full->config.cluster).iteration_time_s(), 1e-9);
}

TEST(ContextParallel, BadRequestsNameTheKeyAndTheFix) {
  EXPECT_NE(test::input_error([] { gpt(3); }).find("parallel.cp"), std::string::npos)
      << "2,048 tokens do not split into 6 chunks";
  EXPECT_NE(test::input_error([] {
              test::megatron_gpt({"parallel.cp_comm=\"p2p\""});
            }).find("set parallel.cp > 1"),
            std::string::npos);
  EXPECT_NE(test::input_error([] { gpt(2, {"parallel.cp_comm=\"ring\""}); }).find("cp_comm"),
            std::string::npos);
}

}  // namespace
}  // namespace loom

namespace loom {
namespace {

/// Samples an iteration trains, as metrics.json reports them (throughput x iteration).
double reported_samples(const Study& study) {
  const Timeline t = evaluate(study.schedule, study.config.cluster);
  const Metrics m = compute_metrics(study.schedule, t);
  return m.throughput_samples_per_s * m.iteration_time_s;
}

TEST(ContextParallel, ReportedSamplesAreTheGlobalBatchNotTimesCp) {
  // Issue 48: under per-module CP the report was said to count each sample once per CP
  // rank (8 microbatches of 4 as 256). The single layout's CP ranks share their replica's
  // samples, and the per-module layouts' CP pieces hold disjoint samples: both report the
  // global batch.
  const auto single = gpt(4, {"schedule.microbatches=8"});
  EXPECT_NEAR(reported_samples(*single), 8.0 * 2 /*dp*/, 1e-9);
  for (const std::string grid : {"colocated", "homogeneous"}) {
    SCOPED_TRACE(grid);
    const auto hetero = prepare_study(
        test::source_path("configs/paper/hetero-1b7b-64k-v75-" + grid + ".toml"),
        {"schedule.microbatches=8", "schedule.microbatch_size=4", "workload.tokens.text=1024",
         "workload.tokens.vision=3072", "sim.backend=evaluator"});
    EXPECT_NEAR(reported_samples(*hetero), 8.0 * 4, 1e-9);
  }
}

}  // namespace
}  // namespace loom
