// The multimodal pipeline schedulers on the MLLM-XYZ configs of dissertation Table 3.2
// (configs/paper/cornstarch-*.toml), run through the contention-free evaluator:
// cornstarch-arxiv §2.2 (encoders-replicated repeats encoder work; encoders-colocated
// serializes independent encoders), §4.1 (modality parallelism runs them concurrently,
// the LLM waits for every encoder), dissertation §3.5.3 (frozen-aware partitioning).
#include <gtest/gtest.h>

#include <array>
#include <map>
#include <set>

#include "core/errors.hpp"
#include "core/evaluator.hpp"
#include "core/validate.hpp"
#include "schedulers/lowering/lowering.hpp"
#include "test_support.hpp"

namespace loom {
namespace {

const std::vector<std::string> kConfigs = {"sss", "mms", "lls", "ssm", "mmm",
                                           "llm", "ssl", "mml", "lll"};
const std::vector<std::string> kSchedulers = {"encoders-replicated", "encoders-colocated",
                                              "cornstarch"};
/// Cornstarch's modality parallelism proper (Algorithm 1), for the tests about it.
constexpr const char* kParallel = "schedule.cornstarch.modality_parallelism=parallel";

std::unique_ptr<Study> paper(const std::string& xyz, const std::vector<std::string>& extra = {}) {
  return prepare_study(test::source_path("configs/paper/cornstarch-" + xyz + ".toml"), extra);
}

bool is_encoder_side(const Schedule& s, ModuleId module) {
  return s.module_names.at(module) != "llm";
}

/// Seconds of encoder-side (encoders and projectors) forward compute in the timeline.
double encoder_forward_s(const Schedule& s, const Timeline& t) {
  double total = 0;
  for (int r = 0; r < s.num_ranks(); ++r) {
    const auto& program = s.programs[RankId{r}];
    for (size_t i = 0; i < program.size(); ++i) {
      const auto* c = std::get_if<Compute>(&program[i]);
      if (c && c->pass == Pass::kF && is_encoder_side(s, c->module))
        total += t.timings[RankId{r}][i].end_s - t.timings[RankId{r}][i].start_s;
    }
  }
  return total;
}

struct Interval {
  int rank = 0;
  double start = 0, end = 0;
};

/// Forward intervals of one module for one microbatch of replica 0.
std::vector<Interval> forwards(const Schedule& s, const Timeline& t, const std::string& module,
                               MicrobatchId microbatch) {
  std::vector<Interval> out;
  for (int r = 0; r < s.num_ranks(); ++r) {
    if (s.ranks[RankId{r}].replica != ReplicaId{0}) continue;
    const auto& program = s.programs[RankId{r}];
    for (size_t i = 0; i < program.size(); ++i) {
      const auto* c = std::get_if<Compute>(&program[i]);
      if (c && c->pass == Pass::kF && !c->redundant && c->microbatch == microbatch &&
          s.module_names[c->module] == module)
        out.push_back({r, t.timings[RankId{r}][i].start_s, t.timings[RankId{r}][i].end_s});
    }
  }
  return out;
}

}  // namespace

// Every scheduler on every Table 3.2 config: a valid schedule (validate() already ran in
// prepare_study: exactly one forward and backward per layer and microbatch, no deadlock)
// whose microbatches cover the 48 samples of the global batch exactly once.
TEST(Multimodal, EverySchedulerCoversEverySampleOnceOnEveryConfig) {
  for (const std::string& xyz : kConfigs) {
    for (const std::string& name : kSchedulers) {
      const auto study = paper(xyz, {"schedule.name=" + name});
      std::multiset<SampleId> seen;
      for (const auto& replica : study->schedule.samples)
        for (const auto& mb : replica) seen.insert(mb.begin(), mb.end());
      ASSERT_EQ(seen.size(), 48u) << xyz << " " << name;
      for (SampleId id{0}; id < SampleId{48}; ++id)
        EXPECT_EQ(seen.count(id), 1u) << xyz << " " << name;
      EXPECT_GT(evaluate(study->schedule, study->config.cluster).iteration_time_s(), 0);
    }
  }
}

// cornstarch-arxiv §2.2 / Fig 2a: every stage runs every encoder, so the encoder forward
// work in the timeline is p times Cornstarch's, and the iteration is slower.
TEST(Multimodal, ReplicatedRunsEncodersOnEveryStageAndIsSlower) {
  for (const std::string xyz : {"sss", "mmm", "lll"}) {
    const auto rep = paper(xyz, {"schedule.name=encoders-replicated"});
    const auto corn = paper(xyz, {"schedule.name=cornstarch"});
    const Timeline tr = evaluate(rep->schedule, rep->config.cluster);
    const Timeline tc = evaluate(corn->schedule, corn->config.cluster);
    const int p = rep->config.parallel.pp;
    EXPECT_NEAR(encoder_forward_s(rep->schedule, tr), p * encoder_forward_s(corn->schedule, tc),
                1e-9 * encoder_forward_s(rep->schedule, tr))
        << xyz;
    EXPECT_GT(tr.iteration_time_s(), tc.iteration_time_s()) << xyz;
  }
}

// "Slower whenever the encoder's forward time is non-negligible": from a tiny image to
// the full one, the replicated pipeline loses more as the encoders grow.
TEST(Multimodal, ReplicatedFallsBehindAsEncoderWorkGrows) {
  double previous_gap = 0;
  for (int vision : {256, 1024, 4784}) {
    const std::string tokens = "workload.tokens.vision=" + std::to_string(vision);
    const auto rep = paper("mmm", {"schedule.name=encoders-replicated", tokens});
    const auto corn = paper("mmm", {"schedule.name=cornstarch", tokens});
    const double gap = evaluate(rep->schedule, rep->config.cluster).iteration_time_s() -
                       evaluate(corn->schedule, corn->config.cluster).iteration_time_s();
    EXPECT_GT(gap, previous_gap) << vision << " vision tokens";
    previous_gap = gap;
  }
}

// cornstarch-arxiv §2.2 / Fig 1c: colocated encoders share their stages' GPUs and run one
// after the other (the false dependency); §4.1: modality parallelism runs them at once.
TEST(Multimodal, ColocatedSerializesEncodersThatCornstarchRunsConcurrently) {
  const auto colo = paper("mmm", {"schedule.name=encoders-colocated"});
  const Timeline tc = evaluate(colo->schedule, colo->config.cluster);
  const auto vision = forwards(colo->schedule, tc, "vision", MicrobatchId{0});
  const auto audio = forwards(colo->schedule, tc, "audio", MicrobatchId{0});
  ASSERT_FALSE(vision.empty());
  ASSERT_FALSE(audio.empty());
  for (const Interval& v : vision) {
    for (const Interval& a : audio) {
      if (v.rank != a.rank) continue;
      EXPECT_TRUE(a.start >= v.end || v.start >= a.end) << "rank " << v.rank;
      EXPECT_GE(a.start, v.end) << "audio waits for vision on rank " << v.rank;
    }
  }
  const auto corn = paper("mmm", {"schedule.name=cornstarch", kParallel});
  const Timeline tm = evaluate(corn->schedule, corn->config.cluster);
  const auto cv = forwards(corn->schedule, tm, "vision", MicrobatchId{0});
  const auto ca = forwards(corn->schedule, tm, "audio", MicrobatchId{0});
  ASSERT_FALSE(cv.empty());
  ASSERT_FALSE(ca.empty());
  EXPECT_NE(cv.front().rank, ca.front().rank);
  EXPECT_EQ(cv.front().start, 0.0);
  EXPECT_EQ(ca.front().start, 0.0);  // both encoders start at once
}

// cornstarch-arxiv §4.1: "the forward pass of the LLM ... starts only after both encoders
// finish their forward pass".
TEST(Multimodal, CornstarchLlmForwardWaitsForEveryEncoder) {
  const auto corn = paper("sss", {"schedule.name=cornstarch", kParallel});
  const Timeline t = evaluate(corn->schedule, corn->config.cluster);
  for (const MicrobatchId mb : IdRange<MicrobatchId>(corn->config.schedule.microbatches)) {
    const auto llm = forwards(corn->schedule, t, "llm", mb);
    ASSERT_FALSE(llm.empty());
    double first_llm = llm.front().start;
    for (const Interval& i : llm) first_llm = std::min(first_llm, i.start);
    for (const char* proj : {"vproj", "aproj"}) {
      for (const Interval& e : forwards(corn->schedule, t, proj, mb))
        EXPECT_GE(first_llm, e.end) << proj << " microbatch " << mb;
    }
  }
}

// Dissertation Table 3.2: frozen-aware partitioning (the `true` view) is never slower
// than frozen-unaware (`naive`) on the nine MLLM-XYZ configurations, for the
// encoders-colocated pipeline the table reports and for Cornstarch's own allocation.
TEST(Multimodal, FrozenAwareIsNeverSlowerOnTable32Configs) {
  for (const std::string& xyz : kConfigs) {
    for (const char* name : {"encoders-colocated", "cornstarch"}) {
      std::map<std::string, double> t;
      for (const char* view : {"true", "naive"}) {
        const auto s = paper(xyz, {std::string("schedule.name=") + name,
                                   std::string("schedule.partition_view=") + view});
        t[view] = evaluate(s->schedule, s->config.cluster).iteration_time_s();
      }
      EXPECT_LE(t["true"], t["naive"]) << xyz << " " << name;
    }
  }
}

// Cornstarch's placement: `colocated` is encoders-colocated's pipeline under the same
// view, `auto` (the default) runs whichever of it and modality parallelism is faster, and
// each wins on some Table 3.2 model (dissertation §3.5.2: "It chooses better modality
// parallelism"; Table 3.2's LLS and SSL rows show colocated encoders holding their own).
TEST(Multimodal, CornstarchRunsTheFasterOfParallelAndColocatedEncoders) {
  std::set<std::string> winners;
  for (const std::string& xyz : kConfigs) {
    auto time = [&](const std::vector<std::string>& sets) {
      const auto s = paper(xyz, sets);
      return evaluate(s->schedule, s->config.cluster).iteration_time_s();
    };
    const double parallel = time({"schedule.name=cornstarch", kParallel});
    const double colocated =
        time({"schedule.name=cornstarch", "schedule.cornstarch.modality_parallelism=colocated"});
    const double on_llm_stage =  // the encoders on the LLM's first stage (E = 0)
        time({"schedule.name=cornstarch", "schedule.cornstarch.modality_parallelism=colocated",
              "schedule.cornstarch.encoder_stages=0"});
    EXPECT_EQ(colocated, time({"schedule.name=encoders-colocated"})) << xyz;
    EXPECT_EQ(time({"schedule.name=cornstarch"}), std::min({parallel, colocated, on_llm_stage}))
        << xyz;
    winners.insert(parallel <= colocated ? "parallel" : "colocated");
  }
  EXPECT_EQ(winners, (std::set<std::string>{"parallel", "colocated"}));
  EXPECT_THROW(paper("sss", {"schedule.cornstarch.modality_parallelism=both"}), InputError);
}

// Cross-modality 1F1B warm-ups: a chain reduces to p - s - 1; an encoder stage counts the
// stages on its longest path to the end of the LLM.
TEST(Multimodal, WarmupsFollowTheLongestPathThroughTheStageGraph) {
  const auto corn = paper("mmm", {"schedule.name=cornstarch", kParallel});
  const auto chain = test::example("uniform-1f1b.toml", {"parallel.pp=4"});
  const StageGraph g = chain_stages(chain->config.model, plan_stages(chain->problem));
  EXPECT_EQ(stages_downstream(chain->config.model, g), (std::vector<int>{3, 2, 1, 0}));
  EXPECT_LE(corn->schedule.num_stages, corn->config.parallel.pp);
}

}  // namespace loom

