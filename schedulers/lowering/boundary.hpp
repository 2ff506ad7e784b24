#pragma once
/// Boundary communicators between modules with different layouts
/// (heterogeneous-parallelism-megatron §3, §3.1, §3.2, Figs 2-3).
///
/// An edge u -> v carries one tensor (the boundary batch, B units) in two layouts: u holds
/// it as DP_u batch shards of B/DP_u on the TP x CP group of its last stage, v consumes it
/// as DP_v shards of B/DP_v on the TP x CP group of its first stage. Which shards meet:
///
///   equal   DP_u == DP_v   shard d -> shard d
///   fan-in  DP_u >  DP_v   DP_u/DP_v source shards form one destination shard
///   fan-out DP_u <  DP_v   one source shard splits into DP_v/DP_u destination shards
///
/// Non-colocated (disjoint rank sets, §3.1): only boundary *leaders* (TP = CP = 0 of the
/// boundary stage) exchange point-to-point, one message per overlapping (source shard,
/// destination shard) pair; the receiving leader then broadcasts the whole shard to its
/// TP x CP group. Backward runs the inverse routes and broadcasts on the source side.
///
///     fan-in, DP 4 -> 2:   s0 ─┐           fan-out, DP 1 -> 2:        ┌─> d0 ─bcast─> TP/CP
///                          s1 ─┴─> d0 ─bcast─> TP/CP          s0 ─────┴─> d1 ─bcast─> TP/CP
///                          s2 ─┐
///                          s3 ─┴─> d1 ─bcast─> TP/CP
///
/// Colocated (one shared rank set, §3.2): no tensor crosses rank sets. Forward fan-in is a
/// local all-gather among the GPUs whose source slices form one destination shard, one
/// group per position in the source TP x CP group (App. A.4: with fan-in scale 2 "each
/// colocated bridge group is a 2-rank all-gather"); fan-out and equal-DP are rank-local
/// selections. Backward is the dual: fan-in selects the GPU's slice from the destination
/// gradient (local), fan-out all-gathers sibling gradient slices into the source shard.
///
/// Where a colocated GPU needs a slice that no source shard on that GPU holds (it happens
/// only when the module grids are not nested), the plan lists a point-to-point fallback
/// from the leader of the holding shard; hetero-colocated rejects such layouts (the
/// seed's colocated configurations never need it).
#include <string>
#include <vector>

#include "core/layout.hpp"

namespace loom {

enum class BoundaryKind { kEqual, kFanIn, kFanOut };
const char* to_string(BoundaryKind kind);

/// DP_src vs DP_dst; throws InputError naming `what` when neither divides the other
/// (the batch shards would not nest).
BoundaryKind boundary_kind(int dp_src, int dp_dst, const std::string& what);

/// One overlapping pair of batch shards: source replica, destination replica and the
/// number of batch units they share.
struct ShardOverlap {
  int src_replica = 0;
  int dst_replica = 0;
  double units = 0;
};
/// The logical batch-shard transform: which source shards feed which destination shards,
/// in batch order (fan-in concatenates in this order; backward splits along it).
std::vector<ShardOverlap> shard_overlaps(int dp_src, int dp_dst, double batch_units);

/// A point-to-point message between two GPUs.
struct BoundaryMessage {
  int src_gpu = 0;
  int dst_gpu = 0;
  double bytes = 0;
  int src_replica = 0;  ///< shard the bytes belong to, on the sending module
  int dst_replica = 0;
};

/// A collective over a local group. `bytes` is the full buffer each member ends with
/// (for a broadcast, gpus.front() is the root that holds it).
struct BoundaryGroup {
  std::vector<int> gpus;
  double bytes = 0;
  int replica = 0;  ///< the shard this group materializes (destination fwd, source bwd)
};

/// One direction (forward or backward) of a boundary transform.
struct BoundaryLeg {
  std::vector<BoundaryMessage> messages;  ///< leader routes, or colocated fallbacks
  std::vector<BoundaryGroup> broadcasts;  ///< non-colocated local TP/CP broadcast
  std::vector<BoundaryGroup> allgathers;  ///< colocated local all-gather
  double message_bytes() const;
};

struct BoundaryPlan {
  BoundaryKind kind = BoundaryKind::kEqual;
  bool colocated = false;
  BoundaryLeg forward;   ///< activations, u -> v
  BoundaryLeg backward;  ///< input gradients, v -> u
};

/// The GPUs of the TP x CP group of `stage` of replica `replica` (leader first).
std::vector<int> stage_group(const ModuleLayout& layout, int replica, int stage);

/// Plans the boundary of edge src -> dst for a batch of `batch_units` units of
/// `bytes_per_unit` bytes each. Colocated when the rank sets are identical (throws
/// InputError naming `what` when they partially overlap or DP does not nest).
BoundaryPlan plan_boundary(const ModuleLayout& src, const ModuleLayout& dst, double batch_units,
                           double bytes_per_unit, const std::string& what);

}  // namespace loom
