#pragma once
/// The timing of one ring collective (model in core/schedule.hpp), shared by the evaluator
/// and the SimGrid backend so that both run one definition.
#include <vector>

#include "core/cluster.hpp"
#include "core/matching.hpp"
#include "core/schedule.hpp"

namespace loom {

struct RingTiming {
  /// Longest uncontended time of a member's stream to its ring successor.
  double slowest_stream_s = 0;
  /// (steps - 1) x the largest hop latency: the per-step handshakes the stream skips.
  double handshake_s = 0;
  /// Uncontended duration from the last member's arrival to the end, for everyone.
  double duration_s() const { return slowest_stream_s + handshake_s; }
};

/// For each of `members` (ranks), how many of the others sit on another node: the flows
/// that share its GPU's rail in an all-to-all.
std::vector<int> inter_node_peers(const Schedule& schedule, const Cluster& cluster,
                                  const std::vector<RankId>& members);

/// The rate cap of each of one all-to-all member's flows from `src_gpu` to `dst_gpu`: the
/// rank's inter-node flow cap (flow_rate_cap) shared by its `inter_node_peers` flows that
/// leave the node, as one GPU's rail carries all of them; 0 (none) inside a node.
double all_to_all_flow_cap(const Cluster& cluster, int src_gpu, int dst_gpu, int tp,
                           int inter_node_peers);

/// `members`: the instance's ops in ring order (Matching::instances). An all-to-all
/// (core/schedule.hpp) has no ring: its slowest_stream_s is the uncontended time of all its
/// flows at once (the busiest link's load over its bandwidth, or the slowest flow's size over
/// its cap) plus the longest route's latency, and no handshakes.
RingTiming ring_timing(const Schedule& schedule, const Cluster& cluster,
                       const std::vector<OpRef>& members, const Collective& collective);

}  // namespace loom
