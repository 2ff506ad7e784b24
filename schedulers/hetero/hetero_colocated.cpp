// hetero-colocated (heterogeneous-parallelism-megatron §3.2, §3.3, Fig 4b, App. D): every
// module on the LLM's rank set, each with its own TP/CP/PP/DP grid, run in three phases.
//
//   GPU r:  [enc F mb0 .. mb(m-1)] [boundary] | LLM 1F1B: F0 B0 F1 B1 ... | [boundary] [enc B ...]
//   [DP all-reduce]
//            phase 1                           phase 2                     phase 3
//
// The scheduler decides the stages (each encoder group one stage, the LLM in P stages by
// Eq 3.5), where their copies run and the three-phase order; the one lowering
// (lowering/lowering.hpp) does the rest. A rank is one GPU (modules disagree on TP, so no
// TP group can be one rank for all of them), an IR replica is an LLM data-parallel
// replica, and its Q = P x K GPUs (P stages of K = TP x CP) each compute their own *piece*
// of every microbatch (BatchPieces::pieces = Q): GPU (stage p, shard k) runs the
// encoder items of its own encoder shard as piece k P + p, and the LLM layers of stage p
// for pieces k P .. k P + P - 1 (with P = 1: its CP slice and TP shard), as one unit, so
// the LLM pipelines whole microbatches as Megatron does. A homogeneous layout (every
// module on the LLM's grid) is the special case H of the seed's Table A3.
//
// Boundary (§3.2, App. A.4): a `boundary` action after an encoder's forwards and before
// its backwards. With P = 1 the colocated plan of lowering/boundary.hpp: fan-in is a local
// all-gather among the GPUs whose slices form one LLM shard, other cases are rank-local.
// With P > 1 the pieces computed on later-stage GPUs travel to their stage-0 GPU as they
// are computed (the lowering's messages), and stage 0's TP x CP group all-gathers each
// microbatch's shard at the head of its forward; the gradients return the same way.
//
// [schedule.hetero-colocated] order = "per-microbatch" runs H as Megatron-LM runs one grid: each
// microbatch's encoder forward before its LLM forward and its encoder backward after its
// LLM backward (hetero_order.hpp), no phases; it needs an LLM of one stage and encoders at
// the LLM's DP (rank-local boundaries).
//
// Limits (InputError naming the module): every module on the LLM's rank set, encoders
// with pp = 1, and grids that nest (each GPU already holds its source slices, §3.2).
#include <algorithm>

#include "core/errors.hpp"
#include "core/index.hpp"
#include "schedulers/hetero/hetero_common.hpp"
#include "schedulers/hetero/hetero_order.hpp"
#include "schedulers/lowering/boundary.hpp"
#include "schedulers/lowering/stage_graph.hpp"
#include "schedulers/planners/partition/partition.hpp"

namespace loom {
namespace {

struct ColocatedOptions {
  std::string order = "phases";
};

const OptionSet<ColocatedOptions> kOptions{
    {"order", &ColocatedOptions::order,
     "\"phases\": §3.3's three phases (encoder F, LLM 1F1B, encoder B); \"per-microbatch\": "
     "Megatron-LM's single-grid order, the homogeneous baseline",
     one_of({"phases", "per-microbatch"}).formerly("colocated_order")},
};

constexpr const char* kName = "hetero-colocated";

/// An encoder group in the order the three phases run them (an index into the encoder
/// groups, HeteroGroups::encoders).
using EncoderSlot = Id<struct EncoderSlotTag>;

class Colocated : HeteroScheduler {
 public:
  explicit Colocated(const SchedulingProblem& p) : HeteroScheduler(p, kName, true) {}

  PipelinePrograms run() {
    check_layouts();
    const ModuleLayout& llm = layout(h_.llm);
    grid_ = ColocatedGrid(llm);
    check_boundaries();
    programs_.ranks = grid_.pieces();
    programs_.batch.pieces = grid_.pieces();
    programs_.batch.module_replicas = llm.dp;
    for (const LayoutGroupId e : h_.encoders) add_encoder_stage(e);
    add_llm_stages();
    programs_.replicas.assign(1, RankOrders(grid_.pieces()));
    for (int r = 0; r < grid_.pieces(); ++r) order_gpu(r);
    return std::move(programs_);
  }

