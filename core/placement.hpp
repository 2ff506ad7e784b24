#pragma once
/// Where the parallel dimensions land: TP groups of consecutive GPUs, the other
/// dimensions over them in parallel.order, and how far each one's groups reach on the
/// fabric (within a node, a leaf, a pod, or across pods).
#include <array>
#include <cstdint>
#include <vector>

#include "core/cluster.hpp"
#include "core/config.hpp"

namespace loom {

struct PlacementDegrees {
  int cp = 1;
  int dp = 1;
  int ranks = 1;  ///< pipeline ranks per replica
};
struct PlacementCoordinates {
  int cp = 0;
  int replica = 0;
  int rank = 0;
};

/// The first GPU of the TP group at `at`: the coordinates in `order`, innermost first, as
/// digits of a mixed-radix number, times tp.
int placed_gpu(const std::array<PlacementDim, 3>& order, PlacementDegrees degrees,
               PlacementCoordinates at, int tp);

/// How far a dimension's groups reach: the widest part of the platform any of them spans.
enum class Reach : std::uint8_t { kNode, kLeaf, kPod, kAcrossPods };
/// "within a node"; then on a star "across nodes"; on a two-tier fabric "within a leaf",
/// "across leaves"; on three tiers "within a leaf", "within a pod", "across pods".
const char* describe(Reach reach, const Cluster& cluster);

struct DimensionReach {
  const char* dimension;  ///< "tp", "cp", "pp", "dp", "ep"
  int degree = 1;
  Reach reach = Reach::kNode;
};

/// Each dimension of degree > 1 (tp, cp, pp, dp, then ep), with the reach of its groups
/// when `ranks` pipeline ranks per replica are placed on `cluster` by `parallel`.
std::vector<DimensionReach> dimension_reach(const ParallelConfig& parallel, int ranks,
                                            const Cluster& cluster);

}  // namespace loom
