#include "core/ring.hpp"

#include <algorithm>
#include <map>
#include <utility>

#include "core/index.hpp"

namespace loom {

double all_to_all_flow_cap(const Cluster& cluster, int src_gpu, int dst_gpu, int tp,
                           int inter_node_peers) {
  const double cap = flow_rate_cap(cluster, src_gpu, dst_gpu, tp);
  return cap > 0 ? cap / std::max(1, inter_node_peers) : 0.0;
}

std::vector<int> inter_node_peers(const Schedule& schedule, const Cluster& cluster,
                                  const std::vector<RankId>& members) {
  std::vector<int> peers;
  for (const RankId r : members) {
    const int node = cluster.node_of(schedule.ranks[r].gpu);
    int n = 0;
    for (const RankId other : members) n += cluster.node_of(schedule.ranks[other].gpu) != node;
    peers.push_back(n);
  }
  return peers;
}

namespace {

/// Each member's GPU, TP width and inter-node peers.
struct AllToAllMembers {
  std::vector<int> gpu, tp, inter_node_peers;
};
AllToAllMembers all_to_all_members(const Schedule& schedule, const Cluster& cluster,
                                   const std::vector<OpRef>& members) {
  AllToAllMembers m;
  std::vector<RankId> ranks;
  for (const OpRef& op : members) {
    ranks.push_back(op.rank);
    m.gpu.push_back(schedule.ranks[op.rank].gpu);
    m.tp.push_back(schedule.ranks[op.rank].tp);
  }
  m.inter_node_peers = inter_node_peers(schedule, cluster, ranks);
  return m;
}

RingTiming all_to_all_timing(const Schedule& schedule, const Cluster& cluster,
                             const std::vector<OpRef>& members, const Collective& collective) {
  RingTiming t;
  const size_t n = members.size();
  if (n <= 1) return t;
  const double chunk = ring_chunk_bytes(collective.kind, static_cast<int>(n), collective.bytes);
  const AllToAllMembers m = all_to_all_members(schedule, cluster, members);
  std::map<std::pair<int, bool>, double> load;  // (link, up) -> bytes
  double slowest_flow = 0, latency = 0;
  for (size_t a = 0; a < n; ++a) {
    for (size_t b = 0; b < n; ++b) {
      if (a == b || m.gpu[a] == m.gpu[b]) continue;
      for (const Hop& hop : route(cluster, m.gpu[a], m.gpu[b])) load[{hop.link, hop.up}] += chunk;
      const double cap = all_to_all_flow_cap(cluster, m.gpu[a], m.gpu[b],
                                             std::max(m.tp[a], m.tp[b]), m.inter_node_peers[a]);
      if (cap > 0) slowest_flow = std::max(slowest_flow, chunk / cap);
      latency = std::max(latency, transfer_time(cluster, m.gpu[a], m.gpu[b], 0));
    }
  }
  double busiest = 0;
  for (const auto& [link, bytes] : load)
    busiest = std::max(busiest, bytes / network_link(cluster, link.first).bandwidth);
  t.slowest_stream_s = std::max(busiest, slowest_flow) + latency;
  return t;
}

}  // namespace

RingTiming ring_timing(const Schedule& schedule, const Cluster& cluster,
                       const std::vector<OpRef>& members, const Collective& collective) {
  if (collective.kind == CollectiveKind::kAllToAll)
    return all_to_all_timing(schedule, cluster, members, collective);
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
