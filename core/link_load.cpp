#include "core/link_load.hpp"

#include <algorithm>
#include <array>
#include <variant>

namespace loom {

namespace {

void add_route(LinkBytes& load, const Cluster& cluster, int src_gpu, int dst_gpu, double bytes) {
  for (const Hop& hop : route(cluster, src_gpu, dst_gpu))
    (hop.up ? load.up : load.down)[static_cast<size_t>(hop.link)] += bytes;
}

}  // namespace

LinkBytes link_bytes(const Schedule& schedule, const Cluster& cluster) {
  const size_t links = network_links(cluster).size();
  LinkBytes load{std::vector<double>(links, 0.0), std::vector<double>(links, 0.0)};
  for (const RankId r : schedule.rank_ids()) {
    const int gpu = schedule.ranks[r].gpu;
    for (const Op& op : schedule.programs[r]) {
      if (const auto* s = std::get_if<Send>(&op)) {
        add_route(load, cluster, gpu, schedule.ranks[s->peer].gpu, s->bytes);
      } else if (const auto* c = std::get_if<Collective>(&op)) {
        const std::vector<RankId>& members = schedule.group_members(c->group);
        const int n = isize(members);
        if (c->kind == CollectiveKind::kAllToAll) {
          const double chunk = ring_chunk_bytes(c->kind, n, c->bytes);
          for (const RankId peer : members)
            if (peer != r) add_route(load, cluster, gpu, schedule.ranks[peer].gpu, chunk);
          continue;
        }
        const auto at = std::find(members.begin(), members.end(), r) - members.begin();
        const RankId next = members[static_cast<size_t>((at + 1) % n)];
        add_route(load, cluster, gpu, schedule.ranks[next].gpu,
                  ring_stream_bytes(c->kind, schedule.ring_size(c->group), c->bytes));
      }
    }
  }
  return load;
}

std::vector<TierLoad> tier_loads(const Schedule& schedule, const Cluster& cluster,
                                 double iteration_time_s) {
  const LinkBytes load = link_bytes(schedule, cluster);
  const std::vector<NetworkLink> links = network_links(cluster);
  std::array<TierLoad, 4> tiers;
  for (size_t t = 0; t < tiers.size(); ++t) tiers[t].tier = static_cast<LinkTier>(t);
  for (size_t i = 0; i < links.size(); ++i) {
    TierLoad& tier = tiers[static_cast<size_t>(links[i].tier)];
    for (const bool up : {true, false}) {
      const double bytes = (up ? load.up : load.down)[i];
      if (bytes <= 0) continue;
      const double utilisation =
          iteration_time_s > 0 ? bytes / (links[i].bandwidth * iteration_time_s) : 0.0;
      ++tier.loaded;
      tier.bytes += bytes;
      tier.mean_utilisation += utilisation;
      if (bytes > tier.busiest_bytes) {
        tier.busiest = links[i].name + (up ? " up" : " down");
        tier.busiest_bytes = bytes;
        tier.busiest_utilisation = utilisation;
      }
    }
  }
  std::vector<TierLoad> out;
  for (TierLoad& tier : tiers) {
    if (tier.loaded == 0) continue;
    tier.mean_utilisation /= tier.loaded;
    out.push_back(tier);
  }
  return out;
}

}  // namespace loom
