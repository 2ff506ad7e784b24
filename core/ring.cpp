#include "core/ring.hpp"

#include <algorithm>

namespace loom {

RingTiming ring_timing(const Schedule& schedule, const Cluster& cluster,
                       const std::vector<OpRef>& members, const Collective& collective) {
  const int n = static_cast<int>(members.size());
  const int steps = ring_steps(collective.kind, n);
  RingTiming t;
  if (steps == 0) return t;
  const double stream = ring_stream_bytes(collective.kind, n, collective.bytes);
  auto gpu = [&](const OpRef& m) { return schedule.ranks[static_cast<size_t>(m.rank)].gpu; };
  auto tp = [&](const OpRef& m) { return schedule.ranks[static_cast<size_t>(m.rank)].tp; };
  double largest_latency = 0;
  for (int k = 0; k < n; ++k) {
    const int from = gpu(members[static_cast<size_t>((k + n - 1) % n)]);
    const int to = gpu(members[static_cast<size_t>(k)]);
    const OpRef& prev = members[static_cast<size_t>((k + n - 1) % n)];
    const int flow_tp = std::max(tp(prev), tp(members[static_cast<size_t>(k)]));
    t.slowest_stream_s =
        std::max(t.slowest_stream_s, transfer_time(cluster, from, to, stream, flow_tp));
    largest_latency = std::max(largest_latency, transfer_time(cluster, from, to, 0));
  }
  t.handshake_s = (steps - 1) * largest_latency;
  return t;
}

}  // namespace loom
