// DIP-like: the iteration's task DAG (F and B of every chunk for every microbatch), the
// search, and the lowering of the chosen per-rank task orders into the Schedule IR.
// Messages: a chunk's output crosses to the rank of each consuming chunk. A receiver takes
// the messages of one edge in the order the sender sent them (the IR matches the k-th
// send with the k-th receive), so before a task that needs message x it receives every
// message sent before x on that edge; the greedy timeline the orders come from is an
// execution in which all of them have been sent, so this cannot deadlock.
#include <algorithm>
#include <deque>
#include <map>
#include <set>
#include <tuple>

#include "core/errors.hpp"
#include "schedulers/dip.hpp"

namespace loom {
namespace {

struct LayerCosts {
  std::vector<PassCost> pass;
  std::vector<double> activation, output;
};

class DipLowering {
 public:
  explicit DipLowering(const SchedulingProblem& p)
      : p_(p), model_(*p.model), layout_(dip_layout(p)) {
    P_ = layout_.ranks;
    chunk_of_layer_.assign(static_cast<size_t>(model_.num_layers()), 0);
    for (size_t x = 0; x < layout_.chunks.size(); ++x)
      for (const Segment& seg : layout_.chunks[x].segments)
        for (int l = seg.first; l < seg.end; ++l)
          chunk_of_layer_[static_cast<size_t>(l)] = static_cast<int>(x);
    dp_ = p.parallel.dp;
    m_ = p.schedule.microbatches;
    tp_ = p.parallel.tp;
  }

  Schedule run(DipSearchStats* stats) {
    place();
    cost();
    std::vector<std::vector<DipTask>> replicas;
    for (int d = 0; d < dp_; ++d) replicas.push_back(tasks(d));
    fill_static_memory();
    std::vector<double> static_bytes;
    for (int r = 0; r < P_; ++r)
      static_bytes.push_back(s_.static_memory[static_cast<size_t>(r)].total());
    const double cap = p_.schedule.dip_memory_cap_gb > 0 ? p_.schedule.dip_memory_cap_gb * 1e9
                                                         : p_.cluster->gpu.memory_bytes;
    const int modalities = static_cast<int>(layout_.k.size());
    const std::vector<double> unit_pos = dip_search(
        replicas, layout_, m_, modalities, static_bytes, cap, p_.schedule.dip_search_iterations,
        p_.schedule.dip_search_budget_s, static_cast<std::uint64_t>(p_.schedule.dip_seed), stats);
    for (int d = 0; d < dp_; ++d) {
      const auto& tasks = replicas[static_cast<size_t>(d)];
      std::vector<double> prio;
      for (const DipTask& t : tasks) {
        const int unit = t.microbatch * modalities + chunk(t.chunk).modality;
        prio.push_back(unit_pos[static_cast<size_t>(unit)] * 1e4 + t.chunk);
      }
      const DipOrder order = dip_greedy(tasks, layout_.chunks, P_, static_bytes, cap, prio);
      emit(d, tasks, order);
    }
    add_allreduce();
    return std::move(s_);
  }

 private:
  const DipChunk& chunk(int x) const { return layout_.chunks[static_cast<size_t>(x)]; }
  int rank(int d, int r) const { return d * P_ + r; }
  bool needs_backward(const Segment& seg) const {
    for (int l = seg.first; l < seg.end; ++l)
      if (model_.has_trainable_upstream(l)) return true;
    return false;
  }
  const LayerCosts& costs(int d, int mb) const { return costs_[static_cast<size_t>(d * m_ + mb)]; }

  void place() {
    const Cluster& c = *p_.cluster;
    if (tp_ > c.gpus_per_node || c.gpus_per_node % tp_ != 0)
      throw InputError("parallel.tp: " + std::to_string(tp_) +
                       " must divide cluster.gpus_per_node (" + std::to_string(c.gpus_per_node) +
                       ")");
    if (P_ * dp_ * tp_ > c.num_gpus())
      throw InfeasibleError("parallel: pp x dp x tp = " + std::to_string(P_ * dp_ * tp_) +
                            " GPUs, but the cluster has " + std::to_string(c.num_gpus()));
    const size_t needed = static_cast<size_t>(dp_) * m_ * p_.schedule.microbatch_size;
    if (p_.samples.size() < needed)
      throw InputError(
          "workload: dip needs dp x microbatches x microbatch_size = " + std::to_string(needed) +
          " samples, the workload has " + std::to_string(p_.samples.size()));
    s_.scheduler = "dip";
    for (const Module& mod : model_.modules()) s_.module_names.push_back(mod.name);
    // Ranks per replica, as the other lowerings; Compute::stage carries the chunk (virtual
    // stage) index.
    s_.num_stages = P_;
    s_.microbatches = m_;
    s_.programs.resize(static_cast<size_t>(P_ * dp_));
    for (int d = 0; d < dp_; ++d)
      for (int r = 0; r < P_; ++r) s_.ranks.push_back({rank(d, r) * tp_, tp_, d});
    s_.samples.assign(static_cast<size_t>(dp_),
                      std::vector<std::vector<int>>(static_cast<size_t>(m_)));
    const int mbs = p_.schedule.microbatch_size;
    for (int d = 0; d < dp_; ++d)
      for (int j = 0; j < m_; ++j)
        for (int k = 0; k < mbs; ++k)
          s_.samples[static_cast<size_t>(d)][static_cast<size_t>(j)].push_back((d * m_ + j) * mbs +
                                                                               k);
  }

