// hetero-colocated and hetero-noncolocated schedules end to end with the evaluator
// (heterogeneous-parallelism-megatron §3, Table A3, App. C Table A8). The SimGrid side of
// the Table A3 comparison is in tests/sim/hetero_simgrid_test.cpp.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "core/errors.hpp"
#include "core/evaluator.hpp"
#include "core/validate.hpp"
#include "schedulers/hetero/hetero_common.hpp"
#include "schedulers/lowering/context_parallel.hpp"
#include "schedulers/lowering/module_shards.hpp"
#include "test_support.hpp"

namespace loom {
namespace {

std::unique_ptr<Study> paper(const std::string& name,
                             const std::vector<std::string>& overrides = {}) {
  return prepare_study(test::source_path("configs/paper/" + name), overrides);
}

const char* kH = "hetero-1b7b-64k-v75-homogeneous.toml";
const char* kC = "hetero-1b7b-64k-v75-colocated.toml";
const char* kNc = "hetero-llava-noncolocated.toml";

bool is_llm(const Schedule& s, ModuleId module) {
  return s.module_names[module] == "llm";
}

TEST(HeteroColocated, TableA3ColocatedIsFasterThanHomogeneous) {
  // Table A3 "1B+7B, 64K, 75% vision, 32 GPUs": C 2,973 ms vs H 4,457 ms (+49.3 %).
  const auto h = paper(kH);
  const auto c = paper(kC);
  const double th = evaluate(h->schedule, h->config.cluster).iteration_time_s();
  const double tc = evaluate(c->schedule, c->config.cluster).iteration_time_s();
  EXPECT_LT(tc, th);
  // Where the difference comes from: H's encoder inherits CP 8 and TP 4 and, as in
  // Megatron-LM's LLaVA model, every CP rank runs the whole TP shard (cp_mode =
  // "replicate"): a GPU computes 1/4 of the batch's encoder work, where C's CP-1 encoder
  // (DP 32) computes 1/32. Neither exchanges K/V for the encoder.
  auto encoder = [](const Schedule& s, int* allgathers) {
    double forward_s = 0;
    for (const Op& op : s.programs[0_rank]) {
      const auto* col = std::get_if<Collective>(&op);
      if (col && col->kind == CollectiveKind::kAllGather && s.module_names[col->module] == "vision")
        ++*allgathers;
      const auto* f = std::get_if<Compute>(&op);
      if (f && f->pass == Pass::kF && s.module_names[f->module] == "vision")
        forward_s += f->seconds;
    }
    return forward_s;
  };
  int h_allgathers = 0, c_allgathers = 0, split_allgathers = 0;
  const double h_forward = encoder(h->schedule, &h_allgathers);
  EXPECT_GE(h_forward / encoder(c->schedule, &c_allgathers), 8.0);  // + H's TP all-reduces
  EXPECT_EQ(h_allgathers, 0);
  EXPECT_EQ(c_allgathers, 0);
  // With cp_mode = "split" H's encoder would shard each sample over its CP ranks and
  // all-gather K/V around every layer instead: 1/8 of the tokens per GPU, in GEMMs 1/8 as
  // tall with as many launches, so a little more than 1/8 of the time.
  const auto split = paper(kH, {"parallel.modules.vision.cp_mode=\"split\""});
  const double split_forward = encoder(split->schedule, &split_allgathers);
  EXPECT_GE(split_forward * 8, h_forward);
  EXPECT_LE(split_forward * 8, 1.1 * h_forward);
  EXPECT_EQ(split_allgathers, 20 * 2 * 2);  // layers x (F, B) x microbatches
}

TEST(HeteroColocated, PerMicrobatchOrderRunsEachEncoderInsideItsMicrobatch) {
  // H as Megatron-LM runs one shared grid: a microbatch's encoder forward right before its
  // LLM forward and its encoder backward right after its LLM backward, so only one
  // microbatch of encoder activations is ever live.
  const auto st = paper(kH);
  const Schedule& s = st->schedule;
  EXPECT_NO_THROW(validate(s, st->config.model));
  for (int r = 0; r < s.num_ranks(); ++r) {
    std::vector<std::string> order;  // "vF0", "lF0", "lB0", "vB0", ...
    for (const Op& op : s.programs[RankId{r}]) {
      const auto* c = std::get_if<Compute>(&op);
      if (!c) continue;
      std::string step = std::string(is_llm(s, c->module) ? "l" : "v") +
                         (c->pass == Pass::kF ? "F" : "B") +
                         std::to_string(c->microbatch.value() / 32);  // 32 pieces each
      if (order.empty() || order.back() != step) order.push_back(step);
    }
    // The projector belongs to the vision group ("v"): it runs next to the encoder.
    EXPECT_EQ(order,
              (std::vector<std::string>{"vF0", "lF0", "lB0", "vB0", "vF1", "lF1", "lB1", "vB1"}))
        << "rank " << r;
  }
  // The same layout in three phases keeps both microbatches' encoder activations.
  const auto phases = paper(kH, {"schedule.hetero-colocated.order=\"phases\""});
  const Metrics a = compute_metrics(s, evaluate(s, st->config.cluster));
  const Metrics b =
      compute_metrics(phases->schedule, evaluate(phases->schedule, phases->config.cluster));
  EXPECT_LT(a.per_rank[0_rank].peak_memory_bytes, b.per_rank[0_rank].peak_memory_bytes);
}

TEST(HeteroColocated, PerMicrobatchOrderNeedsOneLlmStageAndTheLlmsBatchShards) {
  auto message = [](const std::vector<std::string>& overrides) {
    try {
      prepare_study(test::source_path("configs/examples/vlm-frozen.toml"),
                    overrides);  // LLM with PP 4
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(message({"schedule.name=hetero-colocated",
                     "schedule.hetero-colocated.order=\"per-microbatch\""})
                .find("parallel.modules.llm.pp"),
            std::string::npos);
  // C's layout: the encoder's DP 32 is not the LLM's DP 2.
  try {
    paper(kC, {"schedule.hetero-colocated.order=\"per-microbatch\""});
    ADD_FAILURE() << "an encoder with its own DP was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("parallel.modules.vision.dp"), std::string::npos)
        << e.what();
  }
}

TEST(HeteroColocated, TimelineShowsTheThreePhasesOnEveryRank) {
  std::vector<std::unique_ptr<Study>> studies;
  studies.push_back(paper(kH, {"schedule.hetero-colocated.order=\"phases\""}));
  studies.push_back(paper(kC));
  studies.push_back(prepare_study(test::source_path("configs/examples/vlm-frozen.toml"),
                                  {"schedule.name=hetero-colocated"}));  // LLM with PP 4
  for (const auto& st : studies) {
    const std::string name = st->config.path;
    const Schedule& s = st->schedule;
    const Timeline t = evaluate(s, st->config.cluster);
    for (int r = 0; r < s.num_ranks(); ++r) {
      double enc_f_end = 0, llm_start = 1e30, llm_end = 0, enc_b_start = 1e30;
      int llm_ops = 0;
      const auto& program = s.programs[RankId{r}];
      for (size_t i = 0; i < program.size(); ++i) {
        const auto* c = std::get_if<Compute>(&program[i]);
        if (!c) continue;
        const OpTiming& ti = t.timings[RankId{r}][i];
        if (is_llm(s, c->module)) {
          llm_start = std::min(llm_start, ti.start_s);
          llm_end = std::max(llm_end, ti.end_s);
          ++llm_ops;
        } else if (c->pass == Pass::kF) {
          enc_f_end = std::max(enc_f_end, ti.end_s);
        } else {
          enc_b_start = std::min(enc_b_start, ti.start_s);
        }
      }
      ASSERT_GT(llm_ops, 0) << name << " rank " << r;
      EXPECT_LE(enc_f_end, llm_start) << name << " rank " << r << ": phase 1 before phase 2";
      EXPECT_LE(llm_end, enc_b_start) << name << " rank " << r << ": phase 2 before phase 3";
    }
  }
}

TEST(HeteroColocated, EverySampleExactlyOnceAndNoDeadlock) {
  const auto st = paper(kC);
  const Schedule& s = st->schedule;
  EXPECT_NO_THROW(validate(s, st->config.model));
  EXPECT_NO_THROW(check_acyclic(s));
  std::multiset<SampleId> seen;
  for (const auto& replica : s.samples)
    for (const auto& mb : replica) seen.insert(mb.begin(), mb.end());
  EXPECT_EQ(seen, (std::multiset<SampleId>{SampleId{0}, SampleId{1}, SampleId{2},
                                           SampleId{3}}));  // GBS 4
  // LLM DP 2 x (TP 2 x CP 8 = 16 shards) x 2 microbatches: each GPU runs its own shard
  // of both microbatches through every LLM layer once forward and once backward.
  EXPECT_EQ(s.samples.size(), 2u);
  EXPECT_EQ(s.microbatches, 2 * 16);
  for (int r = 0; r < s.num_ranks(); ++r) {
    std::map<std::pair<int, MicrobatchId>, int> count;  // (pass, microbatch) -> LLM layers
    for (const Op& op : s.programs[RankId{r}]) {
      const auto* c = std::get_if<Compute>(&op);
      if (c && is_llm(s, c->module))
        count[{static_cast<int>(c->pass), c->microbatch}] += c->end_layer - c->first_layer;
    }
    EXPECT_EQ(count.size(), 4u);
    for (const auto& [key, layers] : count) EXPECT_EQ(layers, 32);
  }
  EXPECT_NO_THROW(evaluate(s, st->config.cluster));
}

TEST(HeteroColocated, BoundaryAndContextParallelVolumes) {
  const auto st = paper(kC);
  const Schedule& s = st->schedule;
  // Boundary: fan-in 32 -> 2, one all-gather of the B/2 shard per LLM replica on its 16
  // GPUs: 2 samples x 49,152 vision tokens x 4,096 x 2 bytes.
  const double shard = 2.0 * 49152 * 4096 * 2;
  // CP: per LLM layer and pass, the K/V of the replica's microbatch (one 65,536-token
  // sample) with 32 / TP 2 = 16 heads of 128: 65,536 x 2 x 16 x 128 x 2 bytes.
  const double kv = 65536.0 * 2 * 16 * 128 * 2;
  int boundary = 0, cp = 0;
  for (const Op& op : s.programs[5_rank]) {
    const auto* col = std::get_if<Collective>(&op);
    if (!col || col->kind != CollectiveKind::kAllGather) continue;
    const auto& members = s.group_members(col->group);
    if (members.size() == 16) {
      ++boundary;
      EXPECT_DOUBLE_EQ(col->bytes, shard);
      EXPECT_EQ(members.front(), 0_rank);
    } else {
      ++cp;
      EXPECT_EQ(members, (std::vector<RankId>{1_rank, 3_rank, 5_rank, 7_rank, 9_rank, 11_rank,
                                              13_rank, 15_rank}));  // TP rank 1, replica 0
      EXPECT_DOUBLE_EQ(col->bytes, kv);
    }
  }
  EXPECT_EQ(boundary, 1);     // phase 1 only: fan-in backward is a local selection
  EXPECT_EQ(cp, 32 * 2 * 2);  // layers x (F, B) x microbatches
}

TEST(HeteroColocated, ContextParallelSplitsTheAttentionAndPricesLinearsAtTheRanksTokens) {
  const auto st = paper(kC);
  const SchedulingProblem& p = st->problem;
  const ModuleId llm = st->config.model.module_index("llm").value();
  ModuleLayout whole = p.parallel.module_layouts[llm];
  whole.cp = 1;
  const std::vector<SampleId> mb = {SampleId{0}, SampleId{1}};
  const ShardCost full = shard_cost(p, llm, whole, mb, 0, 0);
  const ModuleLayout& cp8 = p.parallel.module_layouts[llm];
  double sum = 0;
  std::vector<double> per_rank;
  for (int c = 0; c < cp8.cp; ++c) {
    const ShardCost sc = shard_cost(p, llm, cp8, mb, 0, c);
    per_rank.push_back(sc.layer[0].forward_s);
    sum += sc.layer[0].forward_s;
  }
  // The attention splits exactly (zigzag shares sum to 1); each rank's linears run its own
  // 1/cp of the tokens, priced at that shape (launches and waves of smaller GEMMs
  // included), so the ranks together take at least the whole's time.
  const int layer = module_layers(*p.model, llm)[0];
  ASSERT_EQ(mb.size() % static_cast<size_t>(cp8.dp), 0u);  // replica 0 runs whole samples
  const MicrobatchShape shape =
      layer_shape(*p.model, layer, sample_batch(p.samples, replica_samples(mb, 0, cp8.dp)));
  const AttentionSplit split = split_attention(*p.cost, *p.model, layer, shape, cp8.tp);
  const PassCost linear = rank_linear_cost(*p.cost, *p.model, layer, shape, cp8.tp, cp8.cp, split);
  EXPECT_NEAR(sum, cp8.cp * linear.forward_s + split.attention.forward_s, 1e-9 * sum);
  EXPECT_GE(sum, full.layer[0].forward_s * (1 - 1e-9));
  for (double t : per_rank) EXPECT_NEAR(t, sum / cp8.cp, 1e-6 * sum);  // zigzag: balanced
  EXPECT_EQ(full.kv_allgather_bytes, 0.0);                             // no all-gather without CP
}

TEST(HeteroColocated, SameInputsGiveTheSameSchedule) {
  const auto a = paper(kC);
  const auto b = paper(kC);
  ASSERT_EQ(a->schedule.num_ranks(), b->schedule.num_ranks());
  for (int r = 0; r < a->schedule.num_ranks(); ++r) {
    const auto& pa = a->schedule.programs[RankId{r}];
    const auto& pb = b->schedule.programs[RankId{r}];
    ASSERT_EQ(pa.size(), pb.size());
    for (size_t i = 0; i < pa.size(); ++i)
      EXPECT_EQ(to_string(pa[i], a->schedule), to_string(pb[i], b->schedule));
  }
}

TEST(HeteroNonColocated, FanInSendsOneLeaderMessagePerShardPair) {
  // Table A8 "tp2_pp2_llm_tp2_dp2_vis": vision TP 2 / DP 2 (GPUs 4-7) -> LLM TP 2 / PP 2.
  const auto st = paper(kNc);
  const Schedule& s = st->schedule;
  EXPECT_NO_THROW(validate(s, st->config.model));
  const int m = st->config.schedule.microbatches;
  // Ranks: vision replicas on GPUs 4 and 6 (their TP leaders), LLM stages on 0 and 2.
  ASSERT_EQ(s.num_ranks(), 4);
  EXPECT_EQ(s.ranks[0_rank].gpu, 4);
  EXPECT_EQ(s.ranks[1_rank].gpu, 6);
  EXPECT_EQ(s.ranks[2_rank].gpu, 0);
  // Per microbatch each vision leader sends its shard (1 sample x 576 tokens x 4,096 x 2
  // bytes after the projector) to the LLM's stage-0 leader: 2 messages, the batch once.
  for (int r : {0, 1}) {
    int sends = 0;
    for (const Op& op : s.programs[RankId{r}]) {
      const auto* send = std::get_if<Send>(&op);
      if (!send || send->tag.pass != Pass::kF) continue;
      ++sends;
      EXPECT_EQ(send->peer, 2_rank);
      EXPECT_DOUBLE_EQ(send->bytes, 576.0 * 4096 * 2);
    }
    EXPECT_EQ(sends, m);
  }
  // The frozen encoder gets no gradients back (nothing trainable upstream of it), but
  // the projector in its group does: one gradient message per shard pair per microbatch.
  int grads = 0;
  for (const Op& op : s.programs[2_rank]) {
    const auto* send = std::get_if<Send>(&op);
    if (send && send->tag.pass == Pass::kB && send->peer < 2_rank) ++grads;
  }
  EXPECT_EQ(grads, 2 * m);
}

TEST(HeteroNonColocated, GraphAware1F1BWarmsUpEachStageByItsDistanceToTheSink) {
  const auto st = paper(kNc);
  const Schedule& s = st->schedule;
  // Distances: vision 2 (two LLM stages below it), LLM stage 0: 1, stage 1: 0; warmup
  // plus the first steady forward lead. The LLM (DP 1) runs each microbatch as K = 2
  // pieces, one per vision shard, so its counts double.
  const int expected_leading_forwards[] = {3, 3, 2 * 2, 1 * 2};
  for (int r = 0; r < 4; ++r) {
    int forwards = 0;
    for (const Op& op : s.programs[RankId{r}]) {
      const auto* c = std::get_if<Compute>(&op);
      if (!c) continue;
      if (c->pass != Pass::kF) break;
      if (is_llm(s, c->module) || s.module_names[c->module] == "vision") ++forwards;
    }
    EXPECT_EQ(forwards, expected_leading_forwards[r]) << "rank " << r;
  }
  EXPECT_NO_THROW(evaluate(s, st->config.cluster));
}

TEST(HeteroSchedulers, SingleLayoutConfigsRunWithTheDefaultRemap) {
  // Colocated: the encoder takes every GPU as a DP replica, the LLM keeps its grid.
  const auto co =
      prepare_study(test::source_path("configs/examples/vlm-frozen.toml"),
                    {"schedule.name=hetero-colocated", "parallel.pp=1", "parallel.dp=4"});
  EXPECT_EQ(co->schedule.num_ranks(), 4);
  EXPECT_NO_THROW(evaluate(co->schedule, co->config.cluster));
  // Non-colocated on a Cornstarch config: one stage per encoder, the LLM on the rest.
  const auto nc = prepare_study(test::source_path("configs/paper/cornstarch-sss.toml"),
                                {"schedule.name=hetero-noncolocated"});
  EXPECT_EQ(nc->schedule.num_stages, 6);
  EXPECT_NO_THROW(evaluate(nc->schedule, nc->config.cluster));
}

TEST(HeteroColocated, PipelinedLlmGathersEncoderPiecesOnStageZero) {
  // vlm-frozen's single layout (PP 4) remapped: the LLM keeps 4 stages, the encoder runs
  // as 4 DP replicas on the same GPUs (core/layout.hpp's colocated default).
  const auto st = prepare_study(test::source_path("configs/examples/vlm-frozen.toml"),
                                {"schedule.name=hetero-colocated"});
  const Schedule& s = st->schedule;
  ASSERT_EQ(s.num_ranks(), 4);
  EXPECT_EQ(s.num_stages, 1 + 4);    // the encoder group's stage, then the LLM's four
  EXPECT_EQ(s.microbatches, 8 * 4);  // Q = P x K = 4 pieces per microbatch
  EXPECT_NO_THROW(validate(s, st->config.model));
  // Stage 0 receives the 3 pieces the other GPUs' encoders computed for each microbatch,
  // all of them before that microbatch's LLM forward (the stage moves a microbatch's
  // pieces as one unit); the others send theirs there as they compute them.
  int received = 0, pending = 0;
  for (const Op& op : s.programs[0_rank]) {
    if (const auto* rv = std::get_if<Recv>(&op)) {
      if (rv->tag.pass == Pass::kF) {
        ++received;
        ++pending;
      }
    }
    const auto* c = std::get_if<Compute>(&op);
    if (c && c->pass == Pass::kF && is_llm(s, c->module) && c->microbatch.value() % 4 == 0) {
      EXPECT_EQ(pending, 3) << "before " << to_string(op, s);
      pending = 0;
    }
  }
  EXPECT_EQ(received, 3 * 8);
  for (int r = 1; r < 4; ++r) {
    int sent = 0;
    for (const Op& op : s.programs[RankId{r}]) {
      const auto* send = std::get_if<Send>(&op);
      if (send && send->peer == 0_rank && send->tag.pass == Pass::kF && !is_llm(s, send->module))
        ++sent;
    }
    EXPECT_EQ(sent, 8) << "rank " << r;
  }
  EXPECT_NO_THROW(evaluate(s, st->config.cluster));
}

TEST(HeteroNonColocated, Figure14TopologyDispatchesEveryEdgeByItsKind) {
  // Fig 4a / Fig 14: encoder 1 in two stages (GPUs 0-1), encoder 2 in one (GPU 2), the
  // LLM in three (GPUs 3-5).
  const auto st = test::fixture(
      "two-encoders.toml", {"schedule.name=hetero-noncolocated", "cluster.gpus_per_node=8",
                            "schedule.microbatches=8", "parallel.modules.vision.pp=2",
                            "parallel.modules.vision.gpus=0-1", "parallel.modules.audio.gpus=2",
                            "parallel.modules.llm.pp=3", "parallel.modules.llm.gpus=3-5"});
  const Schedule& s = st->schedule;
  ASSERT_EQ(s.num_ranks(), 6);
  // Warmup = stage nodes to the sink: E1P0 4, E1P1 3, E2P0 3, L0 2, L1 1, L2 0; the first
  // steady-state forward follows it.
  const size_t leading[] = {5, 4, 4, 3, 2, 1};
  for (int r = 0; r < 6; ++r) {
    std::set<MicrobatchId> forwards;  // microbatches run forward before the first backward
    for (const Op& op : s.programs[RankId{r}]) {
      const auto* c = std::get_if<Compute>(&op);
      if (!c) continue;
      if (c->pass != Pass::kF) break;
      forwards.insert(c->microbatch);
    }
    EXPECT_EQ(forwards.size(), leading[r]) << "rank " << r;
  }
  // LLM stage 0 (rank 3) joins: before F of microbatch 0 it receives both encoders'
  // boundary tensors, from E1's last stage (rank 1) and E2 (rank 2).
  std::set<int> peers;
  for (const Op& op : s.programs[3_rank]) {
    if (std::holds_alternative<Compute>(op)) break;
    if (const auto* rv = std::get_if<Recv>(&op)) peers.insert(rv->peer.value());
  }
  EXPECT_EQ(peers, (std::set<int>{1, 2}));
  EXPECT_NO_THROW(validate(s, st->config.model));
  EXPECT_NO_THROW(evaluate(s, st->config.cluster));
}

TEST(HeteroNonColocated, FanOutSplitsEachMicrobatchIntoPieces) {
  // Vision TP 4 / DP 1 -> LLM DP 4: the vision rank runs each microbatch as 4 pieces,
  // one per LLM replica, and sends each piece to its replica.
  const auto st = paper(kNc, {"parallel.modules.vision.tp=4", "parallel.modules.vision.dp=1",
                              "parallel.modules.llm.tp=1", "parallel.modules.llm.pp=1",
                              "parallel.modules.llm.dp=4", "schedule.microbatch_size=4"});
  const Schedule& s = st->schedule;
  ASSERT_EQ(s.num_ranks(), 5);
  std::map<int, int> sends_to;
  for (const Op& op : s.programs[0_rank]) {
    if (const auto* send = std::get_if<Send>(&op)) sends_to[send->peer.value()]++;
  }
  const int m = st->config.schedule.microbatches;
  EXPECT_EQ(sends_to, (std::map<int, int>{{1, m}, {2, m}, {3, m}, {4, m}}));
  EXPECT_NO_THROW(evaluate(s, st->config.cluster));
}

TEST(HeteroColocated, PipelinedLlmPipelinesWholeMicrobatches) {
  // An LLM alone with PP 4, 8 microbatches, F 1 ms + B 2 ms per stage (table costs):
  // 1F1B's (m + P - 1)(F + B) = 33 ms. Each stage GPU computes the microbatch as P pieces;
  // they must travel on together, or the pipeline fills P times faster (26.25 ms).
  const auto one = test::example("uniform-1f1b.toml");
  const auto colocated = test::example("uniform-1f1b.toml", {"schedule.name=hetero-colocated"});
  const double t1 = evaluate(one->schedule, one->config.cluster).iteration_time_s();
  const double tc = evaluate(colocated->schedule, colocated->config.cluster).iteration_time_s();
  EXPECT_NEAR(t1, 0.033, 1e-9);
  EXPECT_NEAR(tc, t1, 1e-9);
}

TEST(HeteroCosts, EncoderItemTokensComeFromTheConfig) {
  // The Table A3 configs set the encoder's item_tokens = 1024 (the former built-in value);
  // the projector (token_ratio 1) follows it; the LLM sees whole samples.
  const auto c = paper(kC);
  const Model& model = c->config.model;
  const ModuleId vision = model.module_index("vision").value();
  EXPECT_EQ(model.module(vision).item_tokens, 1024);
  EXPECT_EQ(item_tokens(model, vision), 1024);
  EXPECT_EQ(item_tokens(model, model.module_index("projector").value()), 1024);
  EXPECT_EQ(item_tokens(model, model.module_index("llm").value()), 0);

  // A projector behind a 2x2-merging encoder (token_ratio 0.25) sees items 4x smaller.
  const auto sss = paper("cornstarch-sss.toml", {"model.modules.vision.item_tokens=1024"});
  EXPECT_EQ(item_tokens(sss->config.model, sss->config.model.module_index("vproj").value()), 256);
  EXPECT_EQ(item_tokens(sss->config.model, sss->config.model.module_index("aproj").value()), 0);
}

TEST(HeteroCosts, ItemTokensChangeOnlyTheEncoderAttention) {
  // One sample of 49,152 vision tokens on one GPU (TP/CP/DP 1): the analytical forward is
  // linear in tokens plus attention in sum of squared item lengths, so with items of 1024
  // (48 items), 2048 (24) and the whole sample (0 = one item):
  //   (F(0) - F(1024)) / (F(2048) - F(1024)) = (48^2 - 48) / (24 * 4 - 48) = 47.
  auto forward = [](const std::string& items) {
    const auto st = paper(kC, {"model.modules.vision.item_tokens=" + items});
    const ModuleId vision = st->config.model.module_index("vision").value();
    ModuleLayout one = st->problem.parallel.module_layouts[vision];
    one.dp = 1;
    return shard_cost(st->problem, vision, one, {SampleId{0}}, 0, 0).layer[0].forward_s;
  };
  const double f1024 = forward("1024"), f2048 = forward("2048"), whole = forward("0");
  EXPECT_LT(f1024, f2048);
  EXPECT_LT(f2048, whole);
  EXPECT_NEAR((whole - f1024) / (f2048 - f1024), 47.0, 1e-6);
  EXPECT_DOUBLE_EQ(forward("49152"), whole);  // an item as large as the sample = 0
  EXPECT_DOUBLE_EQ(forward("1000000"), whole);
}

TEST(HeteroCosts, ItemTokensKeyIsValidated) {
  auto expect_error = [](const std::vector<std::string>& sets, const std::string& needle) {
    try {
      paper(kC, sets);
      ADD_FAILURE() << "expected InputError containing " << needle;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_error({"model.modules.vision.item_tokens=-1"}, "model.modules.vision.item_tokens");
  expect_error({"model.modules.vision.item_tokens=\"big\""}, "expected an integer");
  expect_error({"model.modules.projector.item_tokens=64"},
               "'model.modules.projector.item_tokens': only encoder modules");
  expect_error({"model.modules.llm.item_tokens=64"}, "model.modules.llm.item_tokens");
}

TEST(HeteroSchedulers, ATiedEmbeddingReducesEachShardWithItsLmHead) {
  // Megatron's embedding group per pipeline: under per-module layouts, each copy of the
  // LLM's first stage with the same copy of its last (vision DP 2 -> LLM DP 2, PP 2).
  const auto st = paper(kNc, {"model.modules.llm.vocab=32000", "parallel.modules.llm.tp=1",
                              "parallel.modules.llm.dp=2", "schedule.microbatch_size=2"});
  const Schedule& s = st->schedule;
  std::set<std::vector<RankId>> pairs;
  for (const auto& program : s.programs) {
    for (const Op& op : program) {
      const auto* c = std::get_if<Collective>(&op);
      if (c && c->tied_embedding) pairs.insert(s.group_members(c->group));
    }
  }
  // Ranks: vision copies 0, 1; LLM stage 0 copies 2, 4 and stage 1 copies 3, 5.
  EXPECT_EQ(pairs, (std::set<std::vector<RankId>>{{2_rank, 3_rank}, {4_rank, 5_rank}}));
  EXPECT_NO_THROW(validate(s, st->config.model));
  EXPECT_NO_THROW(evaluate(s, st->config.cluster));
}

TEST(HeteroSchedulers, LayoutErrorsNameTheModule) {
  auto expect_error = [](const std::string& config, const std::vector<std::string>& sets,
                         const std::string& needle) {
    try {
      paper(config, sets);
      ADD_FAILURE() << "expected InputError containing " << needle;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_error(kNc, {"schedule.name=hetero-colocated"}, "parallel.modules.");
  expect_error(kC, {"schedule.name=hetero-noncolocated"}, "parallel.modules.llm.cp");
  expect_error(kC, {"parallel.modules.vision.pp=2", "parallel.modules.vision.dp=16"},
               "parallel.modules.vision.pp");
  // Another nested colocated grid is fine.
  EXPECT_NO_THROW(paper(kC, {"parallel.modules.vision.dp=16", "parallel.modules.vision.tp=2",
                             "parallel.modules.llm.dp=1", "parallel.modules.llm.cp=16",
                             "schedule.microbatch_size=2"}));
}

}  // namespace
}  // namespace loom
