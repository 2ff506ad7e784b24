#include "core/replica_fold.hpp"

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
  if (!config.parallel.default_order())
    return off("parallel.order lays a replica's ranks apart, between other replicas' ranks");
  if (config.parallel.ep > 1)
    return off(
        "parallel.ep: expert-parallel all-to-alls run between replicas, which folding "
        "does not model yet");
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
  const auto [domain_gpus, domain] = symmetric_domain(cluster);
  const long block = std::lcm(replica_gpus, domain_gpus) / replica_gpus;
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

std::string describe_op(int replica, RankId rank, size_t index) {
  return "replica " + std::to_string(replica) + " rank " + to_string(rank) + " op #" +
         std::to_string(index) + " differs from replica 0's";
}

/// `op` of a rank in replica d equals `base` of replica 0 with peers shifted by `shift`; a
/// collective on a group inside one replica (a tied embedding's) on the shifted group.
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
                          if (c.group != b.group && schedule.group_in_one_replica(c.group) &&
                              schedule.group_in_one_replica(b.group)) {
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

}  // namespace

std::string replica_asymmetry(const Schedule& s) {
  const int ranks = s.num_ranks();
  int replicas = 0;
  for (const RankInfo& info : s.ranks) replicas = std::max(replicas, info.replica.value() + 1);
  if (replicas <= 1) return "";
  if (ranks % replicas != 0) return "replicas hold different numbers of ranks";
  const int per = ranks / replicas;
  const int stride = s.ranks[RankId{per}].gpu - s.ranks[RankId{0}].gpu;
  if (isize(s.samples) != replicas) return "the sample assignment does not cover every replica";
  for (int d = 0; const auto& replica_samples : s.samples) {
    if (replica_samples.size() != s.samples.front().size())
      return "replica " + std::to_string(d) + " runs another number of microbatches";
    for (int i = 0; i < per; ++i) {
      const RankId r0{i}, r = r0 + d * per;
      const RankInfo& info = s.ranks[r];
      const RankInfo& base = s.ranks[r0];
      if (info.replica != ReplicaId{d} || info.tp != base.tp || info.gpu != base.gpu + d * stride) {
        return "replica " + std::to_string(d) + " rank " + to_string(r) +
               " is not placed as replica 0's rank " + std::to_string(i) +
               " shifted by whole replicas";
      }
      if (!(s.static_memory[r] == s.static_memory[r0]))
        return "replica " + std::to_string(d) + " rank " + to_string(r) + " holds other weights";
      const auto& program = s.programs[r];
      const auto& base_program = s.programs[r0];
      if (program.size() != base_program.size())
        return describe_op(d, r, std::min(program.size(), base_program.size()));
      for (size_t k = 0; k < program.size(); ++k) {
        if (!same_shifted(s, program[k], base_program[k], d * per)) return describe_op(d, r, k);
      }
    }
    ++d;
  }
  for (const GroupId g : s.groups.ids()) {
    const auto& members = s.groups[g];
    // A group inside one replica is compared through the ops.
    // One spanning the replicas has the same members in each (one, or each CP rank's).
    if (!s.group_in_one_replica(g)) {
      const int k = isize(members) / replicas;
      bool alike = k >= 1 && isize(members) == k * replicas;
      for (int i = 0; alike && i < isize(members); ++i)
        alike =
            members[static_cast<size_t>(i)] == members[static_cast<size_t>(i % k)] + i / k * per;
      if (!alike)
        return "collective group " + to_string(g) +
               " does not hold the same ranks of every replica";
    }
  }
  return "";
}

}  // namespace loom