 private:
  bool per_microbatch() const {
    return kOptions.read(p_.schedule, "hetero-colocated").order == "per-microbatch";
  }

  void check_layouts() const {
    const ModuleLayout& llm = layout(h_.llm);
    if (per_microbatch() && llm.pp != 1) {
      throw InputError(key(h_.llm) + ".pp: schedule.hetero-colocated.order = \"per-microbatch\" " +
                       "models an LLM of one stage (Megatron-LM would put the encoders in " +
                       "its first stage), got pp = " + std::to_string(llm.pp));
    }
    for (const LayoutGroupId g : h_.groups.ids()) {
      const ModuleLayout& l = layout(g);
      if (!colocated(l, llm)) {
        throw InputError(key(g) +
                         ": hetero-colocated needs every module on the LLM's rank set; "
                         "use hetero-noncolocated for disjoint rank sets");
      }
      if (per_microbatch() && g != h_.llm && l.dp != llm.dp) {
        throw InputError(
            key(g) + ".dp: schedule.hetero-colocated.order = \"per-microbatch\" runs " +
            "each encoder inside the LLM's microbatches on the LLM's batch " +
            "shards (one shared grid, as Megatron-LM), so it needs dp = " + std::to_string(llm.dp) +
            " as the LLM, got " + std::to_string(l.dp));
      }
      if (g != h_.llm && l.pp != 1) {
        throw InputError(key(g) +
                         ".pp: hetero-colocated runs each encoder as one stage (the "
                         "seed's C-E layouts, Tables A2-A3, have PP 1), got " +
                         std::to_string(l.pp));
      }
    }
  }

  /// §3.2 models nested grids only: where a group hands its output to a one-stage group,
  /// each GPU must already hold the source slices its destination shard needs.
  void check_boundaries() const {
    for (const LayoutGroupId e : h_.encoders) {
      for (const LayoutGroupId v : h_.consumers[e]) {
        if (layout(v).pp > 1) continue;  // pieces travel to the first stage (pass 5)
        const BoundaryPlan plan = plan_boundary(
            layout(e), layout(v), static_cast<double>(p_.samples.size()), 1.0, key(e));
        if (!plan.forward.messages.empty() || !plan.backward.messages.empty()) {
          throw InputError(key(e) +
                           ": its grid does not nest in the one it feeds (a GPU would need "
                           "batch slices held by other GPUs); hetero-colocated models "
                           "nested grids only, as in the seed's Tables A2-A3");
        }
      }
    }
  }

  /// The rank (inside an LLM replica) of GPU (stage p, shard k), and its GPU in replica d.
  PipelineRank rank_of(int p, int k) const { return PipelineRank{grid_.gpu_of(0, p, k)}; }
  int gpu_of(int d, PipelineRank rank) const {
    return layout(h_.llm).first_gpu + d * grid_.pieces() + rank.value();
  }

  /// A stage of `group`'s layers, priced on its grid, on one-GPU ranks (copies added by
  /// the caller).
  StageSpec stage_of(LayoutGroupId group, const std::vector<int>& layers) const {
    return StageSpec{.segments = segments_of(model_, layers), .tp = 1, .layout = layout(group)};
  }

  void add_encoder_stage(LayoutGroupId e) {
    StageSpec stage = stage_of(e, h_.layers[e]);
    for (int x = 0; x < grid_.pieces(); ++x)
      stage.copy_ranks.push_back(rank_of(x % grid_.pp(), x / grid_.pp()));
    add_gpus(stage);
    encoder_stage_.push_back(programs_.stages.next_id());
    programs_.stages.push_back(std::move(stage));
  }

