// Pass 5b of the lowering (add_parameter_gathers, parallel.fsdp): FSDP2's per-layer
// parameter all-gathers, prefetched one layer ahead, and its gradient reduce-scatters, on
// MLLM-SSS as the Cornstarch paper's FSDP baseline runs it (24 GPUs, mini-batch 2) and on
// Narayanan et al.'s GPT with a pipeline and several microbatches.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <variant>

#include "core/errors.hpp"
#include "core/evaluator.hpp"
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

/// Checks every rank's program: each compute that uses parameters waits for exactly the
/// all-gather of its own layers, issued before it; each trainable layer is reduce-scattered
/// once, after its last backward; no layer gradient is all-reduced.
void expect_fsdp_programs(const Study& study) {
  const Schedule& s = study.schedule;
  for (const RankId r : s.rank_ids()) {
    SCOPED_TRACE("rank " + to_string(r));
    const auto& program = s.programs[r];
    std::vector<std::size_t> issued;  // indices of the rank's async collectives, in order
    std::map<int, int> reduced;       // layer -> reduce-scatters
    std::map<int, std::size_t> last_backward;
    for (std::size_t i = 0; i < program.size(); ++i) {
      const auto* c = std::get_if<Compute>(&program[i]);
      if (c && (c->pass == Pass::kB || c->pass == Pass::kW))
        for (int l = c->first_layer; l < c->end_layer; ++l) last_backward[l] = i;
    }
    for (std::size_t i = 0; i < program.size(); ++i) {
      if (const auto* coll = std::get_if<Collective>(&program[i])) {
        // A tied embedding's copies still all-reduce (the embedding is no layer).
        if (coll->tied_embedding) continue;
        EXPECT_NE(coll->kind, CollectiveKind::kAllReduce) << to_string(program[i], s);
        ASSERT_TRUE(coll->async) << to_string(program[i], s);
        if (coll->kind == CollectiveKind::kReduceScatter) {
          EXPECT_EQ(coll->end_layer, coll->first_layer + 1);
          ++reduced[coll->first_layer];
          EXPECT_EQ(last_backward.at(coll->first_layer), i - 1) << "right after its backward";
        }
        issued.push_back(i);
        continue;
      }
      const auto* c = std::get_if<Compute>(&program[i]);
      if (!c) continue;
      if (!c->redundant) {
        EXPECT_EQ(c->end_layer, c->first_layer + 1) << "one compute per layer";
      }
      const double params = layer_bytes(study, *c, 1);
      if (params == 0 || c->pass == Pass::kW) {
        EXPECT_EQ(c->async_pending, -1) << to_string(program[i], s);
        continue;
      }
      ASSERT_GE(c->async_pending, 0) << to_string(program[i], s);
      ASSERT_GT(issued.size(), static_cast<std::size_t>(c->async_pending));
      const auto& own = std::get<Collective>(program[issued[issued.size() - 1 - c->async_pending]]);
      EXPECT_EQ(own.kind, CollectiveKind::kAllGather) << to_string(program[i], s);
      EXPECT_DOUBLE_EQ(own.bytes, layer_bytes(study, *c, 2)) << "bf16 weights";
      // Prefetch: the next layer's gather was issued before this compute.
      if (c->async_pending == 0) {
        bool later_use = false;
        for (std::size_t k = i + 1; k < program.size(); ++k) {
          const auto* next = std::get_if<Compute>(&program[k]);
          later_use =
              later_use || (next && next->pass != Pass::kW && layer_bytes(study, *next, 1) > 0);
        }
        EXPECT_FALSE(later_use) << "only the rank's last gathered compute has no prefetch";
      }
    }
    for (const auto& [layer, last] : last_backward) {
      const bool trainable = !study.config.model.layer(layer).frozen;
      EXPECT_EQ(reduced[layer], trainable ? 1 : 0) << "layer " << layer;
    }
  }
}

TEST(Fsdp, EveryComputeWaitsForItsOwnGatherAndEveryTrainedLayerIsReducedOnce) {
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

TEST(Fsdp, APipelineGathersPerMicrobatchAndReducesAfterTheLastBackward) {
  const auto study = test::megatron_gpt({"parallel.fsdp=true"});
  expect_fsdp_programs(*study);
}

TEST(Fsdp, EverySchedulerRunsItOrRefusesNamingTheKey) {
  // Schedulers that keep two copies of a stage in a replica, or fuse a forward and a
  // backward into one action, are refused; every other one gets FSDP's programs and runs
  // to the end on the evaluator (no deadlock from the waits).
  const std::set<std::string> refused = {"chimera", "dualpipe-v", "hetero-colocated",
                                         "hetero-noncolocated"};
  for (const SchedulerInfo& info : scheduler_registry()) {
    SCOPED_TRACE(info.name);
    const std::vector<std::string> overrides = {"parallel.fsdp=true", "parallel.dp=2",
                                                "cluster.nodes=2",
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
  // Parameters 1/N plus the two largest layers unsharded (one computing, one prefetched).
  double largest = 0, second = 0;
  for (int l = 0; l < fsdp->config.model.num_layers(); ++l) {
    const double bytes = fsdp->cost->parameters(l) * 2;
    second = std::max(second, std::min(largest, bytes));
    largest = std::max(largest, bytes);
  }
  EXPECT_NEAR(sharded.parameters, full.parameters / n + largest + second, 1e-9 * full.parameters);
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
  EXPECT_NE(error({"parallel.overlap_grad_reduce=true"}).find("parallel.overlap_grad_reduce"),
            std::string::npos);
}

}  // namespace
}  // namespace loom
