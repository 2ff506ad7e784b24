// The executor is a reference because its numerics are real: whatever the schedule, the
// accumulated gradients of every trainable parameter equal those of a plain sequential
// run over the same samples (issue 6). Every registered scheduler is run on the host
// backend; a schedule that drops a microbatch's backward must fail the check.
#include <gtest/gtest.h>

#include "executor/adam.hpp"
#include "executor/host_backend.hpp"
#include "executor/reference.hpp"
#include "schedulers/scheduler.hpp"
#include "test_support.hpp"

namespace loom::exec {
namespace {

std::unique_ptr<Study> host_study(const std::vector<std::string>& overrides) {
  return prepare_study(test::source_path("configs/exec/vlm-host.toml"), overrides);
}

ExecProblem problem_of(const Study& study, const Schedule* schedule = nullptr) {
  return {schedule ? schedule : &study.schedule, &study.config.model, &study.problem.samples, 7};
}

GradientCheck run_and_check(const Study& study, const Schedule* schedule = nullptr) {
  const ExecProblem p = problem_of(study, schedule);
  const ExecResult result = make_host_executor()->run(p, {});
  return check_gradients(p, result, reference_gradients(p, {}));
}

std::string failures(const GradientCheck& c) {
  std::string s;
  for (size_t i = 0; i < c.failures.size() && i < 5; ++i) s += c.failures[i] + "\n";
  return s;
}

/// The overrides that give `scheduler` a config it serves, for one with rules of its own on
/// a config of `pp` ranks and `m` microbatches: dualpipe-v needs m >= 2 pp; chimera an even
/// pp and m a multiple of it (its two copies' gradients are summed by the all-reduce, so
/// the result must still be the sequential run's).
std::vector<std::string> serve(const std::string& scheduler, int pp, int m,
                               std::vector<std::string> overrides = {}) {
  overrides.push_back("schedule.name=" + scheduler);
  if (scheduler == "dualpipe-v" && m < 2 * pp)
    overrides.push_back("schedule.microbatches=" + std::to_string(2 * pp));
  if (scheduler == "chimera" && (pp % 2 != 0 || m % pp != 0)) {
    overrides.push_back("parallel.pp=2");
    overrides.push_back("schedule.microbatches=" + std::to_string((m + 1) / 2 * 2));
  }
  return overrides;
}

class EveryScheduler : public ::testing::TestWithParam<std::string> {};

TEST_P(EveryScheduler, FrozenLlmGradientsEqualSequentialRun) {
  const auto study = host_study(serve(GetParam(), 2, 4));
  const GradientCheck c = run_and_check(*study);
  EXPECT_TRUE(c.passed()) << failures(c);
  EXPECT_GT(c.tensors_checked, 0);
  EXPECT_LE(c.max_relative_error, kGradientTolerance);
}

TEST_P(EveryScheduler, TwoEncodersFeedingOneLlmEqualSequentialRun) {
  // Two producers of the LLM's first layer (concatenated input, split input gradient), a
  // trainable encoder beside a frozen one.
  const auto study = prepare_study(test::source_path("configs/exec/two-encoders-host.toml"),
                                   serve(GetParam(), 3, 3));
  const GradientCheck c = run_and_check(*study);
  EXPECT_TRUE(c.passed()) << failures(c);
  EXPECT_GT(c.tensors_checked, 4);
}

TEST_P(EveryScheduler, TrainableLlmWithDataParallelEqualsSequentialRun) {
  // With a vocabulary the LM head's stage keeps a tied-embedding copy and every replica
  // adds the embedding all-reduce (lowering/tied_embedding.hpp): it must not capture the
  // layers' gradients, which the data-parallel all-reduce sums.
  const auto study = host_study(serve(GetParam(), 2, 4,
                                      {"model.modules.llm.frozen=false", "parallel.dp=2",
                                       "cluster.gpus_per_node=4", "model.modules.llm.vocab=1000"}));
  const GradientCheck c = run_and_check(*study);
  EXPECT_TRUE(c.passed()) << failures(c);
}

TEST_P(EveryScheduler, OverlappedGradientBucketsEqualSequentialRun) {
  // parallel.overlap_grad_reduce: the last backward split into buckets of a few layers,
  // each summed by its own async all-reduce (lowering/gradient_buckets.hpp).
  const auto study = host_study(
      serve(GetParam(), 2, 4,
            {"model.modules.llm.frozen=false", "parallel.dp=2", "cluster.gpus_per_node=4",
             "parallel.overlap_grad_reduce=true", "parallel.grad_bucket_size=20000"}));
  const GradientCheck c = run_and_check(*study);
  EXPECT_TRUE(c.passed()) << failures(c);
  EXPECT_GT(c.tensors_checked, 4);
}

TEST_P(EveryScheduler, EncoderItemsAreAttendedOneByOne) {
  // A trainable encoder whose 64 vision tokens a sample are two items of 32 (issue 49):
  // the executor attends within each item under every scheduler, as the cost model prices
  // it, and the sequential reference does the same; attending over the concatenation
  // instead gives other gradients.
  auto run = [](int item_tokens) {
    const auto study =
        host_study(serve(GetParam(), 2, 4,
                         {"model.modules.vision.frozen=false",
                          "model.modules.vision.item_tokens=" + std::to_string(item_tokens)}));
    const ExecProblem p = problem_of(*study);
    const Gradients reference = reference_gradients(p, {});
    const GradientCheck c = check_gradients(p, make_host_executor()->run(p, {}), reference);
    EXPECT_TRUE(c.passed()) << "item_tokens " << item_tokens << "\n" << failures(c);
    return reference;
  };
  const Gradients items = run(32), whole = run(0);
  const ParamKey wq{.layer = 0, .name = "wq"};
  ASSERT_TRUE(items.count(wq) && whole.count(wq));
  EXPECT_NE(items.at(wq), whole.at(wq));
}

std::vector<std::string> scheduler_names() {
  std::vector<std::string> names;
  for (const SchedulerInfo& s : scheduler_registry()) names.emplace_back(s.name);
  return names;
}

INSTANTIATE_TEST_SUITE_P(Registry, EveryScheduler, ::testing::ValuesIn(scheduler_names()),
                         [](const auto& param_info) {
                           std::string n = param_info.param;
                           for (char& ch : n) {
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           }
                           return n;
                         });

TEST(GradientCheck, LoopedSchedulesWithTwoChunksEqualSequentialRun) {
  // The registry sweep above runs one chunk per rank; here two chunks per rank (4 stages of
  // the 7 layers), a trainable LLM and two replicas: interleaved 1F1B in Megatron's groups
  // (5 microbatches in groups of 3: a last group of 2 = pp) and interleaved zero bubble.
  struct Case {
    const char* scheduler;
    int microbatches, group;
  };
  for (const Case& c : {Case{"interleaved-1f1b", 5, 3}, Case{"interleaved-1f1b", 4, 0},
                        Case{"interleaved-zb", 8, 0}, Case{"interleaved-zb", 3, 0}}) {
    const std::string options = "schedule." + std::string(c.scheduler) + ".";
    std::vector<std::string> overrides = {"schedule.name=" + std::string(c.scheduler),
                                          options + "chunks=2",
                                          "schedule.microbatches=" + std::to_string(c.microbatches),
                                          "model.modules.llm.frozen=false",
                                          "parallel.dp=2",
                                          "cluster.gpus_per_node=4"};
    if (c.group != 0)
      overrides.push_back(options + "microbatch_group_size=" + std::to_string(c.group));
    const auto study = host_study(overrides);
    const GradientCheck check = run_and_check(*study);
    EXPECT_TRUE(check.passed()) << c.scheduler << " m " << c.microbatches << "\n"
                                << failures(check);
    EXPECT_GT(check.tensors_checked, 4) << c.scheduler;
  }
}

TEST(GradientCheck, PackedSamplesEqualSequentialRun) {
  // workload.packing (core/packing.hpp): samples of 32 text + 16 projected vision tokens
  // packed two to a 100-token sequence; the LLM attends within each sample of a pack, the
  // encoder within each image, in the schedule and in the sequential reference alike.
  const auto study = host_study(
      {"schedule.name=1f1b", "model.modules.llm.frozen=false", "model.modules.vision.frozen=false",
       "model.modules.vision.item_tokens=32", "workload.packing=\"pack:100\""});
  for (const Sample& pack : study->problem.samples) EXPECT_EQ(pack.parts.size(), 2u);
  const Model& model = study->config.model;
  const int first_llm = model.num_layers() - 1;
  EXPECT_EQ(attention_items(model, model.module_of(first_llm), study->problem.samples[0]),
            (std::vector<int>{48, 48}));
  const GradientCheck c = run_and_check(*study);
  EXPECT_TRUE(c.passed()) << failures(c);
  EXPECT_GT(c.tensors_checked, 8);
}

TEST(GradientCheck, ScheduleThatDropsAMicrobatchBackwardFails) {
  const auto study =
      host_study({"schedule.name=gpipe", "parallel.pp=1", "cluster.gpus_per_node=1"});
  Schedule broken = study->schedule;
  auto& program = broken.programs[0_rank];
  // Drop every backward compute of microbatch 2 (one stage: no messages to keep matched).
  std::erase_if(program, [](const Op& op) {
    const auto* c = std::get_if<Compute>(&op);
    return c && c->pass != Pass::kF && c->microbatch == MicrobatchId{2};
  });
  const GradientCheck c = run_and_check(*study, &broken);
  EXPECT_FALSE(c.passed());
  EXPECT_GT(c.max_relative_error, 0.05);  // ~1/m of the gradient is missing
}

TEST(GradientCheck, ATimingRunCollectsNoTensors) {
  // loom exec --no-check: the timeline only (ExecOptions::collect_tensors).
  const auto study = host_study({"model.modules.llm.frozen=false"});
  ExecOptions options;
  options.collect_tensors = false;
  const ExecResult result = make_host_executor()->run(problem_of(*study), options);
  EXPECT_TRUE(result.gradients.empty());
  EXPECT_TRUE(result.parameters.empty());
  ASSERT_EQ(result.timeline.timings.size(), study->schedule.programs.size());
  EXPECT_EQ(result.timeline.timings[0_rank].size(), study->schedule.programs[0_rank].size());
  // The reference run collects whatever the options say.
  EXPECT_FALSE(reference_gradients(problem_of(*study), options).empty());
}

TEST(GradientCheck, FrozenParametersGetNoGradient) {
  const auto study = host_study({});
  const ExecProblem p = problem_of(*study);
  const ExecResult result = make_host_executor()->run(p, {});
  int trainable = 0;
  for (const Gradients& g : result.gradients) {
    for (const auto& [key, grad] : g) {
      EXPECT_FALSE(study->config.model.layer(key.layer).frozen) << key.layer << " " << key.name;
      ++trainable;
    }
  }
  EXPECT_EQ(trainable, 2);  // the projector's w1 and w2 only
}

TEST(GradientCheck, SplitBackwardDefersWeightGradients) {
  // Turn every B into I then W at the end of the program: the deferred W must still see
  // the state I left, and the result must not change.
  const auto study = host_study({"model.modules.llm.frozen=false"});
  Schedule split = study->schedule;
  for (auto& program : split.programs) {
    std::vector<Op> deferred;
    for (Op& op : program) {
      auto* c = std::get_if<Compute>(&op);
      if (!c || c->pass != Pass::kB) continue;
      c->pass = Pass::kI;
      Compute w = *c;
      w.pass = Pass::kW;
      deferred.push_back(w);
    }
    // W ops after the program's last message, before its optimizer step (and collectives:
    // none at dp 1).
    auto tail = program.end();
    while (tail != program.begin() && !std::holds_alternative<Compute>(*(tail - 1)) &&
           !std::holds_alternative<Send>(*(tail - 1)) && !std::holds_alternative<Recv>(*(tail - 1)))
      --tail;
    program.insert(tail, deferred.begin(), deferred.end());
  }
  const GradientCheck c = run_and_check(*study, &split);
  EXPECT_TRUE(c.passed()) << failures(c);
}

}  // namespace
}  // namespace loom::exec

