// hetero-colocated (heterogeneous-parallelism-megatron §3.2, §3.3, Fig 4b, App. D): every
// module on the LLM's rank set, each with its own TP/CP/DP grid, run in three phases.
//
//   GPU r:  [enc F mb0 .. mb(m-1)] [all-gather] | LLM 1F1B: F0 B0 F1 B1 ... | [enc B ...] [DP
//   all-reduce]
//            phase 1                              phase 2                     phase 3
//
// Schedule IR representation. A rank is one GPU (modules disagree on TP, so no TP group
// can be one rank for all of them). The IR counts work per (replica, microbatch, layer),
// with replica = the LLM's DP replica; its K = TP x CP GPUs each compute their own shard
// of every microbatch (a CP slice of the sequence, a TP shard, and the encoder items of
// their own encoder replica), so shard k of microbatch j is IR microbatch j*K + k and
// "every sample exactly once" holds per shard. Sample ids are listed on the shards in
// turn. A homogeneous layout (every module on the LLM's grid) is the special case H of
// the seed's Table A3.
//
// Limits (InputError naming the module): every module on the LLM's rank set with pp = 1
// (all of the seed's long-context colocated rows, Table A3), and grids that nest (each
// destination GPU already holds its source slices, §3.2).
#include <algorithm>
#include <map>
#include <tuple>

#include "core/errors.hpp"
#include "schedulers/hetero_boundary.hpp"
#include "schedulers/hetero_common.hpp"
#include "schedulers/hetero_order.hpp"

namespace loom {
namespace {

/// Coordinates of GPU offset r in a pp = 1 layout (core/layout.hpp order: DP, CP, TP).
struct Coord {
  int dp = 0, cp = 0, tp = 0;
};
Coord coord(const ModuleLayout& l, int r) {
  const int per = l.tp * l.cp;
  return {r / per, (r % per) / l.tp, r % l.tp};
}

class Colocated {
 public:
  explicit Colocated(const SchedulingProblem& p)
      : p_(p), model_(*p.model), h_(hetero_groups(p, kName, true)), groups_(&schedule_) {}

  Schedule run() {
    check_layouts();
    const ModuleLayout& llm = layout(h_.llm);
    gpus_ = llm.gpus;
    k_ = llm.gpus / llm.dp;
    m_ = p_.schedule.microbatches;
    microbatches_ = global_microbatches(p_, llm.dp);
    place();
    plan_boundaries();
    const auto steps = three_phase_order(h_.encoders, h_.llm, one_f_one_b_order(0, m_), m_);
    for (int r = 0; r < gpus_; ++r) {
      for (const PhaseStep& s : steps) s.boundary ? emit_boundary(r, s) : emit_compute(r, s);
    }
    emit_gradient_allreduce();
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
      if (l.pp != 1) {
        throw InputError(key(static_cast<int>(g)) + ".pp: hetero-colocated models pp = 1 " +
                         "(the seed's colocated long-context layouts, Table A3), got " +
                         std::to_string(l.pp) +
                         (h_.derived ? " (derived from parallel.pp: set parallel.pp = 1, or give "
                                       "[parallel.modules] tables)"
                                     : ""));
      }
    }
  }

  void place() {
    for (const Module& mod : model_.modules()) schedule_.module_names.push_back(mod.name);
    schedule_.num_stages = 1;
    schedule_.microbatches = m_ * k_;
    const ModuleLayout& llm = layout(h_.llm);
    schedule_.samples.assign(static_cast<size_t>(llm.dp),
                             std::vector<std::vector<int>>(static_cast<size_t>(m_ * k_)));
    for (int d = 0; d < llm.dp; ++d) {
      for (int j = 0; j < m_; ++j) {
        const auto ids = replica_samples(microbatches_[static_cast<size_t>(j)], d, llm.dp);
        for (size_t i = 0; i < ids.size(); ++i) {
          schedule_.samples[static_cast<size_t>(d)][static_cast<size_t>(j * k_) + i % k_].push_back(
              ids[i]);
        }
      }
    }
    for (int r = 0; r < gpus_; ++r) {
      schedule_.ranks.push_back({llm.first_gpu + r, 1, r / k_});
      StaticMemory mem;
      for (size_t g = 0; g < h_.groups.size(); ++g) {
        const StaticMemory s = shard_static_memory(p_, h_.layers[g], h_.groups[g].layout);
        mem.parameters += s.parameters;
        mem.gradients += s.gradients;
        mem.optimizer += s.optimizer;
      }
      schedule_.static_memory.push_back(mem);
    }
    schedule_.programs.resize(static_cast<size_t>(gpus_));
  }