  /// The LLM group's layers in PP stages by the min-bottleneck DP of Eq 3.5; stage p's
  /// copy k on GPU (p, k) computes pieces k P .. k P + P - 1.
  void add_llm_stages() {
    const ModuleLayout& llm = layout(h_.llm);
    const auto& layers = h_.layers[h_.llm];
    const std::vector<const Sample*> first = sample_batch(
        p_.samples, replica_samples(global_microbatches(p_, llm.dp).front(), 0, llm.dp));
    const PerLayer<double> all(
        layer_costs(model_, *p_.cost, p_.schedule.partition_view, first, llm.tp));
    std::vector<double> costs;
    for (int l : layers) costs.push_back(all[LayerId{l}]);
    first_llm_stage_ = isize(programs_.stages);
    int p = 0;
    for (const StageRange& range : partition_min_bottleneck(costs, grid_.pp())) {
      StageSpec stage =
          stage_of(h_.llm, {layers.begin() + range.first, layers.begin() + range.end});
      for (int k = 0; k < grid_.shards(); ++k) stage.copy_ranks.push_back(rank_of(p, k));
      add_gpus(stage);
      programs_.stages.push_back(std::move(stage));
      ++p;
    }
  }

  void add_gpus(StageSpec& stage) const {
    for (int d = 0; d < layout(h_.llm).dp; ++d) {
      for (const PipelineRank r : stage.copy_ranks) stage.gpu.push_back(gpu_of(d, r));
    }
  }

  /// GPU (stage p, shard k)'s actions: the three phases, or Megatron's per-microbatch order.
  void order_gpu(int r) {
    const int p = grid_.stage(r), k = grid_.shard(r), pp = grid_.pp(), q = grid_.pieces();
    const int m = p_.schedule.microbatches;
    const int piece = grid_.piece_at(k, p);  // this GPU's encoder piece
    auto& order = programs_.replicas.front()[PipelineRank{r}];
    auto encoder = [&](EncoderSlot e, Pass pass) {
      return RankAction{.stage = encoder_stage_[e], .pass = pass};
    };
    const auto llm_order = one_f_one_b_order(pp - p - 1, m);
    // With a pipelined LLM, stage 0's TP x CP group gathers each microbatch's shard once
    // its pieces have arrived: a boundary action at the head of that forward's unit.
    const bool gathers_per_microbatch = pp > 1 && p == 0 && grid_.shards() > 1;
    const std::vector<PhaseStep> steps = per_microbatch()
                                             ? per_microbatch_order(encoder_slots(), -1, llm_order)
                                             : three_phase_order(encoder_slots(), -1, llm_order, m);
    for (const PhaseStep& s : steps) {
      if (s.phase == Phase::kLlm) {
        if (gathers_per_microbatch && s.action.pass == Pass::kF) {
          for (const EncoderSlot e : encoder_stage_.ids()) {
            RankAction gather = encoder(e, Pass::kF);
            gather.microbatch = batch_piece(s.action.microbatch, q, piece);
            gather.kind = ActionKind::kBoundary;
            gather.with_next = Join::kUnit;
            order.push_back(gather);
          }
        }
        for (int i = 0; i < pp; ++i) {
          order.push_back({.stage = StageId{first_llm_stage_ + p},
                           .pass = s.action.pass,
                           .microbatch = batch_piece(s.action.microbatch, q, grid_.piece_at(k, i)),
                           .with_next = i + 1 < pp ? Join::kUnit : Join::kNone});
        }
        continue;
      }
      if (s.boundary && pp > 1) continue;  // gathered per microbatch in phase 2 instead
      RankAction a = encoder(EncoderSlot{s.group}, s.action.pass);
      a.microbatch = batch_piece(s.action.microbatch, q, piece);
      if (s.boundary) a.kind = ActionKind::kBoundary;
      order.push_back(a);
    }
  }

  /// 0 .. E-1: the encoder slots, as three_phase_order's group indices.
  std::vector<int> encoder_slots() const {
    std::vector<int> out;
    for (const EncoderSlot e : encoder_stage_.ids()) out.push_back(e.value());
    return out;
  }

  ColocatedGrid grid_;
  PipelinePrograms programs_{.stages = {}, .ranks = 0, .stage_rank = {}, .replicas = {}};
  IdVector<EncoderSlot, StageId> encoder_stage_;
  int first_llm_stage_ = 0;
};

}  // namespace

std::vector<OptionSpec> hetero_colocated_options() {
  return kOptions.specs();
}

Schedule generate_hetero_colocated(const SchedulingProblem& problem) {
  return lower(problem, kName, Colocated(problem).run());
}

}  // namespace loom