namespace loom {

// Every multimodal scheduler over (stages, microbatches) on the two-encoder fixture: a
// valid schedule (prepare_study validates it) whose encoder forward runs once per
// microbatch for real, plus (p - 1) redundant copies for encoders-replicated.
TEST(Multimodal, SweepStagesAndMicrobatches) {
  for (const char* name : {"encoders-replicated", "encoders-colocated", "cornstarch"}) {
    for (int p : {2, 3, 4}) {
      if (std::string(name) == "cornstarch" && p < 3) continue;  // 2 encoders + the LLM
      for (int m : {1, 3, 6}) {
        const auto study =
            test::fixture("two-encoders.toml",
                          {std::string("schedule.name=") + name, "parallel.pp=" + std::to_string(p),
                           "schedule.microbatches=" + std::to_string(m)});
        const Schedule& s = study->schedule;
        int real = 0, copies = 0;
        for (const auto& program : s.programs) {
          for (const Op& op : program) {
            const auto* c = std::get_if<Compute>(&op);
            if (c && c->pass == Pass::kF && s.module_names[c->module] == "vision")
              (c->redundant ? copies : real) += 1;
          }
        }
        const std::string where =
            std::string(name) + " p=" + std::to_string(p) + " m=" + std::to_string(m);
        // One vision forward per microbatch and stage holding vision layers.
        EXPECT_EQ(real % m, 0) << where;
        EXPECT_GE(real, m) << where;
        EXPECT_EQ(copies, std::string(name) == "encoders-replicated" ? (p - 1) * m : 0) << where;
        EXPECT_GT(evaluate(s, study->config.cluster).iteration_time_s(), 0) << where;
      }
    }
  }
}

}  // namespace loom

