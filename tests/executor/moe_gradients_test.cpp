// Mixture of experts on the host backend (configs/exec/moe-host.toml): every token copy
// crosses the expert-parallel all-to-alls as real rows, the experts' gradients reduce over
// their own group, and whatever the scheduler, ep or data parallelism, the gradients and
// the optimizer's step equal the sequential run's.
#include <gtest/gtest.h>

#include "executor/host_backend.hpp"
#include "executor/host_state.hpp"
#include "executor/reference.hpp"
#include "schedulers/scheduler.hpp"
#include "test_support.hpp"

namespace loom::exec {
namespace {

std::unique_ptr<Study> moe_study(std::vector<std::string> overrides) {
  return prepare_study(test::source_path("configs/exec/moe-host.toml"), overrides);
}

GradientCheck run_and_check(const Study& study, const Schedule* schedule = nullptr) {
  const ExecProblem p{schedule ? schedule : &study.schedule, &study.config.model,
                      &study.problem.samples, 7};
  return check_gradients(p, make_host_executor()->run(p, {}), reference_gradients(p, {}));
}

std::string failures(const GradientCheck& c) {
  std::string s;
  for (size_t i = 0; i < c.failures.size() && i < 5; ++i) s += c.failures[i] + "\n";
  return s;
}

int all_to_alls(const Schedule& s) {
  int n = 0;
  for (const auto& program : s.programs) {
    for (const Op& op : program) {
      const auto* c = std::get_if<Collective>(&op);
      n += c && c->kind == CollectiveKind::kAllToAll;
    }
  }
  return n;
}

TEST(MoeGradients, EverySchedulerWithExpertParallelismEqualsTheSequentialRun) {
  int ran = 0;
  for (const SchedulerInfo& info : scheduler_registry()) {
    for (const int ep : {1, 2}) {
      const std::string what = std::string(info.name) + " ep " + std::to_string(ep);
      std::unique_ptr<Study> study;
      try {
        study = moe_study({"schedule.name=" + std::string(info.name),
                           "parallel.ep=" + std::to_string(ep), "schedule.microbatches=4"});
      } catch (const InputError&) {
        continue;  // not this model (multimodal and per-module schedulers)
      } catch (const InfeasibleError&) {
        continue;
      }
      ++ran;
      EXPECT_EQ(all_to_alls(study->schedule) > 0, ep > 1) << what;
      const GradientCheck c = run_and_check(*study);
      EXPECT_TRUE(c.passed()) << what << "\n" << failures(c);
      EXPECT_GT(c.tensors_checked, 100) << what;
    }
  }
  EXPECT_GE(ran, 16);
}

TEST(MoeGradients, ExpertsReduceOverTheirOwnGroup) {
  // dp 4, ep 2: lanes 0 and 2 hold experts 0-3, lanes 1 and 3 experts 4-7; the experts'
  // all-reduce sums lanes 0 + 2 and 1 + 3, the data-parallel one everything else.
  for (const std::string scheduler : {"1f1b", "dualpipe-v", "zb-h1"}) {
    const auto study = moe_study({"parallel.dp=4", "schedule.name=" + scheduler});
    const GradientCheck c = run_and_check(*study);
    EXPECT_TRUE(c.passed()) << scheduler << "\n" << failures(c);
  }
  // Without the experts' all-reduce each lane keeps only its own samples' expert
  // gradients: the check catches it.
  const auto study = moe_study({"parallel.dp=4"});
  Schedule broken = study->schedule;
  int dropped = 0;
  for (auto& program : broken.programs) {
    dropped += static_cast<int>(std::erase_if(program, [&](const Op& op) {
      const auto* c = std::get_if<Collective>(&op);
      return c && c->kind == CollectiveKind::kAllReduce &&
             broken.group_members(c->group).size() == 2;  // the experts' (the DP one has 4)
    }));
  }
  ASSERT_GT(dropped, 0);
  EXPECT_FALSE(run_and_check(*study, &broken).passed());
}

TEST(MoeGradients, FrozenLayersAndATiedEmbeddingLeaveTheExpertsAlone) {
  // A frozen MoE layer with nothing trainable upstream runs no backward at all; a tied
  // embedding (vocab at pp 2) all-reduces between the first and last stage and sums no
  // expert's gradient.
  for (const std::string overrides :
       {"model.modules.llm.frozen_layers=[0, 1]", "model.modules.llm.vocab=64"}) {
    const auto study = moe_study({overrides});
    const GradientCheck c = run_and_check(*study);
    EXPECT_TRUE(c.passed()) << overrides << "\n" << failures(c);
  }
}

TEST(MoeGradients, ZipfRoutingInTheSimulatorLeavesTheRealRouterAlone) {
  // `routing` shapes the simulator's loads; the executor routes by its real router.
  auto gradients = [](const Study& study) {
    const ExecProblem p{&study.schedule, &study.config.model, &study.problem.samples, 7};
    return make_host_executor()->run(p, {}).gradients;
  };
  const auto balanced = moe_study({});
  const auto zipf = moe_study({"model.modules.llm.routing=\"zipf:1.0\""});
  EXPECT_NE(balanced->schedule.programs, zipf->schedule.programs);  // its costs differ
  EXPECT_EQ(gradients(*balanced), gradients(*zipf));
}

TEST(MoeGradients, TheCapacityFactorAndTheCudaBackendAreRefusedByName) {
  const auto study = moe_study({"model.modules.llm.capacity_factor=1.0"});
  const ExecProblem p{&study->schedule, &study->config.model, &study->problem.samples, 7};
  const std::string error = test::input_error([&] { make_host_executor()->run(p, {}); });
  EXPECT_NE(error.find("capacity_factor"), std::string::npos) << error;
  const std::string cuda =
      test::input_error([&] { check_no_experts(study->config.model, "the cuda backend"); });
  EXPECT_NE(cuda.find("model.modules.llm.experts: the cuda backend"), std::string::npos) << cuda;
}

}  // namespace
}  // namespace loom::exec
