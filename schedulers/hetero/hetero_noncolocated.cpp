// hetero-noncolocated (heterogeneous-parallelism-megatron §3.1, §3.3, Fig 4a, Fig 14,
// App. D): each encoder branch and the LLM on disjoint rank sets with their own TP/PP/DP,
// pipelined by graph-aware 1F1B; boundary tensors cross between the boundary leaders.
//
//   vision (DP 4, GPUs 4-7)          LLM (TP 2, PP 2, GPUs 0-3)
//   E0 E1 E2 E3 --leaders, one message per shard pair--> L0 (GPUs 0,1) -> L1 (GPUs 2,3)
//
// Schedule IR representation. A rank is one pipeline stage of one replica of one module
// group: its TP group (tensor parallelism stays inside the rank, as in the single-layout
// pipeline), so the rank is the boundary leader and its local TP broadcast of a received
// boundary shard is time on that rank: it is added to the compute that consumes the shard
// (a pipelined NVLink broadcast: latency + bytes / bandwidth). Modules disagree on DP, so
// the IR counts work per batch *piece*: K = the largest DP of any module, a microbatch
// has K pieces, module replica d of DP_m computes pieces [d K/DP_m, (d+1) K/DP_m) one
// after another (piece k of microbatch j is IR microbatch j*K + k, all in IR replica 0).
// The boundary then sends exactly one message per overlapping (source shard, destination
// shard) pair per piece - the leader routes of §3.1, one per finest shard.
//
// Limits (InputError naming the module): cp = 1 (context parallelism is simulated by
// hetero-colocated), data-parallel degrees that divide the largest one.
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

class NonColocated {
 public:
  explicit NonColocated(const SchedulingProblem& p)
      : p_(p), model_(*p.model), h_(hetero_groups(p, kName, false)), groups_(&schedule_) {}

  Schedule run() {
    check_layouts();
    m_ = p_.schedule.microbatches;
    microbatches_ = global_microbatches(p_, layout(h_.llm).dp);
    place();
    partition();
    std::vector<StageGraphGroup> graph;
    for (size_t g = 0; g < h_.groups.size(); ++g)
      graph.push_back({h_.groups[g].layout.pp, h_.consumers[g]});
    const auto orders = graph_aware_1f1b(graph, m_);
    for (int g = 0; g < num_groups(); ++g) {
      const ModuleLayout& l = layout(g);
      for (int d = 0; d < l.dp; ++d) {
        for (int s = 0; s < l.pp; ++s) {
          for (const StageAction& a : orders[static_cast<size_t>(g)][static_cast<size_t>(s)]) {
            for (int k = d * k_ / l.dp; k < (d + 1) * k_ / l.dp; ++k) emit(g, d, s, a, k);
          }
        }
      }
    }
    emit_gradient_allreduce();
    add_optimizer_steps(p_, schedule_);
    return std::move(schedule_);
  }

 private:
  static constexpr const char* kName = "hetero-noncolocated";

  int num_groups() const { return static_cast<int>(h_.groups.size()); }
  const ModuleLayout& layout(int g) const { return h_.groups[static_cast<size_t>(g)].layout; }
  std::string key(int g) const {
    return "parallel.modules." + model_.module(h_.groups[static_cast<size_t>(g)].owner).name;
  }

  void check_layouts() {
    for (int g = 0; g < num_groups(); ++g) {
      if (layout(g).cp != 1) {
        throw InputError(key(g) +
                         ".cp: hetero-noncolocated models cp = 1 (context "
                         "parallelism is simulated by hetero-colocated), got " +
                         std::to_string(layout(g).cp));
      }
      k_ = std::max(k_, layout(g).dp);
    }
    for (int g = 0; g < num_groups(); ++g) {
      for (int v : h_.consumers[static_cast<size_t>(g)]) {
        if (colocated(layout(g), layout(v))) {
          throw InputError(key(g) + ": shares its rank set with '" +
                           model_.module(h_.groups[static_cast<size_t>(v)].owner).name +
                           "'; hetero-noncolocated needs disjoint rank sets "
                           "(use hetero-colocated)");
        }
        boundary_kind(layout(g).dp, layout(v).dp, key(g));
      }
      if (k_ % layout(g).dp != 0) {
        throw InputError(key(g) + ".dp: " + std::to_string(layout(g).dp) +
                         " does not divide the largest dp of the model (" + std::to_string(k_) +
                         "): batch shards would not nest");
      }
    }
  }

