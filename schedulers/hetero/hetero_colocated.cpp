// hetero-colocated (heterogeneous-parallelism-megatron §3.2, §3.3, Fig 4b, App. D): every
// module on the LLM's rank set, each with its own TP/CP/PP/DP grid, run in three phases.
//
//   GPU r:  [enc F mb0 .. mb(m-1)] [boundary] | LLM 1F1B: F0 B0 F1 B1 ... | [boundary] [enc B ...]
//   [DP all-reduce]
//            phase 1                           phase 2                     phase 3
//
// Schedule IR representation. A rank is one GPU (modules disagree on TP, so no TP group
// can be one rank for all of them). The IR counts work per (replica, microbatch, layer),
// with replica = the LLM's DP replica. Its P x K GPUs (P pipeline stages of K = TP x CP)
// each compute their own *piece* of every microbatch: GPU (stage p, shard k) runs the
// encoder items of its own encoder replica as piece x = k P + p, and the LLM layers of
// stage p for pieces k P .. k P + P - 1 (with P = 1: its CP slice and TP shard). Piece x
// of microbatch j is IR microbatch j Q + x, Q = P K, so "every sample exactly once" holds
// per piece; sample ids are listed on the pieces in turn. A stage receives, computes and
// sends a microbatch's P pieces as one unit, so the LLM pipelines whole microbatches.
// A homogeneous layout (every module on the LLM's grid) is the special case H of the
// seed's Table A3.
//
// Boundary (§3.2, App. A.4). With P = 1 the plan of hetero_boundary.hpp: fan-in is a
// local all-gather among the GPUs whose slices form one LLM shard, other cases are
// rank-local. With P > 1 the pieces computed on later-stage GPUs first travel to their
// stage-0 GPU point-to-point (the IR's data check needs every input to arrive by a
// message) and stage 0's TP x CP group then all-gathers its shard; the gradients return
// the same way after the LLM drains.
//
// Limits (InputError naming the module): every module on the LLM's rank set, encoders
// with pp = 1, and grids that nest (each GPU already holds its source slices, §3.2).
#include <algorithm>
#include <map>
#include <tuple>

#include "core/errors.hpp"
#include "schedulers/hetero/hetero_boundary.hpp"
#include "schedulers/hetero/hetero_common.hpp"
#include "schedulers/hetero/hetero_order.hpp"
#include "schedulers/lowering/partition.hpp"

namespace loom {
namespace {

class Colocated {
 public:
  explicit Colocated(const SchedulingProblem& p)
      : p_(p), model_(*p.model), h_(hetero_groups(p, kName, true)), groups_(&schedule_) {}

  Schedule run() {
    check_layouts();
    const ModuleLayout& llm = layout(h_.llm);
    grid_ = ColocatedGrid(llm);
    m_ = p_.schedule.microbatches;
    microbatches_ = global_microbatches(p_, llm.dp);
    partition_llm();
    place();
    plan_boundaries();
    for (int r = 0; r < grid_.gpus(); ++r) {
      const int p = grid_.stage(r);
      const auto order = one_f_one_b_order(grid_.pp() - p - 1, m_);
      for (const PhaseStep& s : three_phase_order(h_.encoders, h_.llm, order, m_))
        s.boundary ? emit_boundary(r, s) : emit_compute(r, s);
    }
    emit_gradient_allreduce();
    add_optimizer_steps(p_, schedule_);
    return std::move(schedule_);
  }

 private:
  static constexpr const char* kName = "hetero-colocated";

  const ModuleLayout& layout(int group) const {
    return h_.groups[static_cast<size_t>(group)].layout;
  }
  std::string key(int group) const {
    return "parallel.modules." + model_.module(h_.groups[static_cast<size_t>(group)].owner).name;
  }

  void check_layouts() const {
    const ModuleLayout& llm = layout(h_.llm);
    for (size_t g = 0; g < h_.groups.size(); ++g) {
      const ModuleLayout& l = h_.groups[g].layout;
      if (!colocated(l, llm)) {
        throw InputError(key(static_cast<int>(g)) +
                         ": hetero-colocated needs every module on the LLM's rank set; "
                         "use hetero-noncolocated for disjoint rank sets");
      }
      if (static_cast<int>(g) != h_.llm && l.pp != 1) {
        throw InputError(key(static_cast<int>(g)) +
                         ".pp: hetero-colocated runs each encoder as one stage (the "
                         "seed's C-E layouts, Tables A2-A3, have PP 1), got " +
                         std::to_string(l.pp));
      }
    }
  }