  void cost() {
    for (int d = 0; d < dp_; ++d) {
      for (int j = 0; j < m_; ++j) {
        std::vector<const Sample*> batch;
        for (int id : s_.samples[static_cast<size_t>(d)][static_cast<size_t>(j)])
          batch.push_back(&p_.samples[static_cast<size_t>(id)]);
        LayerCosts lc;
        for (int l = 0; l < model_.num_layers(); ++l) {
          const MicrobatchShape shape = layer_shape(model_, l, batch);
          lc.pass.push_back(effective_cost(*p_.cost, model_, l, shape, tp_));
          lc.activation.push_back(p_.cost->activation_bytes(l, shape, tp_));
          lc.output.push_back(p_.cost->output_bytes(l, shape));
        }
        costs_.push_back(std::move(lc));
      }
    }
  }

  /// Task t = (mb * chunks + chunk) * 2 + (0 forward | 1 backward).
  std::vector<DipTask> tasks(int d) const {
    const int nc = static_cast<int>(layout_.chunks.size());
    std::vector<DipTask> out(static_cast<size_t>(m_ * nc * 2));
    auto id = [&](int j, int x, bool fwd) { return (j * nc + x) * 2 + (fwd ? 0 : 1); };
    for (int j = 0; j < m_; ++j) {
      const LayerCosts& lc = costs(d, j);
      for (int x = 0; x < nc; ++x) {
        DipTask& f = out[static_cast<size_t>(id(j, x, true))];
        DipTask& b = out[static_cast<size_t>(id(j, x, false))];
        f = {x, j, true, 0, 0, {}};
        b = {x, j, false, 0, 0, {id(j, x, true)}};
        for (const Segment& seg : chunk(x).segments) {
          for (int l = seg.first; l < seg.end; ++l) {
            f.seconds += lc.pass[static_cast<size_t>(l)].forward_s;
            b.seconds += lc.pass[static_cast<size_t>(l)].backward_s();
            if (needs_backward(seg)) f.activation_bytes += lc.activation[static_cast<size_t>(l)];
          }
        }
        b.activation_bytes = f.activation_bytes;
        for (int y : chunk(x).producers) f.deps.push_back(id(j, y, true));
        for (int y : chunk(x).gradients) b.deps.push_back(id(j, y, false));
      }
    }
    return out;
  }

  using EdgeKey = std::tuple<int, int, int, int, int>;  // from, to, pass, producer, consumer
  struct Edge {
    std::deque<int> pending;  ///< microbatches sent and not yet received, in send order
    std::set<int> received;
  };

  void emit(int d, const std::vector<DipTask>& tasks, const DipOrder& order);
  void emit_task(int d, int r, const DipTask& t, std::map<EdgeKey, Edge>& sent, bool record);
  void fill_static_memory();
  void add_allreduce();

