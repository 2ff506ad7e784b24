#pragma once
/// The one dependency oracle: which operation of another rank must happen before this one.
/// Sends and receives match in program order per channel (pair of ranks + layer edge); collectives
/// match per group in program order. The validator, the evaluator and the backends all rely on this
/// rule (SimGrid and NCCL implement the same FIFO matching natively).
#include <vector>

#include "core/schedule.hpp"

namespace loom {

/// The FIFO a point-to-point message travels in: an ordered pair of ranks and one edge of
/// the layer graph in one direction (see core/schedule.hpp). Backends that match messages
/// natively (SimGrid mailboxes, NCCL communicators) keep one queue per channel.
struct MessageChannel {
  RankId src;
  RankId dst;
  Pass pass = Pass::kF;
  int producer = 0;
  int boundary = 0;
  auto operator<=>(const MessageChannel&) const = default;
};
MessageChannel channel_of(RankId src, RankId dst, const MessageTag& tag);

struct Matching {
  /// For each Recv: the Send it receives. For each Send: the Recv that receives it.
  /// For other ops: {0, -1} is never read (kept parallel to the programs for O(1) access).
  PerRank<std::vector<OpRef>> peer;
  /// For each Collective op: the instance it belongs to; instances[i] lists the member ops.
  PerRank<std::vector<int>> collective_instance;
  std::vector<std::vector<OpRef>> instances;

  OpRef peer_of(OpRef ref) const { return peer[ref.rank][static_cast<size_t>(ref.index)]; }
  int instance_of(OpRef ref) const {
    return collective_instance[ref.rank][static_cast<size_t>(ref.index)];
  }
  const std::vector<OpRef>& members(int instance) const {
    return instances[static_cast<size_t>(instance)];
  }
};

/// Matches every Send to its Recv and every Collective to its instance. Throws
/// InfeasibleError naming the operation when one has no partner, when tags or sizes of a
/// matched pair disagree, or when a collective's members do not all take part.
Matching match_operations(const Schedule& schedule);

}  // namespace loom
