#include "core/ring.hpp"

#include <algorithm>

#include "core/index.hpp"

namespace loom {

RingTiming ring_timing(const Schedule& schedule, const Cluster& cluster,
                       const std::vector<OpRef>& members, const Collective& collective) {
  // Steps and bytes are the whole ring's; the hops are those of the simulated members
  // (with folding, the fold's last member stands for the next replica's: the same link
  // types, see core/replica_fold.hpp).
  const int ring = schedule.ring_size(collective.group);
  const int steps = ring_steps(collective.kind, ring);
  RingTiming t;
  if (steps == 0) return t;
  const double stream = ring_stream_bytes(collective.kind, ring, collective.bytes);
  auto gpu = [&](const OpRef& m) { return schedule.ranks[m.rank].gpu; };
  auto tp = [&](const OpRef& m) { return schedule.ranks[m.rank].tp; };
  double largest_latency = 0;
  const size_t n = members.size();
  for (size_t k = 0; k < n; ++k) {
    const OpRef& prev = members[(k + n - 1) % n];
    const int from = gpu(prev);
    const int to = gpu(members[k]);
    const int flow_tp = std::max(tp(prev), tp(members[k]));
    t.slowest_stream_s =
        std::max(t.slowest_stream_s, transfer_time(cluster, from, to, stream, flow_tp));
    largest_latency = std::max(largest_latency, transfer_time(cluster, from, to, 0));
  }
  t.handshake_s = (steps - 1) * largest_latency;
  return t;
}

}  // namespace loom
