#include "core/link_load.hpp"

#include <algorithm>
#include <array>
#include <map>
#include <optional>
#include <variant>

#include "core/matching.hpp"

namespace loom {

namespace {

/// One rank's flow as the SimGrid backend puts it on the network: from `src` to `dst`
/// GPU, `bytes` per copy, for op `op`.
struct Flow {
  int src = 0, dst = 0;
  double bytes = 0;
  OpRef op;
};

/// Every flow of one iteration: a send on its route, a ring member's stream to its
/// successor, an all-to-all member's chunk to each other member.
template <class F>
void for_each_flow(const Schedule& schedule, F&& visit) {
  for (const RankId r : schedule.rank_ids()) {
    const int gpu = schedule.ranks[r].gpu;
    const auto& program = schedule.programs[r];
    for (size_t i = 0; i < program.size(); ++i) {
      const OpRef op{r, i};
      if (const auto* s = std::get_if<Send>(&program[i])) {
        visit(Flow{gpu, schedule.ranks[s->peer].gpu, s->bytes, op});
      } else if (const auto* c = std::get_if<Collective>(&program[i])) {
        const std::vector<RankId>& members = schedule.group_members(c->group);
        const int n = isize(members);
        if (c->kind == CollectiveKind::kAllToAll) {
          const double chunk = ring_chunk_bytes(c->kind, n, c->bytes);
          for (const RankId peer : members)
            if (peer != r) visit(Flow{gpu, schedule.ranks[peer].gpu, chunk, op});
          continue;
        }
        const auto at = std::find(members.begin(), members.end(), r) - members.begin();
        const RankId next = members[static_cast<size_t>((at + 1) % n)];
        visit(Flow{gpu, schedule.ranks[next].gpu,
                   ring_stream_bytes(c->kind, schedule.ring_size(c->group), c->bytes), op});
      }
    }
  }
}

/// A shared link carries every copy of a rank's flow (Cluster::flow_copies).
int copies_on(const Cluster& cluster, LinkTier tier) {
  return tier == LinkTier::kGpu ? 1 : std::max(1, cluster.flow_copies);
}

}  // namespace

LinkBytes link_bytes(const Schedule& schedule, const Cluster& cluster) {
  const size_t links = network_links(cluster).size();
  LinkBytes load{std::vector<double>(links, 0.0), std::vector<double>(links, 0.0)};
  for_each_flow(schedule, [&](const Flow& f) {
    for (const Hop& hop : route(cluster, f.src, f.dst))
      (hop.up ? load.up : load.down)[static_cast<size_t>(hop.link)] += f.bytes;
  });
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
      const double per_copy = (up ? load.up : load.down)[i];
      if (per_copy <= 0) continue;
      const double utilisation =
          iteration_time_s > 0 ? per_copy / (links[i].bandwidth * iteration_time_s) : 0.0;
      const double bytes = per_copy * copies_on(cluster, links[i].tier);
      ++tier.loaded;
      tier.bytes += bytes;
      tier.mean_utilisation += utilisation;
      if (bytes > tier.busiest_bytes) {
        tier.busiest = links[i].name + (up ? " up" : " down");
        tier.busiest_link = static_cast<int>(i);
        tier.busiest_up = up;
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

std::vector<CounterTrack> busiest_link_tracks(const Schedule& schedule, const Cluster& cluster,
                                              const Timeline& timeline, const Matching* lent) {
  const std::vector<TierLoad> tiers = tier_loads(schedule, cluster, timeline.iteration_time_s());
  std::optional<Matching> owned;
  const Matching& matching = lent_or_matched(lent, owned, schedule);
  // When a flow moves: a message over its send's timing (which ends when the data arrives,
  // on both backends); a collective's streams from the last member's arrival to the
  // member's end.
  auto interval = [&](OpRef op) {
    const OpTiming& t = timeline.at(op);
    if (std::holds_alternative<Send>(schedule.programs[op.rank][op.index]))
      return std::pair{t.start_s, t.end_s};
    double start = t.start_s;
    for (const OpRef m : matching.members(matching.instance_of(op)))
      start = std::max(start, timeline.at(m).start_s);
    return std::pair{start, t.end_s};
  };
  // One track per tier between nodes (NVLink: the ranks' own tracks show it), each the
  // rate changes on its busiest direction: + bytes / duration at a flow's start, - at its end.
  std::vector<CounterTrack> tracks;
  std::vector<std::map<double, double>> steps;
  std::map<std::pair<int, bool>, size_t> track_of;  // (link, up) -> track
  for (const TierLoad& tier : tiers) {
    if (tier.tier == LinkTier::kGpu) continue;
    track_of[{tier.busiest_link, tier.busiest_up}] = tracks.size();
    tracks.push_back({tier.busiest, "GB/s", {{0.0, 0.0}}});
    steps.emplace_back();
  }
  const int copies = copies_on(cluster, LinkTier::kNic);
  for_each_flow(schedule, [&](const Flow& f) {
    for (const Hop& hop : route(cluster, f.src, f.dst)) {
      const auto it = track_of.find({hop.link, hop.up});
      if (it == track_of.end()) continue;
      const auto [start, end] = interval(f.op);
      if (end <= start) continue;
      const double rate = f.bytes * copies / (end - start) / 1e9;
      steps[it->second][start] += rate;
      steps[it->second][end] -= rate;
    }
  });
  for (size_t k = 0; k < tracks.size(); ++k) {
    double rate = 0;
    for (const auto& [time_s, change] : steps[k]) {
      rate = std::max(0.0, rate + change);
      tracks[k].points.emplace_back(time_s, rate);
    }
  }
  return tracks;
}

}  // namespace loom