namespace loom {
namespace {

/// Stages of replica 0 whose real (non-redundant) work includes `module`.
int stages_running(const Schedule& s, const std::string& module) {
  int n = 0;
  for (int stage = 0; stage < s.num_stages; ++stage) {
    for (const Op& op : s.programs[RankId{stage}]) {
      const auto* c = std::get_if<Compute>(&op);
      if (c && !c->redundant && s.module_names[c->module] == module) {
        ++n;
        break;
      }
    }
  }
  return n;
}

}  // namespace

// Algorithm 1 (cornstarch-arxiv §5.2) balances per-stage time across modalities: a larger
// encoder gets more of the 6-stage budget, a larger LLM more LLM stages, and the budget
// is never exceeded.
TEST(Multimodal, CornstarchAllocatesStagesByModuleSize) {
  auto alloc = [](const std::string& xyz) {
    const auto s = prepare_study(test::source_path("configs/paper/cornstarch-" + xyz + ".toml"),
                                 {"schedule.name=cornstarch", kParallel});
    EXPECT_LE(s->schedule.num_stages, s->config.parallel.pp) << xyz;
    return std::array<int, 3>{stages_running(s->schedule, "vision"),
                              stages_running(s->schedule, "audio"),
                              stages_running(s->schedule, "llm")};
  };
  const auto sss = alloc("sss"), lls = alloc("lls"), ssl = alloc("ssl");
  EXPECT_GT(lls[0], sss[0]);  // large vision encoder: more vision stages
  EXPECT_GT(lls[1], sss[1]);  // large audio encoder: more audio stages
  EXPECT_GT(ssl[2], sss[2]);  // large LLM: more LLM stages
  for (const auto& a : {sss, lls, ssl}) EXPECT_EQ(a[0] + a[1] + a[2], 6);
}

}  // namespace loom

