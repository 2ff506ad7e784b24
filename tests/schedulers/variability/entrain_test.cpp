// The `entrain` scheduler (dissertation §4.5, §4.5.3) on the paper's SynthChartNet config
// (configs/paper/entrain-synthchartnet-llama3-1b.toml), through the validator and the
// contention-free evaluator.
#include "schedulers/variability/entrain.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "core/errors.hpp"
#include "core/evaluator.hpp"
#include "core/index.hpp"
#include "core/validate.hpp"
#include "test_support.hpp"

namespace loom {
namespace {

std::unique_ptr<Study> synthchartnet(std::vector<std::string> extra = {}) {
  extra.push_back("schedule.microbatches=8");  // 4 x 8 x 4 = 128 samples: a quick iteration
  return prepare_study(test::source_path("configs/paper/entrain-synthchartnet-llama3-1b.toml"),
                       extra);
}

/// (replica, microbatch) -> index of the op in `rank`'s program matching `pred`.
const Compute* find_compute(const Schedule& s, int rank, Pass pass, MicrobatchId mb, int* index) {
  const auto& program = s.programs[RankId{rank}];
  for (size_t i = 0; i < program.size(); ++i) {
    const auto* c = std::get_if<Compute>(&program[i]);
    if (c && !c->redundant && c->pass == pass && c->microbatch == mb) {
      *index = static_cast<int>(i);
      return c;
    }
  }
  return nullptr;
}

TEST(Entrain, ScheduleIsValidAndCoversEverySampleOnce) {
  for (const char* pipeline : {"1f1b", "zb"}) {
    auto study = synthchartnet({std::string("schedule.entrain.pipeline=") + pipeline});
    const Schedule s = generate_entrain(study->problem);
    EXPECT_NO_THROW(validate(s, *study->problem.model)) << pipeline;
    EXPECT_NO_THROW(evaluate(s, *study->problem.cluster)) << pipeline;
    int samples = 0;
    for (const auto& replica : s.samples)
      for (const auto& mb : replica) samples += isize(mb);
    EXPECT_EQ(samples, 128) << pipeline;
  }
}

TEST(Entrain, SplitBackwardRunsADeferredSamplesEncoderBackwardAfterItsLlmBackward) {
  auto study = synthchartnet();
  const SchedulingProblem& problem = study->problem;
  const EntrainPlan plan = plan_entrain(problem);
  const Schedule s = generate_entrain(problem);
  const Timeline t = evaluate(s, *problem.cluster);
  const int p = problem.parallel.pp, enc_last = plan.encoder_stages - 1;
  int deferred_samples = 0;
  for (int d = 0; d < problem.parallel.dp; ++d) {
    const DeferralPlan& r = plan.assignment.replicas[ReplicaId{d}];
    for (size_t j = 0; j + 1 < r.deferred.size(); ++j) {
      if (r.deferred[j].empty()) continue;
      const MicrobatchId next{static_cast<int>(j) + 1};
      for (const SampleId sample : r.deferred[j]) {
        // The deferred sample's LLM work (and so its encoder backward) is microbatch j + 1.
        const auto& llm = s.samples_of(ReplicaId{d}, next);
        EXPECT_NE(std::find(llm.begin(), llm.end(), sample), llm.end());
        ++deferred_samples;
      }
      int ie = 0, il = 0;
      const Compute* enc = find_compute(s, d * p + enc_last, Pass::kB, next, &ie);
      const Compute* llm = find_compute(s, d * p + enc_last + 1, Pass::kB, next, &il);
      ASSERT_TRUE(enc && llm);
      const double enc_start = t.timings[RankId{d * p + enc_last}][static_cast<size_t>(ie)].start_s;
      const double llm_end = t.timings[RankId{d * p + enc_last + 1}][static_cast<size_t>(il)].end_s;
      EXPECT_GE(enc_start, llm_end) << "replica " << d << " microbatch " << next;
      // The rest of microbatch j does not wait for it: its encoder backward is op j,
      // which needs only the LLM backward of j.
      const Compute* kept =
          find_compute(s, d * p + enc_last, Pass::kB, MicrobatchId{static_cast<int>(j)}, &ie);
      ASSERT_TRUE(kept);
      const auto& program = s.programs[RankId{d * p + enc_last}];
      const auto* recv = std::get_if<Recv>(&program[static_cast<size_t>(ie - 1)]);
      ASSERT_TRUE(recv);
      EXPECT_EQ(recv->tag.pass, Pass::kB);
      EXPECT_EQ(recv->tag.microbatch, MicrobatchId{static_cast<int>(j)});
    }
  }
  EXPECT_GT(deferred_samples, 0) << "SynthChartNet should defer something";
}

/// Seconds of encoder-side forwards per replica, sorted (the encoder schedule's content).
std::vector<double> encoder_forwards(const Schedule& s, int encoder_stages) {
  std::vector<double> out;
  for (const auto& program : s.programs)
    for (const Op& op : program)
      if (const auto* c = std::get_if<Compute>(&op);
          c && c->pass == Pass::kF && c->stage.value() < encoder_stages)
        out.push_back(c->seconds);
  std::sort(out.begin(), out.end());
  return out;
}

/// Largest LLM forward of one microbatch (summed over the LLM stages) in the schedule.
double max_llm_forward(const Schedule& s, int encoder_stages) {
  std::map<std::pair<int, MicrobatchId>, double> per_mb;
  for (const RankId r : s.rank_ids())
    for (const Op& op : s.programs[r])
      if (const auto* c = std::get_if<Compute>(&op);
          c && c->pass == Pass::kF && c->stage.value() >= encoder_stages)
        per_mb[{r.value() / s.num_stages, c->microbatch}] += c->seconds;
  double m = 0;
  for (const auto& [key, v] : per_mb) m = std::max(m, v);
  return m;
}

TEST(Entrain, DeferralKeepsTheEncoderScheduleAndLowersTheLlmPeak) {
  auto with = synthchartnet();
  auto without = synthchartnet({"schedule.entrain.defer=false"});
  const int e = plan_entrain(with->problem).encoder_stages;
  const Schedule a = generate_entrain(with->problem);
  const Schedule b = generate_entrain(without->problem);
  const auto fa = encoder_forwards(a, e), fb = encoder_forwards(b, e);
  ASSERT_EQ(fa.size(), fb.size());
  for (size_t i = 0; i < fa.size(); ++i) EXPECT_NEAR(fa[i], fb[i], 1e-12 + 1e-9 * fb[i]);
  EXPECT_LE(max_llm_forward(a, e), max_llm_forward(b, e) * (1 + 1e-9));
}

TEST(Entrain, ZeroBubbleOrderSplitsEveryBackward) {
  const StageOrders o = entrain_orders({2, 1, 0}, {0, 1, 2}, 4, true);
  for (const StageId s : o.ids()) {
    int i = 0, w = 0;
    for (const StageAction& a : o[s]) {
      EXPECT_NE(a.pass, Pass::kB);
      if (a.pass == Pass::kI) ++i;
      if (a.pass == Pass::kW) {
        ++w;
        EXPECT_LE(w, i);  // a W never precedes its I
      }
    }
    EXPECT_EQ(i, 4);
    EXPECT_EQ(w, 4);
  }
}

TEST(Entrain, OneStageIsAnInputErrorNamingTheKey) {
  try {
    synthchartnet({"parallel.pp=1"});
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("parallel.pp"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("entrain"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace loom
