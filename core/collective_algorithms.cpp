#include "core/collective_algorithms.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <stdexcept>
#include <utility>

namespace loom {

const char* to_string(CollectiveAlgorithm algorithm) {
  switch (algorithm) {
    case CollectiveAlgorithm::kRing:
      return "ring";
    case CollectiveAlgorithm::kTree:
      return "tree";
    case CollectiveAlgorithm::kHierarchical:
      return "hierarchical";
  }
  return "?";
}

double bus_factor(CollectiveKind op, int ranks) {
  if (ranks <= 1) return 0;
  const double n = ranks;
  return op == CollectiveKind::kAllReduce ? 2 * (n - 1) / n : (n - 1) / n;
}

namespace {

struct Flow {
  int src = 0, dst = 0;
  double bytes = 0;
};

/// One phase: flows that run at once, and the latency one piece of data pays on its way
/// through the algorithm's hops (NCCL's model too: per-hop latencies of the hops a chunk
/// crosses, NVLink and network apart).
struct Phase {
  std::vector<Flow> flows;
  double latency_s = 0;
};

struct PhaseTime {
  double seconds = 0;
  double bandwidth_s = 0;  ///< the part that moves bytes
  std::string bottleneck;
};

/// The most loaded link direction's bytes over its bandwidth, or the slowest flow's bytes
/// over its cap (one NIC), whichever is longer; plus the phase's latency.
PhaseTime time_phase(const Cluster& cluster, const Phase& phase) {
  std::map<std::pair<int, bool>, double> load;
  PhaseTime t;
  for (const Flow& f : phase.flows) {
    if (f.src == f.dst || f.bytes <= 0) continue;
    for (const Hop& h : route(cluster, f.src, f.dst)) load[{h.link, h.up}] += f.bytes;
    const double cap = flow_rate_cap(cluster, f.src, f.dst, 1);
    if (cap > 0 && f.bytes / cap > t.bandwidth_s) {
      t.bandwidth_s = f.bytes / cap;
      t.bottleneck =
          "one NIC per flow (gpu" + std::to_string(f.src) + " -> gpu" + std::to_string(f.dst) + ")";
    }
  }
  for (const auto& [link, bytes] : load) {
    const NetworkLink l = network_link(cluster, link.first);
    if (bytes / l.bandwidth > t.bandwidth_s) {
      t.bandwidth_s = bytes / l.bandwidth;
      t.bottleneck = l.name + (link.second ? " up" : " down");
    }
  }
  t.seconds = t.bandwidth_s + phase.latency_s;
  return t;
}

/// The group's GPUs by node, in order of first appearance.
std::vector<std::vector<int>> by_node(const Cluster& cluster, const std::vector<int>& gpus) {
  std::vector<std::vector<int>> nodes;
  std::map<int, size_t> index;
  for (const int g : gpus) {
    const auto [it, added] = index.try_emplace(cluster.node_of(g), nodes.size());
    if (added) nodes.emplace_back();
    nodes[it->second].push_back(g);
  }
  return nodes;
}

bool same_gpus_per_node(const std::vector<std::vector<int>>& nodes) {
  return std::ranges::all_of(nodes, [&](const auto& n) { return n.size() == nodes[0].size(); });
}

/// NCCL's ring: one ring per channel through every GPU, node by node; channel c enters
/// each node at its c-th GPU, so the channels' node-to-node hops leave from every GPU in
/// turn and spread over the node's NICs. Each channel carries 1/C of the data.
/// A chunk goes round the ring steps / n times: its latency is that many times the sum of
/// the ring's hop latencies (channel 0's; every channel crosses the same kinds of hops).
Phase ring_phase(const Cluster& cluster, const std::vector<std::vector<int>>& nodes,
                 CollectiveKind op, double bytes, int channels) {
  Phase p;
  std::vector<int> order;
  for (const auto& n : nodes) order.insert(order.end(), n.begin(), n.end());
  const int ranks = isize(order);
  double round_trip = 0;
  for (int k = 0; k < ranks; ++k)
    round_trip += transfer_time(cluster, order[k], order[(k + 1) % ranks], 0);
  p.latency_s = ranks > 0 ? ring_steps(op, ranks) * round_trip / ranks : 0.0;
  const double stream = ring_stream_bytes(op, ranks, bytes) / channels;
  for (int c = 0; c < channels; ++c) {
    std::vector<int> ring;
    for (const auto& n : nodes) {
      const int g = isize(n);
      for (int j = 0; j < g; ++j) ring.push_back(n[static_cast<size_t>((c + j) % g)]);
    }
    for (int k = 0; k < ranks; ++k) p.flows.push_back({ring[k], ring[(k + 1) % ranks], stream});
  }
  return p;
}

/// NCCL's tree for an all-reduce: per channel, a chain through each node's GPUs from the
/// channel's head GPU, and two binary trees over the nodes (heap order and its mirror),
/// each carrying half the data up (reduce) and back down (broadcast). A chunk crosses the
/// chain and the tree's depth twice.
Phase tree_phase(const Cluster& cluster, const std::vector<std::vector<int>>& nodes, double bytes,
                 int channels) {
  Phase p;
  const int count = isize(nodes);
  const int g = isize(nodes[0]);
  const int depth = static_cast<int>(std::floor(std::log2(count)));  // of a heap of count
  const double intra = g > 1 ? transfer_time(cluster, nodes[0][0], nodes[0][1], 0) : 0.0;
  double inter = 0;  // the slowest tree edge: the deepest tier any of them climbs
  for (int i = 1; i < count; ++i) {
    inter = std::max(inter, transfer_time(cluster, nodes[static_cast<size_t>(i)][0],
                                          nodes[static_cast<size_t>((i - 1) / 2)][0], 0));
  }
  p.latency_s = 2 * ((g - 1) * intra + depth * inter);
  const double half = bytes / 2 / channels;
  auto head = [&](int node, int c) { return nodes[static_cast<size_t>(node)][c % g]; };
  for (int c = 0; c < channels; ++c) {
    for (int node = 0; node < count; ++node) {
      const auto& n = nodes[static_cast<size_t>(node)];
      for (int j = 0; j + 1 < g; ++j) {  // the chain, both trees' halves, up and down
        const int a = n[static_cast<size_t>((c + j) % g)],
                  b = n[static_cast<size_t>((c + j + 1) % g)];
        p.flows.push_back({b, a, 2 * half});
        p.flows.push_back({a, b, 2 * half});
      }
    }
    for (const bool mirrored : {false, true}) {
      for (int i = 1; i < count; ++i) {
        const int child = mirrored ? count - 1 - i : i;
        const int parent = mirrored ? count - 1 - (i - 1) / 2 : (i - 1) / 2;
        p.flows.push_back({head(child, c), head(parent, c), half});
        p.flows.push_back({head(parent, c), head(child, c), half});
      }
    }
  }
  return p;
}

CollectivePrediction finish(CollectiveAlgorithm algorithm, CollectiveKind op, double bytes,
                            int ranks, const std::vector<PhaseTime>& phases) {
  CollectivePrediction out;
  out.algorithm = algorithm;
  double slowest = -1;
  for (const PhaseTime& t : phases) {
    out.time_s += t.seconds;
    if (t.bandwidth_s > slowest) {
      slowest = t.bandwidth_s;
      out.bottleneck = t.bottleneck;
    }
  }
  out.algbw = out.time_s > 0 ? bytes / out.time_s : 0;
  out.busbw = out.algbw * bus_factor(op, ranks);
  return out;
}

CollectivePrediction not_applicable(CollectiveAlgorithm algorithm, std::string why) {
  CollectivePrediction out;
  out.algorithm = algorithm;
  out.applies = false;
  out.why_not = std::move(why);
  return out;
}

}  // namespace

std::vector<CollectivePrediction> predict_collective(const Cluster& cluster, CollectiveKind op,
                                                     double bytes, const std::vector<int>& gpus) {
  if (op == CollectiveKind::kAllToAll)
    throw std::invalid_argument("predict_collective: all-to-all has no NCCL algorithm choice");
  const std::vector<std::vector<int>> nodes = by_node(cluster, gpus);
  const int ranks = isize(gpus);
  const bool uniform = same_gpus_per_node(nodes);
  // NCCL opens a channel per NIC the group's GPUs reach: a GPU leaves its node through its
  // own rail, so g GPUs per node use at most g NICs; inside one node the count changes
  // nothing (every hop is NVLink).
  const int channels = nodes.size() > 1 && uniform
                           ? std::max(1, std::min(cluster.nics_per_node, isize(nodes[0])))
                           : 1;
  std::vector<CollectivePrediction> out;
  out.push_back(finish(CollectiveAlgorithm::kRing, op, bytes, ranks,
                       {time_phase(cluster, ring_phase(cluster, nodes, op, bytes, channels))}));
  const std::string why = op != CollectiveKind::kAllReduce ? "NCCL runs it for all-reduce only"
                          : nodes.size() < 2               ? "the group is one node"
                          : !uniform                       ? "the nodes hold different GPU counts"
                                                           : "";
  if (!why.empty()) {
    out.push_back(not_applicable(CollectiveAlgorithm::kTree, why));
    out.push_back(not_applicable(CollectiveAlgorithm::kHierarchical, why));
    return out;
  }
  out.push_back(finish(CollectiveAlgorithm::kTree, op, bytes, ranks,
                       {time_phase(cluster, tree_phase(cluster, nodes, bytes, channels))}));
  // Reduce-scatter inside each node, an all-reduce of 1/g per rail across the nodes, an
  // all-gather inside each node: three phases in sequence.
  const int g = isize(nodes[0]);
  std::vector<std::vector<int>> rails(static_cast<size_t>(g));
  Phase scatter, gather, across;
  for (const auto& n : nodes) {
    Phase rs = ring_phase(cluster, {n}, CollectiveKind::kReduceScatter, bytes, 1);
    scatter.flows.insert(scatter.flows.end(), rs.flows.begin(), rs.flows.end());
    scatter.latency_s = std::max(scatter.latency_s, rs.latency_s);
    for (int j = 0; j < g; ++j) rails[static_cast<size_t>(j)].push_back(n[static_cast<size_t>(j)]);
  }
  gather = scatter;  // the same ring and bytes, the other collective
  for (const auto& rail : rails) {
    std::vector<std::vector<int>> members;
    for (const int gpu : rail) members.push_back({gpu});
    Phase ar = ring_phase(cluster, members, CollectiveKind::kAllReduce, bytes / g, 1);
    across.flows.insert(across.flows.end(), ar.flows.begin(), ar.flows.end());
    across.latency_s = std::max(across.latency_s, ar.latency_s);
  }
  out.push_back(finish(
      CollectiveAlgorithm::kHierarchical, op, bytes, ranks,
      {time_phase(cluster, scatter), time_phase(cluster, across), time_phase(cluster, gather)}));
  return out;
}

const CollectivePrediction& nccl_choice(const std::vector<CollectivePrediction>& predictions) {
  const CollectivePrediction* best = nullptr;
  for (const CollectivePrediction& p : predictions)
    if (p.applies && (!best || p.time_s < best->time_s)) best = &p;
  if (!best) throw std::logic_error("nccl_choice: no algorithm applies");
  return *best;
}

}  // namespace loom