namespace loom {

// Cornstarch with per-module layouts (core/layout.hpp): no search; each module runs its
// own pp stages at its own tp on its own GPUs.
TEST(Multimodal, CornstarchHonorsPerModuleLayouts) {
  const std::vector<std::string> layouts = {
      "parallel.modules.llm.tp=2",    "parallel.modules.llm.pp=3",
      "parallel.modules.llm.dp=2",    "parallel.modules.llm.gpus=0-11",
      "parallel.modules.vision.tp=2", "parallel.modules.vision.pp=2",
      "parallel.modules.vision.dp=2", "parallel.modules.vision.gpus=12-19",
      "parallel.modules.audio.dp=2",  "parallel.modules.audio.gpus=20-21"};
  auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.begin(), layouts.begin(), layouts.end());
    extra.push_back("schedule.name=cornstarch");
    return prepare_study(test::source_path("configs/paper/cornstarch-mmm.toml"), extra);
  };
  const auto study = with({});
  const Schedule& s = study->schedule;
  ASSERT_EQ(s.num_stages, 6);  // vision 2 + audio 1 + llm 3
  // Replica 0: vision stages on GPUs 12, 14; audio on 20 (tp 1); the LLM on 0, 2, 4.
  const std::vector<int> gpus = {12, 14, 20, 0, 2, 4};
  const std::vector<int> tps = {2, 2, 1, 2, 2, 2};
  for (int r = 0; r < 6; ++r) {
    EXPECT_EQ(s.ranks[RankId{r}].gpu, gpus[static_cast<size_t>(r)]) << r;
    EXPECT_EQ(s.ranks[RankId{r}].tp, tps[static_cast<size_t>(r)]) << r;
  }
  EXPECT_EQ(s.ranks[8_rank].gpu, 21);  // replica 1's audio stage
  EXPECT_EQ(stages_running(s, "vision"), 2);
  EXPECT_THROW(with({"parallel.modules.audio.dp=1", "parallel.modules.audio.gpus=20"}),
               InputError);  // DP differs from the other modules
  EXPECT_THROW(with({"parallel.modules.audio.tp=2", "parallel.modules.audio.pp=3",
                     "parallel.modules.audio.gpus=0-11"}),
               InputError);  // colocated with the LLM
}

}  // namespace loom
