#include "sim/platform.hpp"

#include <simgrid/s4u/Engine.hpp>
#include <simgrid/s4u/Link.hpp>
#include <simgrid/s4u/NetZone.hpp>
#include <string>

namespace loom::sim {
namespace sg = simgrid::s4u;

namespace {

// Compute never runs on SimGrid's CPU model (compute ops are timed sleeps), so the speed
// only has to be a valid number.
constexpr double kHostSpeed = 1e9;

sg::Link* make_link(sg::NetZone* zone, const NetworkLink& spec) {
  return zone->create_split_duplex_link(spec.name, spec.bandwidth)
      ->set_latency(spec.latency)
      ->seal();
}

}  // namespace

PerGpu<sg::Host*> build_platform(const Cluster& cluster, const std::set<int>& nodes) {
  // A star zone of nodes: a message leaving a node goes up its NIC, down the other's.
  sg::NetZone* root = sg::create_star_zone("cluster");
  PerGpu<sg::Host*> hosts(cluster.num_gpus(), nullptr);
  for (const int node : nodes) {
    // A star zone per node: a message goes up the sender's GPU link, down the receiver's.
    sg::NetZone* zone = sg::create_star_zone("node-" + std::to_string(node));
    zone->set_parent(root);
    auto* gateway = zone->create_router("node-" + std::to_string(node) + "-switch");
    for (int local = 0; local < cluster.gpus_per_node; ++local) {
      const int gpu = node * cluster.gpus_per_node + local;
      sg::Host* host = zone->create_host("gpu" + std::to_string(gpu), kHostSpeed);
      sg::Link* link = make_link(zone, network_link(cluster, gpu));
      zone->add_route(host->get_netpoint(), nullptr, nullptr, nullptr,
                      {sg::LinkInRoute(link, sg::LinkInRoute::Direction::UP)}, true);
      hosts[GpuId{gpu}] = host;
    }
    zone->seal();
    sg::Link* nic = make_link(root, network_link(cluster, cluster.num_gpus() + node));
    root->add_route(zone->get_netpoint(), nullptr, gateway, nullptr,
                    {sg::LinkInRoute(nic, sg::LinkInRoute::Direction::UP)}, true);
  }
  root->seal();
  return hosts;
}

}  // namespace loom::sim
