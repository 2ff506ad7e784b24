#pragma once
/// The one dependency oracle: which operation of another rank must happen before this one.
/// Sends and receives match in program order per channel (pair of ranks + layer edge); collectives
/// match per group in program order. The validator, the evaluator and the backends all rely on this
/// rule (SimGrid and NCCL implement the same FIFO matching natively).
#include <cstdint>
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
  /// The matched partner of a Send or Recv (throws std::bad_optional_access on any other op).
  OpRef peer_of(OpRef ref) const {
    const Link& link = links[ref.rank][ref.index];
    if (link.rank < 0) throw std::bad_optional_access();
    return {RankId{link.rank}, link.index};
  }
  /// The instance of a Collective (throws std::bad_optional_access on any other op).
  InstanceId instance_of(OpRef ref) const {
    const Link& link = links[ref.rank][ref.index];
    if (link.rank != kInstance) throw std::bad_optional_access();
    return InstanceId{static_cast<int>(link.index)};
  }
  const std::vector<OpRef>& members(InstanceId instance) const { return instances[instance]; }

  /// instances[i] lists the member ops of collective instance i.
  PerInstance<std::vector<OpRef>> instances;

  /// What op [rank][index] is linked to, 8 bytes an op (a 16,384-GPU schedule has 12 M ops:
  /// optionals of both kinds were 32 bytes and most of the matching's time to fill): a
  /// Send's Recv or a Recv's Send, a Collective's instance (rank kInstance), or nothing.
  struct Link {
    std::int32_t rank = kNone;
    std::uint32_t index = 0;
  };
  static constexpr std::int32_t kNone = -1;
  static constexpr std::int32_t kInstance = -2;
  PerRank<std::vector<Link>> links;
};

/// Matches every Send to its Recv and every Collective to its instance. Throws
/// InfeasibleError naming the operation when one has no partner, when tags or sizes of a
/// matched pair disagree, or when a collective's members do not all take part.
Matching match_operations(const Schedule& schedule);

/// The matching to work with: `lent` when the caller holds the schedule's matching already
/// (match_operations of this same schedule: at 16,384 GPUs it takes 0.4 s and 100 MB), else
/// one made here and kept in `owned`.
const Matching& lent_or_matched(const Matching* lent, std::optional<Matching>& owned,
                                const Schedule& schedule);

}  // namespace loom