  /// The LLM group's layers in PP stages by the min-bottleneck DP of Eq 3.5.
  void partition_llm() {
    const auto& layers = h_.layers[static_cast<size_t>(h_.llm)];
    std::vector<const Sample*> first;
    for (int id : replica_samples(microbatches_.front(), 0, layout(h_.llm).dp))
      first.push_back(&p_.samples[static_cast<size_t>(id)]);
    const auto all =
        layer_costs(model_, *p_.cost, p_.schedule.partition_view, first, layout(h_.llm).tp);
    std::vector<double> costs;
    for (int l : layers) costs.push_back(all[static_cast<size_t>(l)]);
    for (const StageRange& s : partition_min_bottleneck(costs, grid_.pp())) {
      stage_layers_.emplace_back(layers.begin() + s.first, layers.begin() + s.end);
    }
  }

  void place() {
    for (const Module& mod : model_.modules()) schedule_.module_names.push_back(mod.name);
    const int q = grid_.pieces();
    schedule_.num_stages = grid_.pp();
    schedule_.microbatches = m_ * q;
    const int dp = layout(h_.llm).dp;
    schedule_.samples.assign(static_cast<size_t>(dp),
                             std::vector<std::vector<int>>(static_cast<size_t>(m_ * q)));
    for (int d = 0; d < dp; ++d) {
      for (int j = 0; j < m_; ++j) {
        const auto ids = replica_samples(microbatches_[static_cast<size_t>(j)], d, dp);
        for (size_t i = 0; i < ids.size(); ++i) {
          schedule_.samples[static_cast<size_t>(d)][static_cast<size_t>(j * q) + i % q].push_back(
              ids[i]);
        }
      }
    }
    for (int r = 0; r < grid_.gpus(); ++r) {
      schedule_.ranks.push_back({layout(h_.llm).first_gpu + r, 1, grid_.replica(r)});
      StaticMemory mem = shard_static_memory(p_, stage_layers_[static_cast<size_t>(grid_.stage(r))],
                                             layout(h_.llm));
      for (int e : h_.encoders)
        mem += shard_static_memory(p_, h_.layers[static_cast<size_t>(e)], layout(e));
      schedule_.static_memory.push_back(mem);
    }
    schedule_.programs.resize(static_cast<size_t>(grid_.gpus()));
  }

  /// One packed boundary tensor per encoder group for the whole iteration (phase 1 runs
  /// the encoder once over all local microbatches).
  void plan_boundaries() {
    std::vector<int> all;
    for (const auto& mb : microbatches_) all.insert(all.end(), mb.begin(), mb.end());
    for (int e : h_.encoders) {
      const int last = h_.layers[static_cast<size_t>(e)].back();
      per_sample_[e] = boundary_bytes_per_sample(p_, last, all);
      if (grid_.pp() > 1) continue;  // pieces travel to stage 0, see the file comment
      BoundaryPlan plan = plan_boundary(layout(e), layout(h_.llm), static_cast<double>(all.size()),
                                        per_sample_[e], key(e));
      if (!plan.forward.messages.empty() || !plan.backward.messages.empty()) {
        throw InputError(key(e) +
                         ": its grid does not nest in the LLM's (a GPU would need "
                         "batch slices held by other GPUs); hetero-colocated models "
                         "nested grids only, as in the seed's Tables A2-A3");
      }
      boundaries_[e] = std::move(plan);
    }
  }

  void emit_boundary(int r, const PhaseStep& s) {
    if (grid_.pp() > 1) return emit_staged_boundary(r, s);
    const BoundaryPlan& plan = boundaries_.at(s.group);
    const auto& groups =
        s.phase == Phase::kEncoderForward ? plan.forward.allgathers : plan.backward.allgathers;
    for (const BoundaryGroup& g : groups) {
      std::vector<int> ranks;
      for (int gpu : g.gpus) ranks.push_back(gpu - layout(h_.llm).first_gpu);
      if (ranks.size() < 2 || std::find(ranks.begin(), ranks.end(), r) == ranks.end()) continue;
      program(r).push_back(
          Collective{CollectiveKind::kAllGather, groups_.id(ranks), 0, llm_module(), g.bytes});
    }
  }

