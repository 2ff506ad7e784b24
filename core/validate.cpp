#include "core/validate.hpp"

#include <algorithm>
#include <boost/graph/compressed_sparse_row_graph.hpp>
#include <boost/graph/depth_first_search.hpp>
#include <cstdint>
#include <limits>
#include <optional>
#include <set>
#include <unordered_set>

#include "core/dataflow.hpp"
#include "core/errors.hpp"
#include "core/index.hpp"
#include "core/matching.hpp"
#include "core/overloaded.hpp"

namespace loom {
namespace {

/// "rank 2, op #7 (2B3)" plus the rank's program around it, the offending op marked.
std::string describe(const Schedule& schedule, RankId rank, size_t index) {
  const auto& program = schedule.programs[rank];
  std::string text = "rank " + to_string(rank) + " op #" + std::to_string(index) + " (" +
                     to_string(program[index], schedule) + ")\n  rank " + to_string(rank) + ":";
  const size_t lo = std::max(index, size_t{4}) - 4;
  const size_t hi = std::min(program.size(), index + 5);
  if (lo > 0) text += " ...";
  for (size_t i = lo; i < hi; ++i) {
    const std::string name = to_string(program[i], schedule);
    text += i == index ? " >>" + name + "<<" : " " + name;
  }
  if (hi < program.size()) text += " ...";
  return text;
}

/// (microbatch, layer) as one hashable word.
std::uint64_t key(MicrobatchId microbatch, int layer) {
  return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(microbatch.value())) << 32) |
         static_cast<std::uint32_t>(layer);
}

struct BackEdgeFound {
  std::size_t vertex;
};

struct CycleVisitor : boost::default_dfs_visitor {
  template <class Edge, class Graph>
  void back_edge(Edge e, const Graph& g) const {
    throw BackEdgeFound{boost::target(e, g)};
  }
};

/// The ops of one action: its computes (overlapped, the same pass, stage and microbatch as
/// `first`) and the context-parallel exchange between the parts of a layer.
bool same_action(const Op& op, const Compute& first) {
  const auto* send = std::get_if<Send>(&op);
  const auto* recv = std::get_if<Recv>(&op);
  if ((send && send->tag.context_parallel()) || (recv && recv->tag.context_parallel())) return true;
  const auto* c = std::get_if<Compute>(&op);
  return c && c->overlapped && c->pass == first.pass && c->stage == first.stage &&
         c->microbatch == first.microbatch;
}

/// A rank steps its optimizer at most once, after every computation and collective of the
/// iteration (its gradients are computed and reduced then), and either every rank that computes a
/// weight gradient steps or none does: a schedule that skips a rank's step trains that rank's
/// layers not at all.
void check_optimizer_steps(const Schedule& schedule) {
  bool any = false;
  for (const auto& program : schedule.programs) {
    for (const Op& op : program) any = any || std::holds_alternative<OptimizerStep>(op);
  }
  if (!any) return;
  for (const RankId r : schedule.rank_ids()) {
    const auto& program = schedule.programs[r];
    int steps = 0;
    std::optional<size_t> step_at, last_compute;
    bool trains = false;
    for (size_t i = 0; i < program.size(); ++i) {
      const Op& op = program[i];
      if (std::holds_alternative<OptimizerStep>(op)) {
        ++steps;
        step_at = i;
      } else if (std::holds_alternative<Collective>(op)) {
        last_compute = i;
      } else if (const auto* c = std::get_if<Compute>(&op)) {
        last_compute = i;
        trains = trains || (!c->redundant && c->pass != Pass::kF && c->weight_grad_s > 0);
      }
    }
    if (steps > 1)
      throw InfeasibleError("rank " + to_string(r) + " steps its optimizer " +
                            std::to_string(steps) + " times (once per iteration)");
    if (steps == 1 && last_compute && *step_at < *last_compute)
      throw InfeasibleError("optimizer step before the last computation or reduction at " +
                            describe(schedule, r, *step_at) +
                            "\n  it must come after every backward and gradient all-reduce");
    if (steps == 0 && trains)
      throw InfeasibleError("rank " + to_string(r) +
                            " computes weight gradients but never steps its optimizer, and "
                            "other ranks do");
  }
}

