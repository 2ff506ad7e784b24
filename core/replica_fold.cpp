#include "core/replica_fold.hpp"

#include <algorithm>
#include <numeric>
#include <utility>

#include "core/overloaded.hpp"

namespace loom {

std::string ReplicaFold::describe() const {
  if (folded()) {
    return "simulated " + std::to_string(simulated) + " of " + std::to_string(total) +
           " replicas; symmetric";
  }
  return reason.empty() ? "" : "not folded: " + reason;
}

namespace {

/// The GPUs of the smallest part of the cluster whose copies sit in symmetric positions
/// of the fabric, and its name: a node on a star or a non-blocking tree; a pod, or a
/// leaf under one spine tier, on a fabric that can block.
std::pair<long, std::string> symmetric_domain(const Cluster& c) {
  const long node = c.gpus_per_node;
  if (c.fabric.non_blocking()) return {node, "nodes"};
  if (c.num_pods() > 1) {
    return {node * c.fabric.nodes_per_leaf * c.fabric.leaves_per_pod,
            "pods of the blocking fabric"};
  }
  if (c.num_leaves() > 1) return {node * c.fabric.nodes_per_leaf, "leaves of the blocking fabric"};
  return {node, "nodes"};
}

/// GPUs between a rank of replica d and the same rank of replica d + 1: tp times the
/// dimensions parallel.order puts inside dp (all of a replica's under Loom's default).
long replica_stride(const ParallelConfig& p) {
  long stride = p.tp;
  for (const PlacementDim dim : p.order) {
    if (dim == PlacementDim::kDp) break;
    stride *= dim == PlacementDim::kCp ? p.cp : p.pp;
  }
  return stride;
}

}  // namespace

ReplicaFold plan_replica_fold(const Config& config) {
  ReplicaFold fold;
  fold.total = fold.simulated = config.parallel.dp;
  auto off = [&](std::string why) {
    fold.reason = std::move(why);
    return fold;
  };
  // Per-module layouts have a data-parallel degree per module (parallel.dp unused).
  if (!config.parallel.module_layouts.empty())
    return off("per-module layouts (parallel.modules.*) place replicas unevenly");
  if (fold.total <= 1) return fold;
  if (!config.sim.fold) return off("sim.fold = false");
  for (const Module& m : config.model.modules()) {
    const bool moe = std::ranges::any_of(m.layers, [](const LayerSpec& l) { return l.moe(); });
    if (config.parallel.ep > 1 && moe && m.routing.kind != RoutingKind::kBalanced)
      return off("module '" + m.name + "' routes by " + m.routing.text() +
                 ": each expert-parallel group draws its own expert loads, so replicas differ");
  }
  if (config.cost.jitter > 0)
    return off("cost.jitter: every op draws its own kernel-time noise, so replicas differ");
  if (!config.workload.csv.empty() || !config.workload.dataset.empty()) {
    return off(std::string("the samples differ in cost (workload.") +
               (config.workload.csv.empty() ? "dataset" : "csv") +
               "), so replicas run different work");
  }
  const Cluster& cluster = config.cluster;
  const long replica_gpus =
      static_cast<long>(config.parallel.pp) * config.parallel.cp * config.parallel.tp;
  if (replica_gpus * fold.total > cluster.num_gpus())
    return off("the job needs more GPUs than the cluster has");
  // u replicas fill whole nodes; fold into k >= 2 blocks of u, k dividing dp / u. On a
  // fabric that can block (an oversubscribed tier, a tier's latency), where a replica sits
  // matters: a block fills whole pods (whole leaves under one spine tier), so the simulated
  // ring crosses each trunk as often as the job's and its wrap-around hop climbs as high.
  // Under an order that puts dp inside pp (Megatron's "tp-cp-ep-dp-pp"), replica d's rank
  // sits d x stride GPUs from replica 0's for every stage: the u replicas fill whole
  // domains at each stage, so a pipeline hop leaves its domain in the folded job as in the
  // job (both jobs' stages are whole domains apart).
  // Expert parallelism: an expert-parallel group is ep consecutive of the dp x cp lanes,
  // which a block holds whole, so its all-to-alls stay inside the block and load the
  // block's links as every other block's load theirs.
  auto [domain_gpus, domain] = symmetric_domain(cluster);
  const long stride = replica_stride(config.parallel);
  long block = std::lcm(stride, domain_gpus) / stride;
  if (const long cp = config.parallel.cp, ep = config.parallel.ep; ep > 1) {
    block = std::lcm(block * cp, ep) / cp;
    domain += " and whole expert-parallel groups";
  }
  const long blocks = fold.total / block;
  if (fold.total % block != 0 || blocks < 4) {
    if (fold.total % block != 0) {
      return off(std::to_string(fold.total) + " replicas are not whole blocks of " +
                 std::to_string(block) + " (the replicas that fill whole " + domain + "): the " +
                 domain + " differ");
    }
    return off("too few replicas to fold (" + std::to_string(fold.total) +
               "; folding keeps two blocks of " + std::to_string(block) + ")");
  }
  for (long k = 2; k < blocks; ++k) {
    if (blocks % k == 0) {
      fold.simulated = static_cast<int>(k * block);
      return fold;
    }
  }
  return off(std::to_string(blocks) + " blocks of " + std::to_string(block) +
             " replicas do not split into equal groups of two or more");
}

namespace {

std::string describe_op(int replica, int base_replica, RankId rank, size_t index) {
  return "replica " + std::to_string(replica) + " rank " + to_string(rank) + " op #" +
         std::to_string(index) + " differs from replica " + std::to_string(base_replica) + "'s";
}

/// `op` of a rank in replica d equals `base` of its base replica with peers shifted by
/// `shift`; a collective on another group than base's (a tied embedding's inside a replica,
/// an expert-parallel group's) on base's group shifted.
bool same_shifted(const Schedule& schedule, const Op& op, const Op& base, int shift) {
  if (op.index() != base.index()) return false;
  return std::visit(Overloaded{
                        [&](const Compute& c) { return c == std::get<Compute>(base); },
                        [&](const Send& s) {
                          Send b = std::get<Send>(base);
                          b.peer += shift;
                          return s == b;
                        },
                        [&](const Recv& r) {
                          Recv b = std::get<Recv>(base);
                          b.peer += shift;
                          return r == b;
                        },
                        [&](const Collective& c) {
                          Collective b = std::get<Collective>(base);
                          if (c.group != b.group) {
                            std::vector<RankId> shifted = schedule.group_members(b.group);
                            for (RankId& m : shifted) m += shift;
                            if (shifted != schedule.group_members(c.group)) return false;
                            b.group = c.group;
                          }
                          return c == b;
                        },
                        [&](const OptimizerStep& o) { return o == std::get<OptimizerStep>(base); },
                    },
                    op);
}

/// The replicas group `g` spans, in member order without repeats.
std::vector<int> spanned_replicas(const Schedule& s, GroupId g) {
  std::vector<int> spanned;
  for (const RankId m : s.group_members(g)) {
    const int d = s.ranks[m].replica.value();
    if (std::ranges::find(spanned, d) == spanned.end()) spanned.push_back(d);
  }
  return spanned;
}

/// Whether each group is one that all-to-alls run on (expert parallelism's).
std::vector<bool> all_to_all_groups(const Schedule& s) {
  std::vector<bool> a2a(static_cast<size_t>(s.groups.ssize()), false);
  for (const auto& program : s.programs) {
    for (const Op& op : program) {
      if (is_all_to_all(op))
        a2a[static_cast<size_t>(std::get<Collective>(op).group.value())] = true;
    }
  }
  return a2a;
}

/// Replicas per window of consecutive replicas that an all-to-all group spans whole (an
/// expert-parallel group over several replicas): replica d then runs the program of
/// replica d mod the period, shifted by whole windows. 1 without such groups; 0 when a
/// window is out of alignment or spans every simulated replica (whose ring the fold would
/// widen).
int replica_period(const Schedule& s, int replicas, const std::vector<bool>& a2a) {
  int period = 1;
  for (const GroupId g : s.groups.ids()) {
    if (!a2a[static_cast<size_t>(g.value())]) continue;
    const std::vector<int> spanned = spanned_replicas(s, g);
    const int m = isize(spanned);
    if (m <= 1) continue;
    const auto [lo, hi] = std::ranges::minmax(spanned);
    if (m >= replicas || hi - lo + 1 != m || lo % m != 0) return 0;
    period = std::lcm(period, m);
  }
  return replicas % period == 0 ? period : 0;
}

/// Whether a group spanning replicas spans them as the fold's rings assume: every replica
/// (a data-parallel group), one replica per period at a fixed offset (the expert-gradient
/// group of ranks holding the same experts), or, for an all-to-all, its window.
bool spans_alike(const std::vector<int>& spanned, int replicas, int period, bool all_to_all) {
  if (all_to_all) return true;  // windows checked by replica_period
  const int m = isize(spanned);
  const int step = m == replicas ? 1 : period;
  if (m * step != replicas || spanned[0] >= step) return false;
  for (int j = 0; j < m; ++j)
    if (spanned[static_cast<size_t>(j)] != spanned[0] + j * step) return false;
  return true;
}

}  // namespace

std::string replica_asymmetry(const Schedule& s) {
  const int ranks = s.num_ranks();
  int replicas = 0;
  for (const RankInfo& info : s.ranks) replicas = std::max(replicas, info.replica.value() + 1);
  if (replicas <= 1) return "";
  if (ranks % replicas != 0) return "replicas hold different numbers of ranks";
  const int per = ranks / replicas;
  const std::vector<bool> a2a = all_to_all_groups(s);
  const int period = replica_period(s, replicas, a2a);
  if (period == 0) return "an all-to-all group spans replicas out of step with the others'";
  const int stride = s.ranks[RankId{per}].gpu - s.ranks[RankId{0}].gpu;
  if (isize(s.samples) != replicas) return "the sample assignment does not cover every replica";
  for (int d = 0; const auto& replica_samples : s.samples) {
    if (replica_samples.size() != s.samples.front().size())
      return "replica " + std::to_string(d) + " runs another number of microbatches";
    // Within a period the replicas differ (each its own member of the all-to-all groups
    // spanning it); replica d repeats replica d mod period shifted by whole periods.
    const int base_replica = d % period, shift = d - base_replica;
    for (int i = 0; i < per; ++i) {
      const RankId r0{base_replica * per + i}, r = r0 + shift * per;
      const RankInfo& info = s.ranks[r];
      const RankInfo& base = s.ranks[r0];
      if (info.replica != ReplicaId{d} || info.tp != base.tp ||
          info.gpu != base.gpu + shift * stride) {
        return "replica " + std::to_string(d) + " rank " + to_string(r) +
               " is not placed as replica " + std::to_string(base_replica) + "'s rank " +
               std::to_string(i) + " shifted by whole replicas";
      }
      if (!(s.static_memory[r] == s.static_memory[r0]))
        return "replica " + std::to_string(d) + " rank " + to_string(r) + " holds other weights";
      const auto& program = s.programs[r];
      const auto& base_program = s.programs[r0];
      if (program.size() != base_program.size())
        return describe_op(d, base_replica, r, std::min(program.size(), base_program.size()));
      for (size_t k = 0; k < program.size(); ++k) {
        if (!same_shifted(s, program[k], base_program[k], shift * per))
          return describe_op(d, base_replica, r, k);
      }
    }
    ++d;
  }
  for (const GroupId g : s.groups.ids()) {
    const auto& members = s.groups[g];
    // A group inside one replica is compared through the ops. One spanning replicas holds
    // the same ranks (one, or each CP rank's) of each replica it spans, in replica order.
    if (!s.group_in_one_replica(g)) {
      const std::vector<int> spanned = spanned_replicas(s, g);
      const int k = isize(members) / isize(spanned);
      bool alike = k >= 1 && isize(members) == k * isize(spanned) &&
                   spans_alike(spanned, replicas, period, a2a[static_cast<size_t>(g.value())]);
      for (int i = 0; alike && i < isize(members); ++i)
        alike = members[static_cast<size_t>(i)] ==
                members[static_cast<size_t>(i % k)] +
                    (spanned[static_cast<size_t>(i / k)] - spanned[0]) * per;
      if (!alike)
        return "collective group " + to_string(g) +
               " does not hold the same ranks of every replica";
    }
  }
  return "";
}

}  // namespace loom
