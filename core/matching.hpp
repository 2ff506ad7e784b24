#pragma once
/// The one dependency oracle: which operation of another rank must happen before this one.
/// Sends and receives match in program order per channel (pair of ranks + layer edge); collectives
/// match per group in program order. The validator, the evaluator and the backends all rely on this
/// rule (SimGrid and NCCL implement the same FIFO matching natively).
#include <optional>
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

/// A collective instance: the members' k-th collective on one group, which they run together.
LOOM_DECLARE_ID(InstanceId, PerInstance);

struct Matching {
  /// For each Recv: the Send it receives. For each Send: the Recv that receives it. None
  /// for other ops (kept parallel to the programs for O(1) access).
  PerRank<std::vector<std::optional<OpRef>>> peer;
  /// For each Collective op: the instance it belongs to; instances[i] lists the member ops.
  PerRank<std::vector<std::optional<InstanceId>>> collective_instance;
  PerInstance<std::vector<OpRef>> instances;

  /// The matched partner of a Send or Recv (throws std::bad_optional_access on any other op).
  OpRef peer_of(OpRef ref) const { return peer[ref.rank][ref.index].value(); }
  /// The instance of a Collective (throws std::bad_optional_access on any other op).
  InstanceId instance_of(OpRef ref) const {
    return collective_instance[ref.rank][ref.index].value();
  }
  const std::vector<OpRef>& members(InstanceId instance) const { return instances[instance]; }
};

/// Matches every Send to its Recv and every Collective to its instance. Throws
/// InfeasibleError naming the operation when one has no partner, when tags or sizes of a
/// matched pair disagree, or when a collective's members do not all take part.
Matching match_operations(const Schedule& schedule);

}  // namespace loom