  int rank_of(int g, int d, int s) const {
    return rank_base_[static_cast<size_t>(g)] + d * layout(g).pp + s;
  }
  int replica_of(int g, int piece) const { return piece / (k_ / layout(g).dp); }

  void place() {
    for (const Module& mod : model_.modules()) schedule_.module_names.push_back(mod.name);
    schedule_.microbatches = m_ * k_;
    int stages = 0;
    for (int g = 0; g < num_groups(); ++g) {
      const ModuleLayout& l = layout(g);
      rank_base_.push_back(static_cast<int>(schedule_.ranks.size()));
      stage_base_.push_back(stages);
      stages += l.pp;
      for (int d = 0; d < l.dp; ++d) {
        for (int s = 0; s < l.pp; ++s) schedule_.ranks.push_back({l.stage_gpu(d, s), l.tp, 0});
      }
    }
    schedule_.num_stages = stages;
    schedule_.programs.resize(schedule_.ranks.size());
    schedule_.samples.assign(1, std::vector<std::vector<int>>(static_cast<size_t>(m_ * k_)));
    const int dp = layout(h_.llm).dp;
    const int per = k_ / dp;  // pieces per LLM replica
    for (int j = 0; j < m_; ++j) {
      for (int d = 0; d < dp; ++d) {
        const auto ids = replica_samples(microbatches_[static_cast<size_t>(j)], d, dp);
        for (size_t i = 0; i < ids.size(); ++i) {
          const size_t piece = static_cast<size_t>(j * k_ + d * per) + i % static_cast<size_t>(per);
          schedule_.samples[0][piece].push_back(ids[i]);
        }
      }
    }
  }

  /// Each group's layers in PP stages by the min-bottleneck DP of Eq 3.5 on its own costs.
  void partition() {
    std::vector<const Sample*> first;
    for (int id : microbatches_.front()) first.push_back(&p_.samples[static_cast<size_t>(id)]);
    stage_of_.assign(static_cast<size_t>(model_.num_layers()), {0, 0});
    stage_layers_.resize(h_.groups.size());
    for (int g = 0; g < num_groups(); ++g) {
      const auto& layers = h_.layers[static_cast<size_t>(g)];
      const auto all =
          layer_costs(model_, *p_.cost, p_.schedule.partition_view, first, layout(g).tp);
      std::vector<double> costs;
      for (int l : layers) costs.push_back(all[static_cast<size_t>(l)]);
      const auto ranges = partition_min_bottleneck(costs, layout(g).pp);
      for (int s = 0; s < layout(g).pp; ++s) {
        std::vector<int> stage;
        for (int i = ranges[static_cast<size_t>(s)].first; i < ranges[static_cast<size_t>(s)].end;
             ++i) {
          const int l = layers[static_cast<size_t>(i)];
          stage.push_back(l);
          stage_of_[static_cast<size_t>(l)] = {g, s};
        }
        stage_layers_[static_cast<size_t>(g)].push_back(stage);
        const StaticMemory mem = shard_static_memory(p_, stage, layout(g));
        for (int d = 0; d < layout(g).dp; ++d) static_mem_[rank_of(g, d, s)] = mem;
      }
    }
    for (int r = 0; r < schedule_.num_ranks(); ++r)
      schedule_.static_memory.push_back(static_mem_[r]);
  }

  /// Per-piece cost of every layer of module `module` for replica d of microbatch j.
  const ShardCost& cost(int g, int module, int j, int d) {
    const auto k = std::make_tuple(module, j, d);
    auto it = costs_.find(k);
    if (it == costs_.end()) {
      ShardCost sc = shard_cost(p_, module, layout(g), microbatches_[static_cast<size_t>(j)], d, 0);
      const double f = static_cast<double>(layout(g).dp) / k_;  // one piece of the replica
      for (PassCost& c : sc.layer) c = {c.forward_s * f, c.input_grad_s * f, c.weight_grad_s * f};
      for (double& a : sc.activation) a *= f;
      it = costs_.emplace(k, std::move(sc)).first;
    }
    return it->second;
  }