  const SchedulingProblem& p_;
  const Model& model_;
  DipLayout layout_;
  int P_ = 1, dp_ = 1, m_ = 1, tp_ = 1;
  Schedule s_;
  std::vector<LayerCosts> costs_;
  std::vector<int> chunk_of_layer_;
};

void DipLowering::emit(int d, const std::vector<DipTask>& tasks, const DipOrder& order) {
  std::map<EdgeKey, Edge> sent;
  for (int pass = 0; pass < 2; ++pass) {  // 0: record the send order; 1: write programs
    for (int r = 0; r < P_; ++r)
      for (int t : order.per_rank[static_cast<size_t>(r)])
        emit_task(d, r, tasks[static_cast<size_t>(t)], sent, pass == 0);
  }
}

void DipLowering::emit_task(int d, int r, const DipTask& t, std::map<EdgeKey, Edge>& sent,
                            bool record) {
  auto& program = s_.programs[static_cast<size_t>(rank(d, r))];
  const LayerCosts& lc = costs(d, t.microbatch);
  const int mb = t.microbatch;
  auto rank_of = [&](int layer) { return chunk(chunk_of_layer_[static_cast<size_t>(layer)]).rank; };
  // Receive on edge (from -> r) up to and including microbatch mb, in the sender's order.
  auto receive = [&](int from, Pass pass, int producer, int consumer, int module) {
    if (record) return;
    Edge& edge = sent[{from, r, static_cast<int>(pass), producer, consumer}];
    if (edge.received.count(mb)) return;  // taken earlier, in the sender's order
    while (!edge.pending.empty()) {
      const int k = edge.pending.front();
      edge.pending.pop_front();
      edge.received.insert(k);
      program.push_back(Recv{rank(d, from),
                             t.chunk,
                             module,
                             {pass, k, consumer, producer},
                             costs(d, k).output[static_cast<size_t>(producer)]});
      if (k == mb) return;
    }
    throw std::logic_error("dip lowering: a message is received before it is sent");
  };
  auto send = [&](int to, Pass pass, int producer, int consumer, int module) {
    if (record) {
      sent[{r, to, static_cast<int>(pass), producer, consumer}].pending.push_back(mb);
      return;
    }
    program.push_back(Send{rank(d, to),
                           t.chunk,
                           module,
                           {pass, mb, consumer, producer},
                           lc.output[static_cast<size_t>(producer)]});
  };
  std::vector<Segment> segs = chunk(t.chunk).segments;
  if (!t.forward) std::reverse(segs.begin(), segs.end());
  for (const Segment& seg : segs) {
    const int last = seg.end - 1;
    Compute c{t.forward ? Pass::kF : Pass::kB,
              t.chunk,
              mb,
              seg.module,
              seg.first,
              seg.end,
              0,
              0,
              false,
              0};
    for (int l = seg.first; l < seg.end; ++l) {
      const PassCost& pc = lc.pass[static_cast<size_t>(l)];
      c.seconds += t.forward ? pc.forward_s : pc.backward_s();
      if (!t.forward) c.weight_grad_s += pc.weight_grad_s;
      if (t.forward && needs_backward(seg))
        c.activation_bytes += lc.activation[static_cast<size_t>(l)];
    }
    c.releases_activation = !t.forward && needs_backward(seg);
    if (t.forward) {
      for (int prod : layer_producers(model_, seg.first))
        if (rank_of(prod) != r) receive(rank_of(prod), Pass::kF, prod, seg.first, seg.module);
      if (!record) program.push_back(c);
      for (int cons : layer_consumers(model_, last))
        if (rank_of(cons) != r) send(rank_of(cons), Pass::kF, last, cons, seg.module);
    } else {
      if (model_.has_trainable_upstream(last))
        for (int cons : layer_consumers(model_, last))
          if (rank_of(cons) != r) receive(rank_of(cons), Pass::kB, last, cons, seg.module);
      if (!record) program.push_back(c);
      for (int prod : layer_producers(model_, seg.first))
        if (rank_of(prod) != r && model_.has_trainable_upstream(prod))
          send(rank_of(prod), Pass::kB, prod, seg.first, seg.module);
    }
  }
}

void DipLowering::fill_static_memory() {
  std::vector<StaticMemory> per_rank(static_cast<size_t>(P_));
  for (const DipChunk& ch : layout_.chunks) {
    StaticMemory& mem = per_rank[static_cast<size_t>(ch.rank)];
    for (const Segment& seg : ch.segments) {
      for (int l = seg.first; l < seg.end; ++l) {
        const double params = p_.cost->parameters(l) / tp_;
        mem.parameters += params * model_.layer(l).dtype_bytes;
        if (!model_.layer(l).frozen) {
          mem.gradients += params * p_.memory.gradient_bytes_per_param;
          mem.optimizer += params * p_.memory.optimizer_bytes_per_param;
        }
      }
    }
  }
  for (int d = 0; d < dp_; ++d)
    for (int r = 0; r < P_; ++r) s_.static_memory.push_back(per_rank[static_cast<size_t>(r)]);
}

void DipLowering::add_allreduce() {
  if (dp_ <= 1) return;
  for (int r = 0; r < P_; ++r) {
    double params = 0;
    int module = 0, stage = 0;
    for (size_t x = 0; x < layout_.chunks.size(); ++x) {
      const DipChunk& ch = layout_.chunks[x];
      if (ch.rank != r) continue;
      for (const Segment& seg : ch.segments) {
        for (int l = seg.first; l < seg.end; ++l) {
          if (model_.layer(l).frozen) continue;
          params += p_.cost->parameters(l);
          module = seg.module;
          stage = static_cast<int>(x);
        }
      }
    }
    const double bytes = params * p_.memory.gradient_bytes_per_param / tp_;
    if (bytes <= 0) continue;
    const int group = static_cast<int>(s_.groups.size());
    std::vector<int> members;
    for (int d = 0; d < dp_; ++d) members.push_back(rank(d, r));
    s_.groups.push_back(members);
    for (int m : members)
      s_.programs[static_cast<size_t>(m)].push_back(
          Collective{CollectiveKind::kAllReduce, group, stage, module, bytes});
  }
}

}  // namespace

Schedule dip_schedule(const SchedulingProblem& problem, DipSearchStats* stats) {
  if (!problem.parallel.module_layouts.empty())
    throw InputError(
        "parallel.modules: dip colocates every modality on parallel.pp ranks; "
        "per-module layouts are for cornstarch and hetero-*");
  return DipLowering(problem).run(stats);
}

Schedule generate_dip(const SchedulingProblem& problem) {
  return dip_schedule(problem, nullptr);
}

}  // namespace loom
