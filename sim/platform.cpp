#include "sim/platform.hpp"

#include <map>
#include <simgrid/s4u/Engine.hpp>
#include <simgrid/s4u/Link.hpp>
#include <simgrid/s4u/NetZone.hpp>
#include <string>
#include <unordered_map>

namespace loom::sim {
namespace sg = simgrid::s4u;

namespace {

// Compute never runs on SimGrid's CPU model (compute ops are timed sleeps), so the speed
// only has to be a valid number.
constexpr double kHostSpeed = 1e9;

/// The fabric's links, all created in the root zone before any child zone exists.
/// SimGrid 3.32 checks a new link's name against every zone of the tree (one map per
/// zone): made beside the node zones, the 16,384-GPU platform spent 7 s in that walk.
/// A route may use a link of any zone.
class Links {
 public:
  Links(sg::NetZone* root, const Cluster& cluster) : root_(root), cluster_(cluster) {}
  void create(int index) {
    const NetworkLink spec = network_link(cluster_, index);
    links_[index] = root_->create_split_duplex_link(spec.name, spec.bandwidth)
                        ->set_latency(spec.latency)
                        ->seal();
  }
  sg::Link* at(int index) const { return links_.at(index); }

 private:
  sg::NetZone* root_;
  const Cluster& cluster_;
  std::unordered_map<int, sg::Link*> links_;
};

/// A star zone and its gateway, a router at its centre: a route into the zone from its
/// parent ends at the centre, and a route out of it starts there.
struct StarZone {
  sg::NetZone* zone = nullptr;
  simgrid::kernel::routing::NetPoint* gateway = nullptr;
};

/// A zone of hosts: the router sits in the zone itself, beside the hosts.
StarZone make_star(const std::string& name, sg::NetZone* parent) {
  StarZone z{sg::create_star_zone(name), nullptr};
  z.zone->set_parent(parent);
  z.gateway = z.zone->create_router(name + "-switch");
  return z;
}

/// A zone of zones: its router sits in a linkless child zone of its own. SimGrid's
/// hierarchical routing (NetZoneImpl::get_global_route) asks a zone for the route between
/// two of its children; a router that were a direct member beside child zones would be
/// routed to as if from the source host itself, whose id indexes the wrong child's route.
StarZone make_star_of_zones(const std::string& name, sg::NetZone* parent) {
  StarZone z{sg::create_star_zone(name), nullptr};
  z.zone->set_parent(parent);
  sg::NetZone* centre = sg::create_star_zone(name + "-centre");
  centre->set_parent(z.zone);
  z.gateway = centre->create_router(name + "-switch");
  centre->seal();
  z.zone->add_route(centre->get_netpoint(), nullptr, z.gateway, nullptr, {}, true);
  return z;
}

/// Seals `child` and routes it to the centre of `parent` through `uplink`.
void attach(const StarZone& child, sg::NetZone* parent, sg::Link* link) {
  child.zone->seal();
  parent->add_route(child.zone->get_netpoint(), nullptr, child.gateway, nullptr,
                    {sg::LinkInRoute(link, sg::LinkInRoute::Direction::UP)}, true);
}

}  // namespace

PerGpu<sg::Host*> build_platform(const Cluster& cluster, const std::set<int>& nodes) {
  // Nested star zones, one level per fabric tier (SimGrid's hierarchical routing joins the
  // routes of each level through the zones' gateways): a message climbs its GPU link, its
  // node's NIC uplink and the trunks of the tiers it crosses, and comes down the same kinds
  // on the other side, the hops of core's route().
  const int tiers = cluster.fabric.tiers();
  // pod -> leaf -> nodes, only of the nodes built (a star has one pod of one-node leaves
  // that are not zones of their own).
  std::map<int, std::map<int, std::vector<int>>> tree;
  for (const int node : nodes) {
    const int leaf = cluster.leaf_of_node(node);
    tree[cluster.pod_of_leaf(leaf)][leaf].push_back(node);
  }
  sg::NetZone* root = sg::create_star_zone("cluster");
  Links links(root, cluster);
  for (const auto& [pod, leaves] : tree) {
    if (tiers == 2) links.create(pod_uplink_index(cluster, pod));
    for (const auto& [leaf, leaf_nodes] : leaves) {
      if (tiers >= 1) links.create(leaf_uplink_index(cluster, leaf));
      for (const int node : leaf_nodes) {
        for (int local = 0; local < cluster.gpus_per_node; ++local)
          links.create(node * cluster.gpus_per_node + local);
        links.create(cluster.num_gpus() + node);
      }
    }
  }
  PerGpu<sg::Host*> hosts(cluster.num_gpus(), nullptr);
  auto build_node = [&](int node, sg::NetZone* parent) {
    // A star zone per node: a message goes up the sender's GPU link, down the receiver's.
    const StarZone z = make_star("node-" + std::to_string(node), parent);
    for (int local = 0; local < cluster.gpus_per_node; ++local) {
      const int gpu = node * cluster.gpus_per_node + local;
      sg::Host* host = z.zone->create_host("gpu" + std::to_string(gpu), kHostSpeed);
      z.zone->add_route(host->get_netpoint(), nullptr, nullptr, nullptr,
                        {sg::LinkInRoute(links.at(gpu), sg::LinkInRoute::Direction::UP)}, true);
      hosts[GpuId{gpu}] = host;
    }
    attach(z, parent, links.at(cluster.num_gpus() + node));
  };
  for (const auto& [pod, leaves] : tree) {
    const StarZone pod_zone = tiers == 2 ? make_star_of_zones("pod-" + std::to_string(pod), root)
                                         : StarZone{root, nullptr};
    for (const auto& [leaf, leaf_nodes] : leaves) {
      const StarZone leaf_zone =
          tiers >= 1 ? make_star_of_zones("leaf-" + std::to_string(leaf), pod_zone.zone)
                     : StarZone{pod_zone.zone, nullptr};
      for (const int node : leaf_nodes) build_node(node, leaf_zone.zone);
      if (tiers >= 1) attach(leaf_zone, pod_zone.zone, links.at(leaf_uplink_index(cluster, leaf)));
    }
    if (tiers == 2) attach(pod_zone, root, links.at(pod_uplink_index(cluster, pod)));
  }
  root->seal();
  return hosts;
}

}  // namespace loom::sim
