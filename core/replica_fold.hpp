#pragma once
/// Symmetric folding of data-parallel replicas: simulate what differs, not every copy.
///
/// Replicas that run the same program on the same kind of hardware finish at the same
/// time, so a simulation needs only enough of them to load every link as the whole job
/// does. Replicas are placed as consecutive blocks of GPUs; u of them fill a whole number
/// of nodes (u = lcm(replica GPUs, GPUs per node) / replica GPUs), and every block of u
/// replicas sees the same links. Loom simulates S = k x u replicas (k >= 2, S dividing
/// parallel.dp) op by op. Pipeline traffic stays inside a replica; the gradient
/// all-reduce runs as a ring over the S simulated members whose hop from the last member
/// back to the first stands for the hop into the next block: the same link types and
/// the same load on every NIC and GPU link. Steps and bytes per step are the whole
/// ring's (Schedule::replica_fold), so each link carries exactly what it carries in the
/// full job, and the fold is exact under max-min link sharing. On a tiered fabric that can
/// block (an oversubscribed tier, or a tier's own latency: Fabric::non_blocking), blocks
/// fill whole pods (whole leaves under a single spine tier) instead of whole nodes, so
/// every simulated leaf and pod trunk carries the job's ring hops too. Under an order that
/// puts dp inside pp (Megatron's "tp-cp-ep-dp-pp") a block is the replicas that fill whole
/// domains at every stage.
///
/// Expert parallelism: a block also holds whole expert-parallel groups (ep consecutive of
/// the dp x cp lanes), so every all-to-all runs inside one block as in the job, and the
/// gradient ring of the ranks holding the same experts (one per group) widens by the fold
/// like the data-parallel ring. Within a group the replicas' programs differ (each is its
/// own member of the all-to-alls): replica d runs replica (d mod replicas per group)'s,
/// shifted by whole groups.
///
/// Folding is off where symmetry does not hold: samples that differ in cost (a workload
/// CSV or dataset), kernel-time noise (cost.jitter), routing that draws expert loads per
/// group (zipf, trace), per-module layouts, a replica count that is not a whole number of
/// pairs of blocks, or a scheduler whose replicas do not run identical programs (checked on
/// the plan itself). `sim.fold = false` (`loom sim --no-fold`) turns it off.
#include <string>

#include "core/config.hpp"
#include "core/schedule.hpp"

namespace loom {

struct ReplicaFold {
  int simulated = 1;   ///< replicas planned and simulated op by op
  int total = 1;       ///< the job's replicas (parallel.dp)
  std::string reason;  ///< why not folded; empty when folded or with one replica
  bool folded() const { return simulated < total; }
  int factor() const { return total / simulated; }
  /// "simulated 2 of 64 replicas; symmetric", "not folded: <reason>", or "" (dp 1).
  std::string describe() const;
};

/// Decides from the config: how many replicas to simulate, or why all of them. The plan
/// built with that many must still pass replica_asymmetry().
ReplicaFold plan_replica_fold(const Config& config);

/// Empty when every replica of `schedule` runs its base replica's program (replica 0's;
/// with all-to-all groups over w replicas, replica d mod w's) on ranks, GPUs and peers
/// shifted by whole replicas, and every collective group that spans replicas holds the same
/// ranks (one, or one per CP rank) of each replica it spans, in replica order: all of them,
/// one per all-to-all window, or an all-to-all's aligned window; otherwise what differs
/// first.
std::string replica_asymmetry(const Schedule& schedule);

}  // namespace loom