/// An overlapped pair is its F's computes, then its B's computes (another microbatch): the
/// lowering groups the pair's messages around it, so nothing comes between but the halves'
/// own parts. With expert parallelism the halves interleave around their all-to-alls
/// (lowering/expert_parallel.hpp), which belong to the pair too.
void check_overlapped_pairs(const Schedule& schedule) {
  for (const RankId r : schedule.rank_ids()) {
    const auto& program = schedule.programs[r];
    size_t i = 0;
    while (i < program.size()) {
      const auto* c = std::get_if<Compute>(&program[i]);
      if (!c || !c->overlapped) {
        ++i;
        continue;
      }
      const Compute forward = *c;
      const size_t at = i;
      std::optional<Compute> backward;
      while (i < program.size()) {
        const Op& op = program[i];
        const auto* b = std::get_if<Compute>(&op);
        if (same_action(op, forward) || (backward && same_action(op, *backward)) ||
            is_all_to_all(op)) {
          ++i;
        } else if (!backward && b && b->overlapped && b->pass == Pass::kB &&
                   b->microbatch != forward.microbatch) {
          backward = *b;
          ++i;
        } else {
          break;
        }
      }
      if (forward.pass != Pass::kF || !backward) {
        throw InfeasibleError("broken overlapped pair at " + describe(schedule, r, at) +
                              "\n  an overlapped forward (F+B) must be directly followed by the "
                              "overlapped backward (B) of another microbatch");
      }
    }
  }
}

void check_exactly_once(const Schedule& schedule, const Model& model) {
  // counts[replica][microbatch][layer]: forwards, fused backwards, I, W
  struct Counts {
    int f = 0, b = 0, i = 0, w = 0;
  };
  // With context parallelism every CP rank runs its own shard of each sample: counted
  // per (replica, CP rank), a "lane".
  const int replicas = isize(schedule.samples);
  const int layers = model.num_layers();
  const int cp = schedule.cp;
  PerReplica<PerMicrobatch<PerLayer<Counts>>> counts(
      replicas * cp,
      PerMicrobatch<PerLayer<Counts>>(schedule.microbatches, PerLayer<Counts>(layers)));
  auto lane_name = [&](ReplicaId lane) {
    return to_string(ReplicaId{lane.value() / cp}) +
           (cp > 1 ? " (CP rank " + std::to_string(lane.value() % cp) + ")" : "");
  };
  for (const RankId r : schedule.rank_ids()) {
    const ReplicaId replica = schedule.ranks[r].replica;
    if (!schedule.samples.contains(replica)) {
      throw InfeasibleError("rank " + to_string(r) + " belongs to replica " + to_string(replica) +
                            " but the schedule's samples cover " + std::to_string(replicas) +
                            " replica(s)");
    }
    const ReplicaId lane{replica.value() * cp + schedule.cp_rank(r)};
    const auto& program = schedule.programs[r];
    for (size_t i = 0; i < program.size(); ++i) {
      const auto* c = std::get_if<Compute>(&program[i]);
      // A redundant copy covers no sample; a layer split into parts counts at its last.
      if (!c || c->redundant || c->continues) continue;
      if (!counts[lane].contains(c->microbatch) || c->first_layer < 0 || c->end_layer > layers ||
          c->first_layer >= c->end_layer) {
        throw InfeasibleError("invalid compute operation at " + describe(schedule, r, i) +
                              ": microbatch or layer range out of bounds");
      }
      for (int l = c->first_layer; l < c->end_layer; ++l) {
        Counts& n = counts[lane][c->microbatch][LayerId{l}];
        int& slot = c->pass == Pass::kF   ? n.f
                    : c->pass == Pass::kB ? n.b
                    : c->pass == Pass::kI ? n.i
                                          : n.w;
        if (++slot > 1) {
          throw InfeasibleError("microbatch " + to_string(c->microbatch) + " of replica " +
                                lane_name(lane) + " runs " + to_string(c->pass) + " of layer " +
                                std::to_string(l) + " twice, again at " + describe(schedule, r, i));
        }
      }
    }
  }
  for (const ReplicaId lane : counts.ids()) {
    for (const MicrobatchId mb : counts[lane].ids()) {
      for (int l = 0; l < layers; ++l) {
        const Counts& n = counts[lane][mb][LayerId{l}];
        const bool backward_once =
            (n.b == 1 && n.i == 0 && n.w == 0) || (n.b == 0 && n.i == 1 && n.w == 1);
        if (n.f != 1 || !backward_once) {
          throw InfeasibleError("microbatch " + to_string(mb) + " of replica " + lane_name(lane) +
                                ", layer " + std::to_string(l) + ": " + std::to_string(n.f) +
                                " forward(s), " + std::to_string(n.b) + " B, " +
                                std::to_string(n.i) + " I, " + std::to_string(n.w) +
                                " W (every sample needs exactly one forward and one backward: "
                                "one B, or one I and one W)");
        }
      }
    }
  }
  std::set<SampleId> seen;
  for (const auto& replica : schedule.samples) {
    for (const auto& mb : replica) {
      for (const SampleId sample : mb) {
        if (!seen.insert(sample).second) {
          throw InfeasibleError("sample " + to_string(sample) + " is in two microbatches");
        }
      }
    }
  }
  if (!seen.empty() &&
      (*seen.begin() != SampleId{0} || *seen.rbegin() != SampleId{isize(seen) - 1})) {
    throw InfeasibleError("the microbatches do not cover samples 0.." + to_string(*seen.rbegin()) +
                          " exactly once");
  }
}

