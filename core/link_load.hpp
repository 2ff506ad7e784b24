#pragma once
/// What the network's links carry in one iteration: the bytes of every link direction, as
/// the SimGrid backend's flows put them there (a send on its route, each ring member's
/// stream to its successor, each all-to-all pair's chunk), and per tier of the platform
/// the busiest link and the mean utilisation over the iteration.
#include <string>
#include <vector>

#include "core/cluster.hpp"
#include "core/schedule.hpp"
#include "core/timeline.hpp"
#include "core/trace_counters.hpp"

namespace loom {

struct Matching;

/// Bytes per link direction, indexed as network_links().
struct LinkBytes {
  std::vector<double> up, down;
};
LinkBytes link_bytes(const Schedule& schedule, const Cluster& cluster);

struct TierLoad {
  LinkTier tier = LinkTier::kGpu;
  int loaded = 0;         ///< link directions of the tier that carry any byte
  double bytes = 0;       ///< all of them together, every GPU's copy counted
  std::string busiest;    ///< "nic-3 up"
  int busiest_link = -1;  ///< its index in network_links()
  bool busiest_up = true;
  double busiest_bytes = 0;
  /// Utilisation: bytes over bandwidth x iteration time (the busiest link's, and the mean
  /// over the loaded directions).
  double busiest_utilisation = 0;
  double mean_utilisation = 0;
};
/// One entry per tier that carries traffic, lowest tier first.
std::vector<TierLoad> tier_loads(const Schedule& schedule, const Cluster& cluster,
                                 double iteration_time_s);

/// The busiest direction of each tier between nodes (NICs, leaf and pod trunks) as a
/// counter track of GB/s over the iteration, every copy counted: each message drawn at
/// its mean rate from its send's start to its arrival, each collective's streams
/// from its last member's arrival to the member's end (the Perfetto trace's "network"
/// tracks). `matching`: match_operations(schedule), where the caller holds it.
std::vector<CounterTrack> busiest_link_tracks(const Schedule& schedule, const Cluster& cluster,
                                              const Timeline& timeline,
                                              const Matching* matching = nullptr);

}  // namespace loom