namespace loom::exec {
namespace {

TEST(GradientCheck, ATiedEmbeddingAllReduceAtOneReplicaSumsNoLayers) {
  // dp 1: the tied embedding's all-reduce (first and last stage) is the ranks' only one;
  // it must not sum the two stages' different layers into each other.
  const auto study = host_study({"model.modules.llm.frozen=false", "model.modules.llm.vocab=1000"});
  bool tied = false;
  for (const auto& program : study->schedule.programs) {
    for (const Op& op : program) {
      if (const auto* c = std::get_if<Collective>(&op)) tied = tied || c->tied_embedding;
    }
  }
  ASSERT_TRUE(tied);
  const GradientCheck c = run_and_check(*study);
  EXPECT_TRUE(c.passed()) << failures(c);
}

TEST(GradientCheck, TheOptimizerStepIsRealAdamAndAMissedOrDoubledStepFails) {
  const auto study = host_study({"model.modules.llm.frozen=false"});
  const ExecProblem p = problem_of(*study);
  const ExecResult result = make_host_executor()->run(p, {});
  const Gradients reference = reference_gradients(p, {});
  const GradientCheck good = check_gradients(p, result, reference);
  ASSERT_TRUE(good.passed()) << failures(good);
  ASSERT_FALSE(result.parameters.at(0_rank).empty());  // the lowering gave every rank a step

  ExecResult missed = result;
  missed.parameters[0_rank].clear();
  const GradientCheck m = check_gradients(p, missed, reference);
  EXPECT_FALSE(m.passed());
  EXPECT_NE(failures(m).find("rank 0: ran no optimizer step"), std::string::npos) << failures(m);

  ExecResult doubled = result;
  // A second step from fresh moments moves every weight by about lr again.
  for (auto& [key, value] : doubled.parameters[0_rank]) {
    AdamState fresh;
    adam_step(value, result.gradients[0_rank].at(key), fresh);
  }
  const GradientCheck d = check_gradients(p, doubled, reference);
  EXPECT_FALSE(d.passed());
  EXPECT_NE(failures(d).find("updated parameters' relative error"), std::string::npos)
      << failures(d);
}

}  // namespace
}  // namespace loom::exec