  /// P > 1: every piece an encoder computed on stage p > 0 goes to its stage-0 GPU (and
  /// its gradient back); stage 0's TP x CP group all-gathers the replica's shard.
  void emit_staged_boundary(int r, const PhaseStep& s) {
    const int last = h_.layers[static_cast<size_t>(s.group)].back();
    const int first = llm_first_layer();
    const bool forward = s.phase == Phase::kEncoderForward;
    if (!forward && !model_.has_trainable_upstream(last)) return;  // no gradient flows back
    const int p = grid_.stage(r);
    const int module = model_.layers()[static_cast<size_t>(last)].module;
    for (int j = 0; j < m_; ++j) {
      const double bytes = piece_boundary_bytes(s.group, j);
      for (int i = 1; i < grid_.pp(); ++i) {
        if (p != 0 && p != i) continue;
        const int x = grid_.piece_at(grid_.shard(r), i);
        const int mb = j * grid_.pieces() + x;
        const int peer = p == 0 ? grid_.gpu_of(grid_.replica(r), i, grid_.shard(r))
                                : grid_.gpu_of(grid_.replica(r), 0, grid_.shard(r));
        const MessageTag tag{forward ? Pass::kF : Pass::kB, mb, first, last};
        const bool sends = forward ? p != 0 : p == 0;
        if (sends)
          program(r).push_back(Send{peer, p, sends == forward ? module : llm_module(), tag, bytes});
        else
          program(r).push_back(Recv{peer, p, forward ? llm_module() : module, tag, bytes});
      }
    }
    if (!forward || p != 0 || grid_.shards() < 2) return;
    std::vector<int> ranks;
    for (int k = 0; k < grid_.shards(); ++k) ranks.push_back(grid_.gpu_of(grid_.replica(r), 0, k));
    const double shard =
        per_sample_.at(s.group) * static_cast<double>(p_.samples.size()) / layout(h_.llm).dp;
    program(r).push_back(
        Collective{CollectiveKind::kAllGather, groups_.id(ranks), 0, llm_module(), shard});
  }

  double piece_boundary_bytes(int group, int j) const {
    const double samples =
        static_cast<double>(microbatches_[static_cast<size_t>(j)].size()) / layout(h_.llm).dp;
    return per_sample_.at(group) * samples / grid_.pieces();
  }

  int llm_module() const { return h_.groups[static_cast<size_t>(h_.llm)].modules.front(); }
  int llm_first_layer() const { return h_.layers[static_cast<size_t>(h_.llm)].front(); }

  const ShardCost& cost(int module, const ModuleLayout& l, int j, int replica, int cp_rank) {
    const auto k = std::make_tuple(module, j, replica, cp_rank);
    auto it = costs_.find(k);
    if (it == costs_.end()) {
      it = costs_
               .emplace(k, shard_cost(p_, module, l, microbatches_[static_cast<size_t>(j)], replica,
                                      cp_rank))
               .first;
    }
    return it->second;
  }

  void emit_compute(int r, const PhaseStep& s) {
    if (s.group == h_.llm) {
      // All of the microbatch's pieces arrive before the stage computes and leave after it:
      // the LLM pipelines whole microbatches, as Megatron does. Passing each piece on as
      // soon as it is done would pipeline P times finer and shrink the 1F1B bubble P-fold.
      for (LlmPart part : {LlmPart::kRecv, LlmPart::kCompute, LlmPart::kSend}) {
        for (int i = 0; i < grid_.pp(); ++i)
          emit_llm_piece(r, s.action, grid_.piece_at(grid_.shard(r), i), part);
      }
      return;
    }
    auto modules = h_.groups[static_cast<size_t>(s.group)].modules;
    if (s.action.pass != Pass::kF) std::reverse(modules.begin(), modules.end());
    const ModuleLayout& l = layout(s.group);
    const int x = grid_.piece_at(grid_.shard(r), grid_.stage(r));
    for (int module : modules) {
      const int rep = (r % (l.tp * l.cp * l.dp)) / (l.tp * l.cp);
      const int c = (r % (l.tp * l.cp)) / l.tp;
      std::vector<int> cp_ranks;
      for (int q = 0; q < l.cp; ++q) cp_ranks.push_back((rep * l.cp + q) * l.tp + r % l.tp);
      const ShardCost& sc = cost(module, l, s.action.microbatch, rep, c);
      emit_layers(r, module_layers(model_, module), sc, 1.0, cp_ranks, s.action, x, 0);
    }
  }

