#pragma once
/// Builds the SimGrid platform of a Cluster (see simgrid_backend.hpp for the topology).
#include <set>
#include <simgrid/s4u/Host.hpp>
#include <vector>

#include "core/cluster.hpp"
#include "core/index.hpp"

namespace loom::sim {

/// A GPU of the cluster, numbered node by node (RankInfo::gpu, the host "gpu<N>").
LOOM_DECLARE_ID(GpuId, PerGpu);

/// Creates the zones, hosts and links of the nodes of `cluster` listed in `nodes` in the
/// current engine and returns the host of each GPU, indexed by GPU (nullptr on nodes not
/// built). Link names follow core's network_links().
PerGpu<simgrid::s4u::Host*> build_platform(const Cluster& cluster, const std::set<int>& nodes);

}  // namespace loom::sim