  /// Bytes of one piece of layer l's output for microbatch j.
  double piece_bytes(int l, int j) const {
    std::vector<const Sample*> batch;
    for (int id : microbatches_[static_cast<size_t>(j)])
      batch.push_back(&p_.samples[static_cast<size_t>(id)]);
    return p_.cost->output_bytes(l, layer_shape(model_, l, batch)) / k_;
  }

  /// The local TP broadcast of a boundary shard received by a leader (§3.1), on NVLink.
  double broadcast_s(int g, double shard_bytes) const {
    if (layout(g).tp < 2) return 0.0;
    const LinkSpec& link = p_.cluster->intra_node;
    return link.latency + shard_bytes / link.bandwidth;
  }

  void emit(int g, int d, int s, const StageAction& a, int piece);
  void emit_forward(int g, int d, int s, int j, int piece);
  void emit_backward(int g, int d, int s, int j, int piece);
  void emit_gradient_allreduce();

  std::vector<Op>& program(int g, int d, int s) {
    return schedule_.programs[static_cast<size_t>(rank_of(g, d, s))];
  }
  /// Runs of one module inside a stage's layers.
  std::vector<std::vector<int>> segments(int g, int s) const;

  const SchedulingProblem& p_;
  const Model& model_;
  HeteroGroups h_;
  Schedule schedule_;
  GroupTable groups_;
  int m_ = 1, k_ = 1;
  std::vector<std::vector<int>> microbatches_;
  std::vector<int> rank_base_, stage_base_;
  std::vector<std::pair<int, int>> stage_of_;  ///< layer -> (group, stage)
  std::vector<std::vector<std::vector<int>>> stage_layers_;
  std::map<int, StaticMemory> static_mem_;
  std::map<std::tuple<int, int, int>, ShardCost> costs_;
};

std::vector<std::vector<int>> NonColocated::segments(int g, int s) const {
  std::vector<std::vector<int>> out;
  for (int l : stage_layers_[static_cast<size_t>(g)][static_cast<size_t>(s)]) {
    const int module = model_.layers()[static_cast<size_t>(l)].module;
    if (out.empty() || model_.layers()[static_cast<size_t>(out.back().back())].module != module ||
        out.back().back() + 1 != l)
      out.push_back({l});
    else
      out.back().push_back(l);
  }
  return out;
}

void NonColocated::emit(int g, int d, int s, const StageAction& a, int piece) {
  if (a.pass == Pass::kF)
    emit_forward(g, d, s, a.microbatch, piece);
  else
    emit_backward(g, d, s, a.microbatch, piece);
}

void NonColocated::emit_forward(int g, int d, int s, int j, int piece) {
  const int mb = j * k_ + piece;
  for (const std::vector<int>& seg : segments(g, s)) {
    const int module = model_.layers()[static_cast<size_t>(seg.front())].module;
    const ShardCost& sc = cost(g, module, j, d);
    const int local0 = model_.layers()[static_cast<size_t>(seg.front())].local_index;
    double extra = 0;
    for (int prod : producer_layers(model_, seg.front())) {
      const auto [pg, ps] = stage_of_[static_cast<size_t>(prod)];
      if (pg == g && ps == s) continue;
      const double bytes = piece_bytes(prod, j);
      program(g, d, s).push_back(Recv{rank_of(pg, replica_of(pg, piece), ps),
                                      stage_base_[static_cast<size_t>(g)] + s,
                                      module,
                                      {Pass::kF, mb, seg.front(), prod},
                                      bytes});
      if (pg != g) extra += broadcast_s(g, bytes);
    }
    bool needs_backward = false;
    for (int l : seg) needs_backward = needs_backward || model_.has_trainable_upstream(l);
    Compute c{Pass::kF,    stage_base_[static_cast<size_t>(g)] + s,
              mb,          module,
              seg.front(), seg.back() + 1,
              extra,       0,
              false,       0};
    for (size_t i = 0; i < seg.size(); ++i) {
      const size_t local = static_cast<size_t>(local0) + i;
      c.seconds += sc.layer[local].forward_s;
      if (needs_backward) c.activation_bytes += sc.activation[local];
    }
    program(g, d, s).push_back(c);
    for (int cons : consumer_layers(model_, seg.back())) {
      const auto [cg, cs] = stage_of_[static_cast<size_t>(cons)];
      if (cg == g && cs == s) continue;
      program(g, d, s).push_back(Send{rank_of(cg, replica_of(cg, piece), cs),
                                      stage_base_[static_cast<size_t>(g)] + s,
                                      module,
                                      {Pass::kF, mb, cons, seg.back()},
                                      piece_bytes(seg.back(), j)});
    }
  }
}

