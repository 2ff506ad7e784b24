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

/// `members`: the instance's ops in ring order (Matching::instances).
RingTiming ring_timing(const Schedule& schedule, const Cluster& cluster,
                       const std::vector<OpRef>& members, const Collective& collective);

}  // namespace loom
