#include "core/placement.hpp"

#include <algorithm>

namespace loom {

int placed_gpu(const std::array<PlacementDim, 3>& order, PlacementDegrees degrees,
               PlacementCoordinates at, int tp) {
  int index = 0, stride = 1;
  for (const PlacementDim dim : order) {
    const auto [coordinate, size] = dim == PlacementDim::kCp   ? std::pair{at.cp, degrees.cp}
                                    : dim == PlacementDim::kDp ? std::pair{at.replica, degrees.dp}
                                                               : std::pair{at.rank, degrees.ranks};
    index += coordinate * stride;
    stride *= size;
  }
  return index * tp;
}

const char* describe(Reach reach, const Cluster& cluster) {
  const int tiers = cluster.fabric.tiers();
  switch (reach) {
    case Reach::kNode:
      return "within a node";
    case Reach::kLeaf:
      return tiers == 0 ? "across nodes" : "within a leaf";
    case Reach::kPod:
      return tiers == 1 ? "across leaves" : "within a pod";
    case Reach::kAcrossPods:
      return "across pods";
  }
  return "?";
}

namespace {

Reach reach_between(const Cluster& c, int gpu_a, int gpu_b) {
  const int a = c.node_of(gpu_a), b = c.node_of(gpu_b);
  if (a == b) return Reach::kNode;
  return static_cast<Reach>(1 + c.tier_crossed(a, b));
}

}  // namespace

std::vector<DimensionReach> dimension_reach(const ParallelConfig& p, int ranks, const Cluster& c) {
  const PlacementDegrees degrees{p.cp, p.dp, ranks};
  auto gpu = [&](PlacementCoordinates at) { return placed_gpu(p.order, degrees, at, p.tp); };
  DimensionReach cp{"cp", p.cp}, pp{"pp", ranks}, dp{"dp", p.dp}, ep{"ep", p.ep};
  auto widen = [&](DimensionReach& d, int from, int to) {
    d.reach = std::max(d.reach, reach_between(c, from, to));
  };
  for (int lane = 0; lane < p.cp * p.dp; ++lane) {
    const int replica = lane / p.cp, cp_rank = lane % p.cp;
    const int first_lane = lane / p.ep * p.ep;  // the lane's expert-parallel group
    for (int rank = 0; rank < ranks; ++rank) {
      const int here = gpu({cp_rank, replica, rank});
      widen(cp, gpu({0, replica, rank}), here);
      widen(pp, gpu({cp_rank, replica, 0}), here);
      widen(dp, gpu({cp_rank, 0, rank}), here);
      widen(ep, gpu({first_lane % p.cp, first_lane / p.cp, rank}), here);
    }
  }
  std::vector<DimensionReach> out;
  if (p.tp > 1) out.push_back({"tp", p.tp, Reach::kNode});
  for (const DimensionReach& d : {cp, pp, dp, ep})
    if (d.degree > 1) out.push_back(d);
  return out;
}

}  // namespace loom
