// Properties every registered scheduler keeps on random small configs (seeded, so a
// failure reproduces): the schedule validates (every sample's forward and backward
// exactly once, every dependency produced before it is consumed, no cycle of waits), the
// evaluator finishes it (no deadlock), it fits the memory the planner checked, and a
// rerun gives the identical schedule. A request a scheduler cannot serve must say so with
// InputError or InfeasibleError, never anything else.
#include <gtest/gtest.h>

#include <random>

#include "core/errors.hpp"
#include "core/evaluator.hpp"
#include "core/validate.hpp"
#include "test_support.hpp"

namespace loom {
namespace {

std::string program_text(const Schedule& s) {
  std::string out;
  for (int r = 0; r < s.num_ranks(); ++r) {
    for (const Op& op : s.programs[RankId{r}]) out += to_string(op, s) + " ";
    out += "\n";
  }
  return out;
}

TEST(EveryScheduler, RandomSmallConfigsValidateRunAndRerunIdentically) {
  const char* configs[] = {"configs/examples/uniform-1f1b.toml", "configs/examples/vlm-frozen.toml",
                           "tests/data/two-encoders.toml"};
  std::mt19937 rng(20261125);
  for (const SchedulerInfo& info : scheduler_registry()) {
    int ran = 0;
    for (int trial = 0; trial < 6; ++trial) {
      const std::string config = configs[trial % 3];
      const int pp = std::uniform_int_distribution<int>(1, 4)(rng);
      const int m = pp * std::uniform_int_distribution<int>(1, 3)(rng);
      const int dp = std::uniform_int_distribution<int>(1, 2)(rng);
      const std::vector<std::string> overrides = {
          "schedule.name=" + std::string(info.name), "parallel.pp=" + std::to_string(pp),
          "parallel.dp=" + std::to_string(dp), "schedule.microbatches=" + std::to_string(m),
          "cluster.nodes=2",
          // Every other trial overlaps the data-parallel reduction in small buckets.
          std::string("parallel.overlap_grad_reduce=") + (trial % 2 ? "true" : "false"),
          "parallel.grad_bucket_size=1e6"};
      const std::string what = std::string(info.name) + " on " + config + " pp " +
                               std::to_string(pp) + " dp " + std::to_string(dp) + " m " +
                               std::to_string(m) + (trial % 2 ? " overlapped" : "");
      std::unique_ptr<Study> a, b;
      try {
        a = prepare_study(test::source_path(config), overrides);
      } catch (const InputError&) {
        continue;  // the scheduler does not serve this layout, and said so
      } catch (const InfeasibleError&) {
        continue;
      }
      ++ran;
      const Schedule& s = a->schedule;
      const Model& model = *a->problem.model;
      EXPECT_NO_THROW(validate(s, model)) << what;
      EXPECT_NO_THROW(check_fits_memory(s, a->problem.cluster->gpu.memory_bytes)) << what;
      const Timeline t = evaluate(s, *a->problem.cluster);
      EXPECT_GT(t.iteration_time_s(), 0) << what;
      b = prepare_study(test::source_path(config), overrides);
      EXPECT_EQ(program_text(s), program_text(b->schedule)) << what;
      EXPECT_EQ(t.iteration_time_s(), evaluate(b->schedule, *b->problem.cluster).iteration_time_s())
          << what;
    }
    EXPECT_GE(ran, 1) << info.name << " ran on none of the random configs";
  }
}

/// An infeasible layout here is more GPUs than the cluster has, or than their memory
/// holds; nothing else.
void expect_out_of_capacity(const InfeasibleError& e, const std::string& what) {
  const std::string why = e.what();
  EXPECT_TRUE(why.find("GPUs") != std::string::npos || why.find("memory") != std::string::npos)
      << what << ": " << why;
}

/// Seconds of compute over all ranks.
double total_compute(const Schedule& s) {
  double total = 0;
  for (const auto& program : s.programs) {
    for (const Op& op : program) {
      if (const auto* c = std::get_if<Compute>(&op)) total += c->seconds;
    }
  }
  return total;
}

// parallel.cp in {1, 2, 4}: every scheduler that runs a config at cp 1 runs it with CP, or
// refuses by naming parallel.cp; a CP schedule validates (each CP rank computes every
// layer of every microbatch once), finishes, reruns identically and does the same work in
// all as at cp 1 (more only by the padding of sequences to 2 x cp chunks).
TEST(EveryScheduler, ContextParallelRunsOrIsRefusedByName) {
  const char* configs[] = {"configs/examples/uniform-1f1b.toml",
                           "configs/examples/vlm-frozen.toml"};
  std::mt19937 rng(20261202);
  for (const SchedulerInfo& info : scheduler_registry()) {
    int ran = 0;
    for (int trial = 0; trial < 4; ++trial) {
      const std::string config = configs[trial % 2];
      const int pp = std::uniform_int_distribution<int>(1, 4)(rng);
      const int m = pp * std::uniform_int_distribution<int>(1, 2)(rng);
      const int dp = std::uniform_int_distribution<int>(1, 2)(rng);
      const int cp = trial < 2 ? 2 : 4;
      std::vector<std::string> overrides = {"schedule.name=" + std::string(info.name),
                                            "parallel.pp=" + std::to_string(pp),
                                            "parallel.dp=" + std::to_string(dp),
                                            "schedule.microbatches=" + std::to_string(m),
                                            "cluster.nodes=8",
                                            "sim.backend=evaluator"};
      const std::string what = std::string(info.name) + " on " + config + " pp " +
                               std::to_string(pp) + " dp " + std::to_string(dp) + " cp " +
                               std::to_string(cp);
      std::unique_ptr<Study> one;
      try {
        one = prepare_study(test::source_path(config), overrides);
      } catch (const InputError&) {
        continue;  // not this layout at all
      } catch (const InfeasibleError&) {
        continue;
      }
      overrides.push_back("parallel.cp=" + std::to_string(cp));
      std::unique_ptr<Study> a;
      try {
        a = prepare_study(test::source_path(config), overrides);
      } catch (const InputError& e) {
        EXPECT_NE(std::string(e.what()).find("parallel.cp"), std::string::npos)
            << what << ": " << e.what();
        continue;
      } catch (const InfeasibleError& e) {
        expect_out_of_capacity(e, what);
        continue;
      }
      ++ran;
      const Schedule& s = a->schedule;
      EXPECT_EQ(s.cp, cp) << what;
      EXPECT_NO_THROW(validate(s, *a->problem.model)) << what;
      const Timeline t = evaluate(s, *a->problem.cluster);
      EXPECT_GT(t.iteration_time_s(), 0) << what;
      const auto b = prepare_study(test::source_path(config), overrides);
      EXPECT_EQ(program_text(s), program_text(b->schedule)) << what;
      const double work = total_compute(one->schedule);
      EXPECT_GE(total_compute(s), work * (1 - 1e-9)) << what;
      EXPECT_LE(total_compute(s), work * 1.05) << what;
    }
    if (ran == 0) std::cerr << info.name << ": refuses parallel.cp on every trial\n";
  }
}

// Mixture of experts (tests/data/moe-small.toml) with parallel.ep in {1, 2, 4}: every
// scheduler that runs the model runs it with expert parallelism, or refuses by naming
// parallel.ep; an EP schedule validates, fits memory, has two all-to-alls per MoE layer
// in every forward and backward it runs, each over ep ranks, and reruns identically. Two
// more trials run ep 2 over TP groups of 2 (expert tensor parallelism = tp).
TEST(EveryScheduler, ExpertParallelRunsOrIsRefusedByName) {
  // The LLM of the multimodal example given experts too, for the multimodal schedulers.
  const std::vector<std::string> vlm_experts = {
      "model.modules.llm.experts=8", "model.modules.llm.top_k=2",
      "model.modules.llm.expert_ffn=1024", "cluster.nodes=2"};
  std::mt19937 rng(20261203);
  for (const SchedulerInfo& info : scheduler_registry()) {
    int ran = 0;
    for (int trial = 0; trial < 8; ++trial) {
      const bool tensor_parallel = trial >= 6;
      const int ep = tensor_parallel ? 2 : 1 << (trial % 3);
      const bool vlm = trial >= 3 && !tensor_parallel;
      const std::string config =
          vlm ? "configs/examples/vlm-frozen.toml" : "tests/data/moe-small.toml";
      const int pp = std::uniform_int_distribution<int>(1, 2)(rng);
      const int m = 2 * pp;
      std::vector<std::string> overrides = {"schedule.name=" + std::string(info.name),
                                            "parallel.pp=" + std::to_string(pp), "parallel.dp=4",
                                            "schedule.microbatches=" + std::to_string(m)};
      if (vlm) overrides.insert(overrides.end(), vlm_experts.begin(), vlm_experts.end());
      if (tensor_parallel) {
        overrides.insert(overrides.end(),
                         {"parallel.tp=2", "parallel.sequence_parallel=true", "cluster.nodes=4"});
      }
      const std::string what = std::string(info.name) + " on " + config + " pp " +
                               std::to_string(pp) + " ep " + std::to_string(ep) +
                               (tensor_parallel ? " tp 2" : "");
      std::unique_ptr<Study> a;
      try {
        std::vector<std::string> with_ep = overrides;
        with_ep.push_back("parallel.ep=" + std::to_string(ep));
        a = prepare_study(test::source_path(config), with_ep);
      } catch (const InputError& e) {
        // Not this model or layout at all (multimodal or per-module schedulers), or EP named.
        if (ep > 1 && std::string(e.what()).find("parallel.ep") == std::string::npos) {
          EXPECT_THROW(prepare_study(test::source_path(config), overrides), InputError)
              << what << " refuses ep without naming parallel.ep: " << e.what();
        }
        continue;
      } catch (const InfeasibleError& e) {
        expect_out_of_capacity(e, what);
        continue;
      }
      ++ran;
      const Schedule& s = a->schedule;
      EXPECT_NO_THROW(validate(s, *a->problem.model)) << what;
      EXPECT_NO_THROW(check_fits_memory(s, a->problem.cluster->gpu.memory_bytes)) << what;
      const Timeline t = evaluate(s, *a->problem.cluster);
      EXPECT_GT(t.iteration_time_s(), 0) << what;
      int all_to_alls = 0, passes = 0;
      for (const auto& program : s.programs) {
        for (const Op& op : program) {
          if (const auto* c = std::get_if<Collective>(&op);
              c && c->kind == CollectiveKind::kAllToAll) {
            ++all_to_alls;
            EXPECT_EQ(isize(s.group_members(c->group)), ep) << what;
          }
          // A MoE layer's last part (or its whole pass at ep 1) in F, B or I.
          if (const auto* c = std::get_if<Compute>(&op);
              c && !c->continues && c->pass != Pass::kW && !c->redundant &&
              a->problem.model->layer(c->first_layer).moe())
            ++passes;
        }
      }
      EXPECT_EQ(all_to_alls, ep > 1 ? 2 * passes : 0) << what;
      overrides.push_back("parallel.ep=" + std::to_string(ep));
      const auto b = prepare_study(test::source_path(config), overrides);
      EXPECT_EQ(program_text(s), program_text(b->schedule)) << what;
    }
    if (ran == 0) std::cerr << info.name << ": runs neither MoE model\n";
  }
}

}  // namespace
}  // namespace loom