  /// One packed boundary tensor per encoder group for the whole iteration (phase 1 runs
  /// the encoder once over all local microbatches).
  void plan_boundaries() {
    std::vector<int> all;
    for (const auto& mb : microbatches_) all.insert(all.end(), mb.begin(), mb.end());
    for (int e : h_.encoders) {
      const int last = h_.layers[static_cast<size_t>(e)].back();
      const double per_sample = boundary_bytes_per_sample(p_, last, all);
      BoundaryPlan plan = plan_boundary(layout(e), layout(h_.llm), static_cast<double>(all.size()),
                                        per_sample, key(e));
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
    const BoundaryPlan& plan = boundaries_.at(s.group);
    const auto& groups =
        s.phase == Phase::kEncoderForward ? plan.forward.allgathers : plan.backward.allgathers;
    const int llm_module = h_.groups[static_cast<size_t>(h_.llm)].modules.front();
    const int first = layout(h_.llm).first_gpu;
    for (const BoundaryGroup& g : groups) {
      std::vector<int> ranks;
      for (int gpu : g.gpus) ranks.push_back(gpu - first);
      if (ranks.size() < 2 || std::find(ranks.begin(), ranks.end(), r) == ranks.end()) continue;
      program(r).push_back(
          Collective{CollectiveKind::kAllGather, groups_.id(ranks), 0, llm_module, g.bytes});
    }
  }

  const ShardCost& cost(int module, const ModuleLayout& l, int j, Coord c) {
    const auto key = std::make_tuple(module, j, c.dp, c.cp);
    auto it = costs_.find(key);
    if (it == costs_.end()) {
      it = costs_
               .emplace(key, shard_cost(p_, module, l, microbatches_[static_cast<size_t>(j)], c.dp,
                                        c.cp))
               .first;
    }
    return it->second;
  }

  void emit_compute(int r, const PhaseStep& s) {
    auto modules = h_.groups[static_cast<size_t>(s.group)].modules;
    if (s.action.pass != Pass::kF) std::reverse(modules.begin(), modules.end());
    for (int module : modules) emit_module(r, s.group, module, s.action);
  }

  /// One module's pass on GPU r. With CP the K/V all-gather runs per layer before the
  /// forward and, for the dK/dV reduce-scatter (same ring volume), after the backward.
  void emit_module(int r, int group, int module, const StageAction& a) {
    const ModuleLayout& l = layout(group);
    const Coord c = coord(l, r);
    const ShardCost& sc = cost(module, l, a.microbatch, c);
    const std::vector<int> layers = module_layers(model_, module);
    const int mb = a.microbatch * k_ + r % k_;
    const bool per_layer = sc.kv_allgather_bytes > 0;
    int cp_group = -1;
    if (per_layer) {
      std::vector<int> ranks;
      for (int q = 0; q < l.cp; ++q) ranks.push_back((c.dp * l.cp + q) * l.tp + c.tp);
      cp_group = groups_.id(ranks);
    }
    bool needs_backward = false;
    for (int g : layers) needs_backward = needs_backward || model_.has_trainable_upstream(g);
    auto compute = [&](size_t i, size_t end) {
      Compute op{a.pass, 0, mb, module, layers[i], layers[end - 1] + 1, 0, 0, false, 0};
      for (size_t k = i; k < end; ++k) {
        const PassCost& pc = sc.layer[k];
        if (a.pass == Pass::kF) {
          op.seconds += pc.forward_s;
          if (needs_backward) op.activation_bytes += sc.activation[k];
        } else {
          op.seconds += pc.backward_s();
          op.weight_grad_s += pc.weight_grad_s;
        }
      }
      op.releases_activation = a.pass != Pass::kF && needs_backward;
      program(r).push_back(op);
    };
    auto allgather = [&](size_t k) {
      if (model_.layer(layers[k]).kind != LayerKind::kTransformer) return;
      if (a.pass != Pass::kF && !model_.has_trainable_upstream(layers[k])) return;
      program(r).push_back(
          Collective{CollectiveKind::kAllGather, cp_group, 0, module, sc.kv_allgather_bytes});
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

  /// Gradients of each module group reduce over its DP x CP group (one ring per TP rank).
  void emit_gradient_allreduce() {
    std::vector<int> order = {h_.llm};
    order.insert(order.end(), h_.encoders.rbegin(), h_.encoders.rend());
    for (int g : order) {
      const ModuleLayout& l = layout(g);
      const double bytes = gradient_bytes(p_, h_.layers[static_cast<size_t>(g)], l.tp);
      if (bytes <= 0 || l.dp * l.cp < 2) continue;
      const int module = h_.groups[static_cast<size_t>(g)].owner;
      for (int t = 0; t < l.tp; ++t) {
        std::vector<int> ranks;
        for (int r = t; r < gpus_; r += l.tp) ranks.push_back(r);
        const int id = groups_.id(ranks);
        for (int r : ranks)
          program(r).push_back(Collective{CollectiveKind::kAllReduce, id, 0, module, bytes});
      }
    }
  }

  std::vector<Op>& program(int r) { return schedule_.programs[static_cast<size_t>(r)]; }

  const SchedulingProblem& p_;
  const Model& model_;
  HeteroGroups h_;
  Schedule schedule_;
  GroupTable groups_;
  int gpus_ = 0, k_ = 1, m_ = 1;
  std::vector<std::vector<int>> microbatches_;
  std::map<int, BoundaryPlan> boundaries_;
  std::map<std::tuple<int, int, int, int>, ShardCost> costs_;
};

}  // namespace

Schedule generate_hetero_colocated(const SchedulingProblem& problem) {
  Schedule s = Colocated(problem).run();
  s.scheduler = "hetero-colocated";
  return s;
}

}  // namespace loom