/// Each rank's program reads only data it computed earlier or received: the dependency
/// oracle (core/dataflow.hpp) names what every op needs.
void check_data_dependencies(const Schedule& schedule, const Model& model) {
  const LayerGraph graph(model);
  for (const RankId r : schedule.rank_ids()) {
    const auto& program = schedule.programs[r];
    std::unordered_set<std::uint64_t> forward_done, input_grad_done;
    std::set<DataEdge> received;
    // Whether the data of `edge` is on this rank: received, or computed here (a forward
    // computes the F edges out of its layers, a backward the B edges into them).
    auto available = [&](const DataEdge& e) {
      if (received.count(e)) return true;
      return e.pass == Pass::kF ? forward_done.count(key(e.microbatch, e.producer)) > 0
                                : input_grad_done.count(key(e.microbatch, e.boundary)) > 0;
    };
    for (size_t i = 0; i < program.size(); ++i) {
      auto fail = [&](const std::string& what) {
        throw InfeasibleError("data dependency violated at " + describe(schedule, r, i) + "\n  " +
                              what);
      };
      std::visit(Overloaded{
                     [&](const Compute& c) {
                       if (c.redundant) return;  // its output feeds nothing
                       const MicrobatchId mb = c.microbatch;
                       for (int l = c.first_layer; l < c.end_layer; ++l) {
                         if (c.pass == Pass::kW && !input_grad_done.count(key(mb, l)))
                           fail("W runs before the I of layer " + std::to_string(l));
                         if (c.pass != Pass::kF && !forward_done.count(key(mb, l)))
                           fail("backward runs before the forward of layer " + std::to_string(l));
                       }
                       for (const DataEdge& e : op_inputs(graph, c)) {
                         if (available(e)) continue;
                         if (e.pass == Pass::kF)
                           fail("forward needs the output of layer " + std::to_string(e.producer) +
                                ": not computed earlier on this rank and not received");
                         fail("backward needs the input gradient of layer " +
                              std::to_string(e.boundary) +
                              ": not computed earlier on this rank and not received");
                       }
                       if (c.pass == Pass::kW || c.continues) return;
                       auto& done = c.pass == Pass::kF ? forward_done : input_grad_done;
                       for (int l = c.first_layer; l < c.end_layer; ++l) done.insert(key(mb, l));
                     },
                     [&](const Send& s) {
                       if (s.tag.context_parallel()) return;  // inside a layer, no edge
                       const DataEdge e = edge_of(s.tag);
                       if (available(e)) return;
                       if (e.pass == Pass::kF)
                         fail("sends activations of layer " + std::to_string(e.producer) +
                              " before computing them");
                       fail("sends the input gradient of layer " + std::to_string(e.boundary) +
                            " before computing it");
                     },
                     [&](const Recv& rv) {
                       if (!rv.tag.context_parallel()) received.insert(edge_of(rv.tag));
                     },
                     [&](const Collective&) {},
                     [&](const OptimizerStep&) {},
                 },
                 program[i]);
    }
  }
}

}  // namespace

