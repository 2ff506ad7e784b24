#pragma once
/// One collective as NCCL runs it on the cluster's links, in closed form: NCCL's ring
/// (one ring per channel, channels spread over a node's NICs), its tree (a chain inside
/// each node, a double binary tree across nodes; Sanders et al. 2009, as NCCL 2.4
/// introduced it) and a hierarchical all-reduce (reduce-scatter inside each node, one
/// all-reduce ring per rail across nodes, all-gather inside each node). Each algorithm is
/// the set of flows it puts on the links, timed by the most loaded link direction (core's
/// route(), so the fabric's tiers count) or the slowest flow's own cap, plus its steps'
/// latency; NCCL picks, among the algorithms that apply, the one its tuning model predicts
/// fastest, and so does Loom, on its own predictions (docs/fabrics.md).
#include <cstdint>
#include <string>
#include <vector>

#include "core/cluster.hpp"
#include "core/schedule.hpp"

namespace loom {

enum class CollectiveAlgorithm : std::uint8_t { kRing, kTree, kHierarchical };
const char* to_string(CollectiveAlgorithm algorithm);  ///< "ring", "tree", "hierarchical"

struct CollectivePrediction {
  CollectiveAlgorithm algorithm = CollectiveAlgorithm::kRing;
  bool applies = true;
  std::string why_not;  ///< why it does not apply
  double time_s = 0;
  double algbw = 0;        ///< size / time, as nccl-tests reports it
  double busbw = 0;        ///< algbw x bus_factor: comparable across group sizes
  std::string bottleneck;  ///< the link direction (or flow cap) that sets the time
};

/// nccl-tests' bus-bandwidth factor (its doc/PERFORMANCE.md): 2(n-1)/n for an all-reduce,
/// (n-1)/n for an all-gather, a reduce-scatter and an all-to-all.
double bus_factor(CollectiveKind op, int ranks);

/// Every algorithm for `op` over `gpus` (cluster GPU indices, in rank order, grouped by
/// node) with nccl-tests' size `bytes`: an all-reduce's buffer, an all-gather's output, a
/// reduce-scatter's input. The ring always applies; the tree and the hierarchical split
/// only to an all-reduce over several nodes with the same GPUs on each.
std::vector<CollectivePrediction> predict_collective(const Cluster& cluster, CollectiveKind op,
                                                     double bytes, const std::vector<int>& gpus);

/// What NCCL would run: the fastest prediction that applies.
const CollectivePrediction& nccl_choice(const std::vector<CollectivePrediction>& predictions);

}  // namespace loom