namespace loom::exec {
namespace {

/// configs/exec/llm-host.toml (a causal GQA language model on 32-token samples).
std::unique_ptr<Study> llm_study(std::vector<std::string> overrides) {
  return prepare_study(test::source_path("configs/exec/llm-host.toml"), overrides);
}

class ContextParallelGradients : public ::testing::TestWithParam<std::string> {};

// parallel.cp = 2 and 4, every exchange: each CP rank computes its zigzag rows, its queries
// attend to every rank's keys through the schedule's own ring messages (or all-gathers), the
// dK/dV of every block travel back to their owner, and the gradients, summed over dp x cp,
// equal the sequential run's. Ulysses instead attends its heads over the whole sequence
// (the model's 2 K/V heads: cp 2 only, one K/V head and two query heads per rank).
TEST_P(ContextParallelGradients, EqualTheSequentialRun) {
  for (const int cp : GetParam() == "a2a" ? std::vector<int>{2} : std::vector<int>{2, 4}) {
    SCOPED_TRACE("cp " + std::to_string(cp));
    const auto study =
        llm_study({"parallel.cp=" + std::to_string(cp), "parallel.dp=1",
                   "parallel.cp_comm=\"" + GetParam() + "\"", "schedule.name=zb-h1"});
    ASSERT_EQ(study->schedule.cp, cp);
    const GradientCheck c = run_and_check(*study);
    EXPECT_TRUE(c.passed()) << failures(c);
    EXPECT_GT(c.tensors_checked, 10);
  }
}

TEST(ContextParallelPacking, IsRefusedByTheHostBackendNamingTheKey) {
  // The host's ring attention splits each sample into 2 x cp chunks of one causal
  // sequence; a pack is several, so it refuses rather than attending across samples.
  const auto study = llm_study({"parallel.cp=2", "workload.packing=\"pack:64\""});
  const ExecProblem p = problem_of(*study);
  const std::string error = test::input_error([&] { make_host_executor()->run(p, {}); });
  EXPECT_NE(error.find("workload.packing"), std::string::npos) << error;
  EXPECT_NE(error.find("parallel.cp = 1"), std::string::npos) << error;
}

TEST_P(ContextParallelGradients, WithDataParallelismAndAFusedBackwardEqualTheSequentialRun) {
  const auto study = llm_study({"parallel.cp=2", "parallel.dp=2", "schedule.name=1f1b",
                                "parallel.cp_comm=\"" + GetParam() + "\""});
  const GradientCheck c = run_and_check(*study);
  EXPECT_TRUE(c.passed()) << failures(c);
}

INSTANTIATE_TEST_SUITE_P(Exchange, ContextParallelGradients,
                         ::testing::Values("p2p", "all-gather", "a2a"), [](const auto& p) {
                           return p.param == "all-gather" ? std::string("all_gather") : p.param;
                         });

/// Whether running `broken` instead of the study's schedule fails or gives other gradients.
bool fails_or_differs(const Study& study, const Schedule& broken) {
  try {
    return !run_and_check(study, &broken).passed();
  } catch (const std::exception&) {
    return true;
  }
}

TEST(ContextParallelGradients, UlyssesOutOfStepIsCaught) {
  // Ulysses with one rank's first all-to-all of layer 1 moved after the attention part it
  // feeds (attending before the heads came): the run fails, so the check is not vacuous.
  const auto study = llm_study({"parallel.cp=2", "parallel.dp=1", "parallel.cp_comm=\"a2a\""});
  Schedule broken = study->schedule;
  std::vector<Op>& program = broken.programs[0_rank];
  std::vector<std::size_t> layer_one;
  for (std::size_t i = 0; i < program.size(); ++i) {
    const auto* c = std::get_if<Collective>(&program[i]);
    if (c && c->kind == CollectiveKind::kAllToAll && c->first_layer == 1) layer_one.push_back(i);
  }
  ASSERT_GE(layer_one.size(), 2U);
  std::swap(program[layer_one[0]], program[layer_one[0] + 1]);  // the attention part first
  EXPECT_TRUE(fails_or_differs(*study, broken));
}

TEST(ContextParallelGradients, AMissingKvBlockIsCaught) {
  // Drop one K/V message pair of the ring: the layer attends to fewer keys (the run fails
  // or its gradients differ): the check is not vacuous.
  const auto study = llm_study({"parallel.cp=2", "parallel.dp=1"});
  Schedule broken = study->schedule;
  for (auto& program : broken.programs) {
    std::erase_if(program, [](const Op& op) {
      const auto* s = std::get_if<Send>(&op);
      const auto* r = std::get_if<Recv>(&op);
      const MessageTag* tag = s ? &s->tag : r ? &r->tag : nullptr;
      return tag && tag->context_parallel() && tag->pass == Pass::kF && tag->boundary_layer == 1 &&
             tag->microbatch == MicrobatchId{0};
    });
  }
  EXPECT_TRUE(fails_or_differs(*study, broken));
}

}  // namespace
}  // namespace loom::exec