void check_acyclic(const Schedule& schedule) {
  const Matching matching = match_operations(schedule);
  // Vertices: every op, then one barrier per collective instance.
  PerRank<std::size_t> base(schedule.num_ranks() + 1, 0);
  for (const RankId r : schedule.rank_ids()) {
    base[r + 1] = base[r] + schedule.programs[r].size();
  }
  const std::size_t n_ops = base.back();
  // Compressed sparse rows with 32-bit indices: a 4,096-GPU schedule has 3 M ops, and a
  // vector of out-edges per vertex was most of validation's memory.
  const std::size_t n_vertices = n_ops + matching.instances.size();
  if (n_vertices >= std::numeric_limits<std::uint32_t>::max())
    throw InfeasibleError("schedule too large to check for deadlocks (over 4 G operations)");
  using Vertex = std::uint32_t;
  std::vector<std::pair<Vertex, Vertex>> edges;
  edges.reserve(n_ops + n_ops / 2);
  auto add_edge = [&](std::size_t from, std::size_t to) {
    edges.emplace_back(static_cast<Vertex>(from), static_cast<Vertex>(to));
  };
  for (const RankId r : schedule.rank_ids()) {
    const auto& program = schedule.programs[r];
    for (size_t i = 0; i < program.size(); ++i) {
      const std::size_t v = base[r] + i;
      if (i > 0) add_edge(v - 1, v);
      if (std::holds_alternative<Send>(program[i])) {
        const OpRef recv = matching.peer_of({r, i});
        add_edge(v, base[recv.rank] + recv.index);
      }
      if (std::holds_alternative<Collective>(program[i])) {
        const std::size_t barrier = n_ops + matching.instance_of({r, i}).slot();
        // Everything before the collective on each member precedes everything after it.
        if (i > 0) add_edge(v - 1, barrier);
        add_edge(barrier, v);
      }
    }
  }
  if (edges.size() >= std::numeric_limits<std::uint32_t>::max())
    throw InfeasibleError("schedule too large to check for deadlocks (over 4 G dependencies)");
  using Graph = boost::compressed_sparse_row_graph<boost::directedS, boost::no_property,
                                                   boost::no_property, boost::no_property, Vertex>;
  const Graph g(boost::edges_are_unsorted_multi_pass, edges.begin(), edges.end(),
                static_cast<Vertex>(n_vertices));
  edges = {};
  try {
    boost::depth_first_search(g, boost::visitor(CycleVisitor{}));
  } catch (const BackEdgeFound& found) {
    std::size_t v = found.vertex;
    if (v >= n_ops) v = n_ops - 1;  // a barrier: report the last op instead (rare)
    RankId rank{0};
    while (base[rank + 1] <= v) ++rank;
    throw InfeasibleError("schedule deadlocks: a cycle of waits passes through " +
                          describe(schedule, rank, v - base[rank]));
  }
}

namespace {
std::string rank_gpus(RankId r, const RankInfo& info) {
  return "rank " + to_string(r) + " (GPUs " + std::to_string(info.gpu) + ".." +
         std::to_string(info.gpu + info.tp - 1) + ")";
}
}  // namespace

void check_placement(const Schedule& schedule, const Cluster& cluster) {
  std::vector<std::pair<int, RankId>> first_gpu;  // (gpu, rank), to find overlaps in order
  for (const RankId r : schedule.rank_ids()) {
    const RankInfo& info = schedule.ranks[r];
    if (info.tp < 1 || info.gpu < 0 || info.gpu + info.tp > cluster.num_gpus()) {
      throw InfeasibleError(rank_gpus(r, info) + " is outside the cluster's " +
                            std::to_string(cluster.num_gpus()) + " GPUs");
    }
    if (cluster.node_of(info.gpu) != cluster.node_of(info.gpu + info.tp - 1)) {
      throw InfeasibleError(rank_gpus(r, info) +
                            " spans two nodes: a tensor-parallel group must fit in one node of " +
                            std::to_string(cluster.gpus_per_node) + " GPUs");
    }
    first_gpu.emplace_back(info.gpu, r);
  }
  std::sort(first_gpu.begin(), first_gpu.end());
  for (size_t k = 1; k < first_gpu.size(); ++k) {
    const auto [gpu, r] = first_gpu[k];
    const RankId before = first_gpu[k - 1].second;
    const RankInfo& prev = schedule.ranks[before];
    if (prev.gpu + prev.tp > gpu) {
      throw InfeasibleError(rank_gpus(r, schedule.ranks[r]) + " shares GPU " + std::to_string(gpu) +
                            " with rank " + to_string(before));
    }
  }
}