  enum class LlmPart { kRecv, kCompute, kSend };

  /// LLM stage p, piece x, one part of: receive from stage p - 1 (forward) or p + 1
  /// (backward), run the stage's layers, pass the result on.
  void emit_llm_piece(int r, const StageAction& a, int x, LlmPart part) {
    const ModuleLayout& l = layout(h_.llm);
    const int p = grid_.stage(r), d = grid_.replica(r), k = grid_.shard(r);
    const int mb = a.microbatch * grid_.pieces() + x;
    const auto& layers = stage_layers_[static_cast<size_t>(p)];
    const bool fwd = a.pass == Pass::kF;
    const int from = fwd ? p - 1 : p + 1;
    const int module = model_.layers()[static_cast<size_t>(layers.front())].module;
    // Megatron's scatter-gather P2P: each TP x CP GPU moves 1/K of the activation.
    auto p2p_bytes = [&](int stage) {
      return stage_output_bytes(stage, a.microbatch) / grid_.shards() / grid_.pp();
    };
    const int boundary = fwd ? layers.front() : layers.back() + 1;
    const int producer = fwd ? layers.front() - 1 : layers.back();
    if (part == LlmPart::kRecv) {
      if (from >= 0 && from < grid_.pp() && (fwd || model_.has_trainable_upstream(producer)))
        program(r).push_back(Recv{grid_.gpu_of(d, from, k),
                                  p,
                                  module,
                                  {a.pass, mb, boundary, producer},
                                  p2p_bytes(fwd ? from : p)});
      return;
    }
    if (part == LlmPart::kCompute) {
      std::vector<int> cp_ranks;
      const int t = k % l.tp;
      for (int q = 0; q < l.cp; ++q) cp_ranks.push_back(grid_.gpu_of(d, p, q * l.tp + t));
      const ShardCost& sc = cost(module, l, a.microbatch, d, k / l.tp);
      const int first = module_layers(model_, module).front();
      emit_layers(r, layers, sc, 1.0 / grid_.pp(), cp_ranks, a, x, p, first);
      return;
    }
    const int to = fwd ? p + 1 : p - 1;
    if (to < 0 || to >= grid_.pp()) return;
    const int out_boundary = fwd ? layers.back() + 1 : layers.front();
    const int out_producer = fwd ? layers.back() : layers.front() - 1;
    if (!fwd && !model_.has_trainable_upstream(out_producer)) return;
    program(r).push_back(Send{grid_.gpu_of(d, to, k),
                              p,
                              module,
                              {a.pass, mb, out_boundary, out_producer},
                              p2p_bytes(fwd ? p : to)});
  }

  /// Bytes of stage p's output (its last layer) for one replica's microbatch j.
  double stage_output_bytes(int p, int j) const {
    const int l = stage_layers_[static_cast<size_t>(p)].back();
    std::vector<const Sample*> batch;
    for (int id : replica_samples(microbatches_[static_cast<size_t>(j)], 0, layout(h_.llm).dp))
      batch.push_back(&p_.samples[static_cast<size_t>(id)]);
    return p_.cost->output_bytes(l, layer_shape(model_, l, batch));
  }

