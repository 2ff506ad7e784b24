#pragma once
/// What the network's links carry in one iteration: the bytes of every link direction, as
/// the SimGrid backend's flows put them there (a send on its route, each ring member's
/// stream to its successor, each all-to-all pair's chunk), and per tier of the platform
/// the busiest link and the mean utilisation over the iteration.
#include <string>
#include <vector>

#include "core/cluster.hpp"
#include "core/schedule.hpp"

namespace loom {

/// Bytes per link direction, indexed as network_links().
struct LinkBytes {
  std::vector<double> up, down;
};
LinkBytes link_bytes(const Schedule& schedule, const Cluster& cluster);

struct TierLoad {
  LinkTier tier = LinkTier::kGpu;
  int loaded = 0;       ///< link directions of the tier that carry any byte
  double bytes = 0;     ///< all of them together
  std::string busiest;  ///< "nic-3 up"
  double busiest_bytes = 0;
  /// Utilisation: bytes over bandwidth x iteration time (the busiest link's, and the mean
  /// over the loaded directions).
  double busiest_utilisation = 0;
  double mean_utilisation = 0;
};
/// One entry per tier that carries traffic, lowest tier first.
std::vector<TierLoad> tier_loads(const Schedule& schedule, const Cluster& cluster,
                                 double iteration_time_s);

}  // namespace loom