void NonColocated::emit_backward(int g, int d, int s, int j, int piece) {
  const int mb = j * k_ + piece;
  auto segs = segments(g, s);
  std::reverse(segs.begin(), segs.end());
  for (const std::vector<int>& seg : segs) {
    const int module = model_.layers()[static_cast<size_t>(seg.front())].module;
    const ShardCost& sc = cost(g, module, j, d);
    const int local0 = model_.layers()[static_cast<size_t>(seg.front())].local_index;
    const int last = seg.back();
    double extra = 0;
    if (model_.has_trainable_upstream(last)) {
      for (int cons : consumer_layers(model_, last)) {
        const auto [cg, cs] = stage_of_[static_cast<size_t>(cons)];
        if (cg == g && cs == s) continue;
        const double bytes = piece_bytes(last, j);
        program(g, d, s).push_back(Recv{rank_of(cg, replica_of(cg, piece), cs),
                                        stage_base_[static_cast<size_t>(g)] + s,
                                        module,
                                        {Pass::kB, mb, cons, last},
                                        bytes});
        if (cg != g) extra += broadcast_s(g, bytes);
      }
    }
    bool needs_backward = false;
    for (int l : seg) needs_backward = needs_backward || model_.has_trainable_upstream(l);
    Compute c{Pass::kB,
              stage_base_[static_cast<size_t>(g)] + s,
              mb,
              module,
              seg.front(),
              last + 1,
              extra,
              0,
              needs_backward,
              0};
    for (size_t i = 0; i < seg.size(); ++i) {
      const PassCost& pc = sc.layer[static_cast<size_t>(local0) + i];
      c.seconds += pc.backward_s();
      c.weight_grad_s += pc.weight_grad_s;
    }
    program(g, d, s).push_back(c);
    for (int prod : producer_layers(model_, seg.front())) {
      const auto [pg, ps] = stage_of_[static_cast<size_t>(prod)];
      if ((pg == g && ps == s) || !model_.has_trainable_upstream(prod)) continue;
      program(g, d, s).push_back(Send{rank_of(pg, replica_of(pg, piece), ps),
                                      stage_base_[static_cast<size_t>(g)] + s,
                                      module,
                                      {Pass::kB, mb, seg.front(), prod},
                                      piece_bytes(prod, j)});
    }
  }
}

/// Each stage's trainable gradients reduce over the module's DP replicas of that stage.
void NonColocated::emit_gradient_allreduce() {
  for (int g = 0; g < num_groups(); ++g) {
    const ModuleLayout& l = layout(g);
    if (l.dp < 2) continue;
    for (int s = 0; s < l.pp; ++s) {
      const auto& layers = stage_layers_[static_cast<size_t>(g)][static_cast<size_t>(s)];
      const double bytes = gradient_bytes(p_, layers, l.tp);
      if (bytes <= 0) continue;
      std::vector<int> ranks;
      for (int d = 0; d < l.dp; ++d) ranks.push_back(rank_of(g, d, s));
      const int id = groups_.id(ranks);
      const int module = model_.layers()[static_cast<size_t>(layers.front())].module;
      for (int d = 0; d < l.dp; ++d) {
        program(g, d, s).push_back(Collective{CollectiveKind::kAllReduce, id,
                                              stage_base_[static_cast<size_t>(g)] + s, module,
                                              bytes});
      }
    }
  }
}

}  // namespace

Schedule generate_hetero_noncolocated(const SchedulingProblem& problem) {
  Schedule s = NonColocated(problem).run();
  s.scheduler = "hetero-noncolocated";
  return s;
}

}  // namespace loom