  /// A pass over `layers` (global, consecutive, of one module whose first layer is
  /// `module_first`) for IR microbatch of piece x, costs scaled by `scale`. With CP the
  /// K/V all-gather runs per layer before the forward and, for the dK/dV reduce-scatter
  /// (same ring volume), after the backward.
  void emit_layers(int r, const std::vector<int>& layers, const ShardCost& sc, double scale,
                   const std::vector<int>& cp_ranks, const StageAction& a, int x, int stage,
                   int module_first = -1) {
    const int module = model_.layers()[static_cast<size_t>(layers.front())].module;
    if (module_first < 0) module_first = layers.front();
    const int mb = a.microbatch * grid_.pieces() + x;
    const bool per_layer = sc.kv_allgather_bytes > 0;
    const int cp_group = per_layer ? groups_.id(cp_ranks) : -1;
    bool needs_backward = false;
    for (int g : layers) needs_backward = needs_backward || model_.has_trainable_upstream(g);
    auto compute = [&](size_t i, size_t end) {
      Compute op{a.pass, stage, mb, module, layers[i], layers[end - 1] + 1, 0, 0, false, 0};
      for (size_t k = i; k < end; ++k) {
        const size_t local = static_cast<size_t>(layers[k] - module_first);
        const PassCost& pc = sc.layer[local];
        if (a.pass == Pass::kF) {
          op.seconds += pc.forward_s * scale;
          if (needs_backward) op.activation_bytes += sc.activation[local] * scale;
        } else {
          op.seconds += pc.backward_s() * scale;
          op.weight_grad_s += pc.weight_grad_s * scale;
        }
      }
      op.releases_activation = a.pass != Pass::kF && needs_backward;
      program(r).push_back(op);
    };
    auto allgather = [&](size_t k) {
      if (model_.layer(layers[k]).kind != LayerKind::kTransformer) return;
      if (a.pass != Pass::kF && !model_.has_trainable_upstream(layers[k])) return;
      program(r).push_back(Collective{CollectiveKind::kAllGather, cp_group, stage, module,
                                      sc.kv_allgather_bytes * scale});
    };
    if (!per_layer) return compute(0, layers.size());
    if (a.pass == Pass::kF) {
      for (size_t k = 0; k < layers.size(); ++k) {
        allgather(k);
        compute(k, k + 1);
      }
    } else {
      for (size_t k = layers.size(); k-- > 0;) {
        compute(k, k + 1);
        allgather(k);
      }
    }
  }

  /// Gradients reduce over each module's DP x CP group (one ring per TP rank and, for the
  /// LLM, per pipeline stage).
  void emit_gradient_allreduce() {
    const ModuleLayout& llm = layout(h_.llm);
    for (int p = 0; p < grid_.pp(); ++p) {
      const double bytes = gradient_bytes(p_, stage_layers_[static_cast<size_t>(p)], llm.tp);
      if (bytes <= 0 || llm.dp * llm.cp < 2) continue;
      for (int t = 0; t < llm.tp; ++t) {
        std::vector<int> ranks;
        for (int d = 0; d < llm.dp; ++d)
          for (int c = 0; c < llm.cp; ++c) ranks.push_back(grid_.gpu_of(d, p, c * llm.tp + t));
        add_allreduce(ranks, llm_module(), p, bytes);
      }
    }
    for (auto it = h_.encoders.rbegin(); it != h_.encoders.rend(); ++it) {
      const ModuleLayout& l = layout(*it);
      const double bytes = gradient_bytes(p_, h_.layers[static_cast<size_t>(*it)], l.tp);
      if (bytes <= 0 || l.dp * l.cp < 2) continue;
      for (int t = 0; t < l.tp; ++t) {
        std::vector<int> ranks;
        for (int r = t; r < grid_.gpus(); r += l.tp) ranks.push_back(r);
        add_allreduce(ranks, h_.groups[static_cast<size_t>(*it)].owner, 0, bytes);
      }
    }
  }

  void add_allreduce(const std::vector<int>& ranks, int module, int stage, double bytes) {
    const int id = groups_.id(ranks);
    for (int r : ranks)
      program(r).push_back(Collective{CollectiveKind::kAllReduce, id, stage, module, bytes});
  }

  std::vector<Op>& program(int r) { return schedule_.programs[static_cast<size_t>(r)]; }

  const SchedulingProblem& p_;
  const Model& model_;
  HeteroGroups h_;
  Schedule schedule_;
  GroupTable groups_;
  ColocatedGrid grid_;
  int m_ = 1;
  std::vector<std::vector<int>> microbatches_;
  std::vector<std::vector<int>> stage_layers_;  ///< the LLM group's layers per stage
  std::map<int, BoundaryPlan> boundaries_;
  std::map<int, double> per_sample_;  ///< boundary bytes per sample, per encoder group
  std::map<std::tuple<int, int, int, int>, ShardCost> costs_;
};

}  // namespace

Schedule generate_hetero_colocated(const SchedulingProblem& problem) {
  Schedule s = Colocated(problem).run();
  s.scheduler = "hetero-colocated";
  return s;
}

}  // namespace loom
