// Pass 5b of the lowering (add_parameter_gathers, parallel.fsdp): FSDP2's per-layer
// parameter all-gathers, prefetched one layer ahead, and its gradient reduce-scatters, on
// MLLM-SSS as the Cornstarch paper's FSDP baseline runs it (24 GPUs, mini-batch 2) and on
// Narayanan et al.'s GPT with a pipeline and several microbatches.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <variant>

#include "core/dataflow.hpp"
#include "core/errors.hpp"
#include "core/evaluator.hpp"
#include "core/memory_model.hpp"
#include "schedulers/scheduler.hpp"
#include "test_support.hpp"

namespace loom {
namespace {

const std::vector<std::string> kCornstarchFsdp = {"parallel.fsdp=true",
                                                  "parallel.tp=1",
                                                  "parallel.pp=1",
                                                  "parallel.dp=24",
                                                  "schedule.name=gpipe",
                                                  "schedule.microbatches=1",
                                                  "schedule.microbatch_size=2"};

std::unique_ptr<Study> cornstarch_fsdp(std::vector<std::string> extra = {}) {
  std::vector<std::string> overrides = kCornstarchFsdp;
  overrides.insert(overrides.end(), extra.begin(), extra.end());
  return prepare_study(test::source_path("configs/paper/cornstarch-sss.toml"), overrides);
}

/// Parameter bytes of a compute's layers per GPU, unsharded.
double layer_bytes(const Study& study, const Compute& c, double bytes_per_param) {
  double bytes = 0;
  for (int l = c.first_layer; l < c.end_layer; ++l)
    bytes += study.cost->parameters(l) / study.schedule.ranks[RankId{0}].tp * bytes_per_param;
  return bytes;
}

/// Whether a compute reads its layer's weights: a forward, or the input-gradient part of a
/// backward of a layer that needs one (a frozen layer with nothing trainable upstream
/// runs none).
bool reads_weights(const Study& study, const Compute& c) {
  if (c.pass == Pass::kW || layer_bytes(study, c, 1) == 0) return false;
  return c.pass == Pass::kF || LayerGraph(study.config.model).needs_backward(c.first_layer);
}

/// Checks every rank's program: each compute that reads weights waits for exactly the
/// all-gather of its own layer, issued before it, and every other compute waits for none;
/// each backward of a trainable layer is followed by its reduce-scatter; no layer gradient
/// is all-reduced.
void expect_fsdp_programs(const Study& study) {
  const Schedule& s = study.schedule;
  for (const RankId r : s.rank_ids()) {
    SCOPED_TRACE("rank " + to_string(r));
    const auto& program = s.programs[r];
    std::vector<std::size_t> issued;  // indices of the rank's async collectives, in order
    for (std::size_t i = 0; i < program.size(); ++i) {
      if (const auto* coll = std::get_if<Collective>(&program[i])) {
        // A tied embedding's copies still all-reduce (the embedding is no layer).
        if (coll->tied_embedding) continue;
        EXPECT_NE(coll->kind, CollectiveKind::kAllReduce) << to_string(program[i], s);
        ASSERT_TRUE(coll->async) << to_string(program[i], s);
        if (coll->kind == CollectiveKind::kReduceScatter) {
          const auto* backward = std::get_if<Compute>(&program[i - 1]);
          ASSERT_NE(backward, nullptr) << "right after its backward";
          EXPECT_TRUE(backward->pass == Pass::kB || backward->pass == Pass::kW);
          EXPECT_EQ(backward->first_layer, coll->first_layer);
          EXPECT_DOUBLE_EQ(coll->bytes, layer_bytes(study, *backward,
                                                    study.problem.memory.gradient_bytes_per_param));
        }
        issued.push_back(i);
        continue;
      }
      const auto* c = std::get_if<Compute>(&program[i]);
      if (!c) continue;
      if (!c->redundant) {
        EXPECT_EQ(c->end_layer, c->first_layer + 1) << "one compute per layer";
      }
      // Each backward of a trained layer reduce-scatters its gradients (FSDP2's default).
      const bool trained = !study.config.model.layer(c->first_layer).frozen;
      if (!c->redundant && trained && (c->pass == Pass::kB || c->pass == Pass::kW)) {
        const auto* next =
            i + 1 < program.size() ? std::get_if<Collective>(&program[i + 1]) : nullptr;
        EXPECT_TRUE(next && next->kind == CollectiveKind::kReduceScatter)
            << to_string(program[i], s);
      }
      if (!reads_weights(study, *c)) {
        EXPECT_EQ(c->async_pending, -1) << to_string(program[i], s);
        continue;
      }
      ASSERT_GE(c->async_pending, 0) << to_string(program[i], s);
      ASSERT_GT(issued.size(), static_cast<std::size_t>(c->async_pending));
      const auto& own = std::get<Collective>(program[issued[issued.size() - 1 - c->async_pending]]);
      EXPECT_EQ(own.kind, CollectiveKind::kAllGather) << to_string(program[i], s);
      EXPECT_EQ(own.first_layer, c->first_layer) << "its own layers' gather";
      EXPECT_EQ(own.end_layer, c->end_layer) << "its own layers' gather";
      EXPECT_DOUBLE_EQ(own.bytes, layer_bytes(study, *c, 2)) << "bf16 weights";
      // Prefetch: the next gather was issued before this compute, unless none follows.
      if (c->async_pending == 0) {
        bool later_use = false;
        for (std::size_t k = i + 1; k < program.size(); ++k) {
          const auto* next = std::get_if<Compute>(&program[k]);
          later_use = later_use || (next && reads_weights(study, *next));
        }
        EXPECT_FALSE(later_use) << "only the rank's last gathered compute has no prefetch";
      }
    }
  }
}

TEST(Fsdp, EveryComputeWaitsForItsOwnGatherAndEveryTrainedBackwardIsReduced) {
  const auto study = cornstarch_fsdp();
  expect_fsdp_programs(*study);
  // The projectors are trained, the encoders and LLM frozen (configs/paper/cornstarch-*).
  std::set<std::string> reduced;
  for (const Op& op : study->schedule.programs[RankId{0}]) {
    const auto* c = std::get_if<Collective>(&op);
    if (c && c->kind == CollectiveKind::kReduceScatter)
      reduced.insert(study->schedule.module_names[c->module]);
  }
  EXPECT_EQ(reduced, (std::set<std::string>{"aproj", "vproj"}));
}

/// Under fsdp_reshard_after_forward = false: per rank, one all-gather per unit of layers
/// (a stage's segment), before the unit's first compute, which waits for it, and one
/// reduce-scatter per trained unit, right after its last backward; no other waits.
void expect_per_step_programs(const Study& study) {
  const Schedule& s = study.schedule;
  using Unit = std::tuple<StageId, int, int>;
  for (const RankId r : s.rank_ids()) {
    SCOPED_TRACE("rank " + to_string(r));
    const auto& program = s.programs[r];
    std::map<Unit, int> gathers, reduces, computes;
    std::map<Unit, std::size_t> last_backward;
    std::vector<std::size_t> issued;
    for (std::size_t i = 0; i < program.size(); ++i) {
      if (const auto* c = std::get_if<Collective>(&program[i]); c && c->async) {
        issued.push_back(i);
        continue;
      }
      const auto* c = std::get_if<Compute>(&program[i]);
      if (!c) continue;
      const Unit unit{c->stage, c->first_layer, c->end_layer};
      if (computes[unit]++ == 0) {
        // The unit's first compute waits for the gather just before (or before the
        // prefetched one): its own.
        ASSERT_GE(c->async_pending, 0);
        const std::size_t at = issued[issued.size() - 1 - c->async_pending];
        const auto& g = std::get<Collective>(program[at]);
        EXPECT_EQ(g.kind, CollectiveKind::kAllGather);
        EXPECT_EQ(std::tuple(g.first_layer, g.end_layer), std::tuple(c->first_layer, c->end_layer));
        EXPECT_DOUBLE_EQ(g.bytes, layer_bytes(study, *c, 2));
        ++gathers[unit];
      } else {
        EXPECT_EQ(c->async_pending, -1);
      }
      bool trained = false;
      for (int l = c->first_layer; l < c->end_layer; ++l)
        trained = trained || !study.config.model.layer(l).frozen;
      if ((c->pass == Pass::kB || c->pass == Pass::kW) && trained && !c->redundant)
        last_backward[unit] = i;
    }
    for (const auto& [unit, i] : last_backward) {
      const auto* rs = std::get_if<Collective>(&program.at(i + 1));
      ASSERT_TRUE(rs && rs->kind == CollectiveKind::kReduceScatter);
      ++reduces[unit];
    }
    for (const auto& [unit, n] : gathers) EXPECT_EQ(n, 1);
    std::size_t reduce_scatters = 0;
    for (const Op& op : program) {
      const auto* c = std::get_if<Collective>(&op);
      reduce_scatters += c && c->kind == CollectiveKind::kReduceScatter;
    }
    EXPECT_EQ(reduce_scatters, reduces.size());  // once per trained unit, not per microbatch
  }
}

TEST(Fsdp, APipelineGathersAndReducesEveryMicrobatchWhenReshardingAfterForward) {
  const auto study =
      test::megatron_gpt({"parallel.fsdp=true", "parallel.fsdp_reshard_after_forward=true"});
  expect_fsdp_programs(*study);
}

TEST(Fsdp, UnderAPipelineAStageGathersOncePerStepAsTorchtitanRunsIt) {
  // torchtitan's default with pp > 1: reshard_after_forward = false.
  const auto per_step = test::megatron_gpt({"parallel.fsdp=true"});
  EXPECT_FALSE(per_step->config.parallel.fsdp_reshard_after_forward);
  expect_per_step_programs(*per_step);
  const auto per_microbatch =
      test::megatron_gpt({"parallel.fsdp=true", "parallel.fsdp_reshard_after_forward=true"});
  auto count = [](const Schedule& s, CollectiveKind kind) {
    int n = 0;
    for (const Op& op : s.programs[RankId{0}]) {
      const auto* c = std::get_if<Collective>(&op);
      n += c && c->kind == kind;
    }
    return n;
  };
  const int m = per_step->config.schedule.microbatches;
  ASSERT_GT(m, 1);
  // Every layer is an FSDP unit (torchtitan wraps each transformer block): rank 0's stage
  // of 24 layers gathers and reduce-scatters each once per step, against one gather per
  // forward and per backward and one reduce-scatter per backward of every microbatch.
  const int layers = per_step->config.model.num_layers() / per_step->config.parallel.pp;
  ASSERT_EQ(layers, 24);
  EXPECT_EQ(count(per_step->schedule, CollectiveKind::kAllGather), layers);
  EXPECT_EQ(count(per_step->schedule, CollectiveKind::kReduceScatter), layers);
  EXPECT_EQ(count(per_microbatch->schedule, CollectiveKind::kAllGather), 2 * m * layers);
  EXPECT_EQ(count(per_microbatch->schedule, CollectiveKind::kReduceScatter), m * layers);
  // No slower, and it holds the stage unsharded: no less memory.
  const double t_step = evaluate(per_step->schedule, per_step->config.cluster).iteration_time_s();
  const double t_mb =
      evaluate(per_microbatch->schedule, per_microbatch->config.cluster).iteration_time_s();
  EXPECT_LE(t_step, t_mb);
  for (const RankId r : per_step->schedule.rank_ids()) {
    EXPECT_GE(per_step->schedule.static_memory[r].total(),
              per_microbatch->schedule.static_memory[r].total());
  }
}

TEST(Fsdp, EverySchedulerRunsItOrRefusesNamingTheKey) {
  // Schedulers that keep two copies of a stage in a replica, or fuse a forward and a
  // backward into one action, are refused; every other one gets FSDP's programs and runs
  // to the end on the evaluator (no deadlock from the waits).
  const std::set<std::string> refused = {"chimera", "dualpipe-v", "hetero-colocated",
                                         "hetero-noncolocated"};
  for (const SchedulerInfo& info : scheduler_registry()) {
    SCOPED_TRACE(info.name);
    std::vector<std::string> overrides = {"parallel.fsdp=true", "parallel.dp=2", "cluster.nodes=2",
                                          std::string("schedule.name=") + info.name};
    if (refused.contains(info.name)) {
      try {
        test::example("vlm-frozen.toml", overrides);
        ADD_FAILURE() << "expected a refusal";
      } catch (const InputError& e) {
        EXPECT_NE(std::string(e.what()).find("parallel.fsdp"), std::string::npos) << e.what();
      }
      continue;
    }
    // Both ways: gathered once per step (the default under pp 4) and per microbatch.
    const auto per_step = test::example("vlm-frozen.toml", overrides);
    expect_per_step_programs(*per_step);
    EXPECT_GT(evaluate(per_step->schedule, per_step->config.cluster).iteration_time_s(), 0);
    overrides.push_back("parallel.fsdp_reshard_after_forward=true");
    const auto study = test::example("vlm-frozen.toml", overrides);
    expect_fsdp_programs(*study);
    EXPECT_GT(evaluate(study->schedule, study->config.cluster).iteration_time_s(), 0);
  }
}

TEST(Fsdp, StateIsShardedOverEveryReplicaPlusTheUnshardedWindow) {
  const auto fsdp = cornstarch_fsdp();
  std::vector<std::string> plain = kCornstarchFsdp;
  plain.front() = "parallel.fsdp=false";
  const auto whole = prepare_study(test::source_path("configs/paper/cornstarch-sss.toml"), plain);
  const int n = fsdp->problem.data_parallel();
  ASSERT_EQ(n, 24);
  const StaticMemory& sharded = fsdp->schedule.static_memory[RankId{0}];
  const StaticMemory& full = whole->schedule.static_memory[RankId{0}];
  // ZeRO-3, Rajbhandari et al. SC'20 §5.3: optimizer state 1/N of the whole.
  EXPECT_NEAR(sharded.optimizer, full.optimizer / n, 1e-9 * full.optimizer);
  // Parameters 1/N plus two unsharded copies of the largest layer (one computing, one
  // prefetched); gradients 1/N plus the largest trainable layer's whole.
  double largest = 0, gradient = 0;
  for (int l = 0; l < fsdp->config.model.num_layers(); ++l) {
    largest = std::max(largest, fsdp->cost->parameters(l) * 2);
    if (!fsdp->config.model.layer(l).frozen)
      gradient = std::max(gradient, fsdp->cost->parameters(l) * 4);
  }
  EXPECT_NEAR(sharded.parameters, full.parameters / n + 2 * largest, 1e-9 * full.parameters);
  EXPECT_NEAR(sharded.gradients, full.gradients / n + gradient, 1e-9 * full.gradients);
  EXPECT_LT(sharded.total(), full.total());
  // The optimizer step updates the rank's shard.
  auto step = [](const Schedule& s) {
    for (const Op& op : s.programs[RankId{0}])
      if (const auto* o = std::get_if<OptimizerStep>(&op)) return o->parameters;
    return 0.0;
  };
  EXPECT_NEAR(step(fsdp->schedule), step(whole->schedule) / n, 1e-9 * step(whole->schedule));
}

TEST(Fsdp, GathersHideBehindComputeOnAFastNetworkAndNotOnASlowOne) {
  // With a network 10^5 x faster, the iteration is the rank's compute and optimizer step
  // (the prefetched gathers hide behind it); on a slow one it is at least the gathers'
  // time, which one stream runs back to back.
  auto run = [](const std::vector<std::string>& extra) {
    const auto study = cornstarch_fsdp(extra);
    const Timeline t = evaluate(study->schedule, study->config.cluster);
    double compute = 0, gathers = 0;
    const auto& program = study->schedule.programs[RankId{0}];
    for (std::size_t i = 0; i < program.size(); ++i) {
      const OpTiming& at = t.timings[RankId{0}][i];
      if (std::holds_alternative<Compute>(program[i]) ||
          std::holds_alternative<OptimizerStep>(program[i]))
        compute += at.end_s - at.start_s;
      const auto* c = std::get_if<Collective>(&program[i]);
      if (c && c->kind == CollectiveKind::kAllGather) gathers += at.end_s - at.start_s;
    }
    return std::tuple{t.iteration_time_s(), compute, gathers};
  };
  const auto [fast, fast_compute, fast_gathers] =
      run({"cluster.inter_node.bandwidth=2.5e15", "cluster.intra_node.bandwidth=5.6e15"});
  EXPECT_NEAR(fast, fast_compute, 0.01 * fast_compute);
  const auto [slow, slow_compute, slow_gathers] = run({"cluster.inter_node.bandwidth=1e8"});
  EXPECT_GT(slow_gathers, 10 * slow_compute);
  EXPECT_GE(slow, slow_gathers);
  EXPECT_GT(slow, 10 * fast);
}

/// tests/data/moe-small.toml (4 MoE layers of 8 experts after a dense one, pp 2) at dp 4
/// and ep 2 under FSDP: two ranks hold each expert.
std::unique_ptr<Study> moe_fsdp(std::vector<std::string> extra = {}) {
  std::vector<std::string> overrides = {"parallel.fsdp=true", "parallel.ep=2"};
  overrides.insert(overrides.end(), extra.begin(), extra.end());
  return prepare_study(test::source_path("tests/data/moe-small.toml"), overrides);
}

TEST(Fsdp, ExpertsShardOverTheirHoldersAndTheRestOverEveryReplica) {
  for (const bool per_microbatch : {true, false}) {
    SCOPED_TRACE(per_microbatch ? "per microbatch" : "per step");
    const auto study = moe_fsdp({std::string("parallel.fsdp_reshard_after_forward=") +
                                 (per_microbatch ? "true" : "false")});
    const Schedule& s = study->schedule;
    const MemoryConstants& memory = study->problem.memory;
    ASSERT_EQ(memory.expert_parallel, 2);
    for (const RankId r : s.rank_ids()) {
      SCOPED_TRACE("rank " + to_string(r));
      // Per layer: bytes gathered (and reduce-scattered) on the 4-member group of every
      // replica and on the 2-member group of the ranks holding the same experts.
      std::map<std::pair<int, std::size_t>, double> gathered, reduced;
      for (const Op& op : s.programs[r]) {
        const auto* c = std::get_if<Collective>(&op);
        ASSERT_FALSE(c && c->kind == CollectiveKind::kAllReduce && !c->tied_embedding)
            << "no gradient all-reduce under FSDP: " << to_string(op, s);
        if (!c || !c->async || c->kind == CollectiveKind::kAllToAll) continue;
        const std::size_t members = s.group_members(c->group).size();
        ASSERT_TRUE(members == 4 || members == 2) << to_string(op, s);
        if (members == 2) {  // the other holder sits in the other expert-parallel group
          const auto& holders = s.group_members(c->group);
          EXPECT_EQ(s.ranks[holders[1]].replica.value() - s.ranks[holders[0]].replica.value(), 2);
        }
        auto& sum = c->kind == CollectiveKind::kAllGather ? gathered : reduced;
        sum[{c->first_layer, members}] += c->bytes;
      }
      const int tp = s.ranks[r].tp;
      for (const auto& [key, bytes] : gathered) {
        const auto [layer, members] = key;
        const double experts = rank_expert_parameters(study->config.model, layer, memory) / tp;
        const double all = layer_weight_bytes(*study->cost, study->config.model, layer, tp, memory);
        // Each gather point brings the layer whole: the experts on their holders' group.
        const double share = members == 2 ? 2 * experts : all - 2 * experts;
        EXPECT_NEAR(std::fmod(bytes, share), 0, 1e-6 * share) << "layer " << layer;
        if (members == 2) {
          EXPECT_GT(experts, 0) << "only MoE layers gather experts apart";
        }
      }
      for (const auto& [key, bytes] : reduced) {
        const auto [layer, members] = key;
        const double grad = memory.gradient_bytes_per_param;
        const double experts = rank_expert_parameters(study->config.model, layer, memory) / tp;
        const double all = rank_parameters(*study->cost, study->config.model, layer, memory) / tp;
        const double share = members == 2 ? experts * grad : (all - experts) * grad;
        EXPECT_NEAR(std::fmod(bytes, share), 0, 1e-6 * share) << "layer " << layer;
      }
      // Rank 0 holds MoE layers (stage 0: the dense layer and two MoE ones).
      if (r == RankId{0}) {
        EXPECT_TRUE(gathered.contains({1, 2}));
        EXPECT_TRUE(reduced.contains({1, 2}));
      }
    }
    EXPECT_GT(evaluate(s, study->config.cluster).iteration_time_s(), 0);
  }
}

TEST(Fsdp, EverySchedulerRunsItWithExpertParallelismOrRefusesNamingTheKey) {
  for (const SchedulerInfo& info : scheduler_registry()) {
    SCOPED_TRACE(info.name);
    std::unique_ptr<Study> study;
    try {
      study = moe_fsdp({std::string("schedule.name=") + info.name});
    } catch (const InputError& e) {
      const std::string what = e.what();
      EXPECT_TRUE(what.find("parallel.fsdp") != std::string::npos ||
                  what.find("parallel.ep") != std::string::npos ||
                  what.find("schedule.") != std::string::npos)
          << what;
      continue;
    }
    EXPECT_GT(evaluate(study->schedule, study->config.cluster).iteration_time_s(), 0);
  }
}

TEST(Fsdp, ExpertsWithOneHolderStayWhole) {
  // dp 4 = ep 4: each rank holds its experts alone; only the rest of a layer is gathered.
  const auto study = moe_fsdp({"parallel.ep=4"});
  const Schedule& s = study->schedule;
  const MemoryConstants& memory = study->problem.memory;
  for (const Op& op : s.programs[RankId{0}]) {
    const auto* c = std::get_if<Collective>(&op);
    if (!c || c->kind != CollectiveKind::kAllGather) continue;
    EXPECT_EQ(s.group_members(c->group).size(), 4u) << to_string(op, s);
    const int l = c->first_layer;
    EXPECT_DOUBLE_EQ(c->bytes, layer_weight_bytes(*study->cost, study->config.model, l, 1, memory) -
                                   rank_expert_parameters(study->config.model, l, memory) * 2)
        << to_string(op, s);
  }
}

TEST(Fsdp, ExpertStateShardsOverItsHolders) {
  const auto study = moe_fsdp();
  MemoryConstants memory = study->problem.memory;
  const Model& model = study->config.model;
  const int layer = 1;  // MoE
  const double experts = rank_expert_parameters(model, layer, memory);
  const double dense = rank_parameters(*study->cost, model, layer, memory) - experts;
  ASSERT_GT(experts, 0);
  // dp 4, ep 2: the dense parameters over 4 ranks, each rank's experts over their 2 holders.
  const StaticMemory m = layer_state_bytes(*study->cost, model, layer, 1, memory, 4, true);
  EXPECT_DOUBLE_EQ(m.parameters, (dense / 4 + experts / 2) * 2);
  EXPECT_DOUBLE_EQ(m.gradients, (dense / 4 + experts / 2) * memory.gradient_bytes_per_param);
  // FP8 copies of the linear weights shard the same way.
  memory.fp8_weight_bytes_per_param = 1;
  const double linear = rank_layer_parameters(model.layer(layer), 2) - experts;
  EXPECT_DOUBLE_EQ(
      layer_state_bytes(*study->cost, model, layer, 1, memory, 4, true).parameters - m.parameters,
      linear / 4 + experts / 2);
}

TEST(Fsdp, BadCombinationsAreInputErrorsNamingTheKey) {
  auto error = [](const std::vector<std::string>& overrides) -> std::string {
    try {
      cornstarch_fsdp(overrides);
    } catch (const InputError& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(error({"parallel.dp=1"}).find("parallel.fsdp"), std::string::npos);
  // DIP plans each replica's microbatches on its own (schedulers/variability/dip.hpp):
  // under FSDP's lockstep the replicas' gathers would pair different layers.
  try {
    prepare_study(test::source_path("configs/paper/entrain-chartqa-llama3-1b.toml"),
                  {"parallel.fsdp=true", "parallel.fsdp_reshard_after_forward=true",
                   "schedule.name=dip", "schedule.microbatches=8"});
    ADD_FAILURE() << "expected a refusal";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("would not line up across the replicas"),
              std::string::npos)
        << e.what();
  }
  EXPECT_NE(error({"parallel.overlap_grad_reduce=true"}).find("parallel.overlap_grad_reduce"),
            std::string::npos);
}

}  // namespace
}  // namespace loom