namespace {

/// Selective recompute of what saves memory here (docs/cost-model.md), where it is not
/// already on: a MoE layer's experts' activations and norms; else the attention core, or
/// under FlashAttention (which keeps no scores to drop) the MLP.
std::string recompute_fix(const MemoryLevers& l) {
  if (!l.kernel_level || l.recompute == Recompute::kFull) return "";
  RecomputeModules useful = RecomputeModules::none();
  if (l.moe) {
    if (!l.fp8) useful.add(RecomputeModule::kMoeActivation);  // under FP8 fc2 keeps a copy
    useful.add(RecomputeModule::kLayerNorm);
  } else {
    useful.add(l.flash_attention ? RecomputeModule::kMlp : RecomputeModule::kCoreAttention);
  }
  RecomputeModules want =
      l.recompute == Recompute::kSelective ? l.recompute_modules : RecomputeModules::none();
  if (l.recompute == Recompute::kSelective && (want.bits & useful.bits) == useful.bits) return "";
  want.bits |= useful.bits;
  // Megatron's default list alone needs no list, unless selective is on with another one.
  if (want == RecomputeModules{} && l.recompute != Recompute::kSelective)
    return "cost.recompute = \"selective\"";
  std::string names;
  for (const RecomputeModule m : kRecomputeModules) {
    if (want.has(m)) names += (names.empty() ? "\"" : ", \"") + std::string(to_string(m)) + "\"";
  }
  if (l.recompute == Recompute::kSelective) return "cost.recompute_modules = [" + names + "]";
  return "cost.recompute = \"selective\" with cost.recompute_modules = [" + names + "]";
}

/// The usual fixes, for the largest part first (Megatron's memory levers: sequence
/// parallelism and selective recompute, Korthikanti et al. 2022; the distributed
/// optimizer, ZeRO-1, Rajbhandari et al. SC'20), skipping those already applied.
std::string memory_fixes(const MemoryLevers& l, const StaticMemory& m, double activations) {
  std::vector<std::string> activation_fixes, state_fixes;
  if (l.tp > 1 && !l.sequence_parallel)
    activation_fixes.push_back("parallel.sequence_parallel = true");
  if (const std::string fix = recompute_fix(l); !fix.empty()) activation_fixes.push_back(fix);
  if (l.recompute != Recompute::kFull) activation_fixes.push_back("cost.recompute = \"full\"");
  activation_fixes.push_back("a smaller schedule.microbatch_size");
  if (l.dp > 1 && !l.distributed_optimizer && !l.fsdp)
    state_fixes.push_back("parallel.distributed_optimizer = true (the optimizer state over " +
                          std::to_string(l.dp) + " replicas)");
  if (l.dp > 1 && !l.fsdp) state_fixes.push_back("parallel.fsdp = true");
  state_fixes.push_back("more pipeline stages (parallel.pp) or tensor parallelism (parallel.tp)");
  const bool activations_first = activations >= std::max({m.parameters, m.gradients, m.optimizer});
  std::vector<std::string> fixes = activations_first ? activation_fixes : state_fixes;
  const auto& rest = activations_first ? state_fixes : activation_fixes;
  fixes.insert(fixes.end(), rest.begin(), rest.end());
  std::string out;
  for (size_t i = 0; i < fixes.size(); ++i)
    out += (i == 0 ? "" : i + 1 == fixes.size() ? ", or " : ", ") + fixes[i];
  return out;
}

}  // namespace

void check_fits_memory(const Schedule& schedule, double gpu_memory_bytes,
                       const MemoryLevers& levers) {
  const auto peaks = activation_peaks(schedule);
  for (const RankId r : schedule.rank_ids()) {
    const StaticMemory& m = schedule.static_memory[r];
    const double need = m.total() + peaks[r].bytes;
    if (need > gpu_memory_bytes) {
      auto gib = [](double b) {
        return std::to_string(b / (1024.0 * 1024 * 1024)).substr(0, 6) + " GiB";
      };
      throw InfeasibleError(
          "out of memory: rank " + to_string(r) + " (stage " +
          std::to_string(r.value() % std::max(1, schedule.num_stages)) + ") needs " + gib(need) +
          " (parameters " + gib(m.parameters) + ", gradients " + gib(m.gradients) + ", optimizer " +
          gib(m.optimizer) + ", activations of " + std::to_string(peaks[r].microbatches) +
          " live microbatches " + gib(peaks[r].bytes) + ") but the GPU has " +
          gib(gpu_memory_bytes) + "; try " + memory_fixes(levers, m, peaks[r].bytes));
    }
  }
}

void validate(const Schedule& schedule, const Model& model) {
  check_acyclic(schedule);
  check_exactly_once(schedule, model);
  check_data_dependencies(schedule, model);
  check_overlapped_pairs(schedule);
  check_optimizer_steps(schedule);
}

}  // namespace loom
