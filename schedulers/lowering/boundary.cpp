#include "schedulers/lowering/boundary.hpp"

#include <algorithm>

#include "core/errors.hpp"

namespace loom {
namespace {

bool contains(const std::vector<int>& gpus, int gpu) {
  return std::find(gpus.begin(), gpus.end(), gpu) != gpus.end();
}

std::vector<int> sorted_union(std::vector<int> a, const std::vector<int>& b) {
  a.insert(a.end(), b.begin(), b.end());
  std::sort(a.begin(), a.end());
  a.erase(std::unique(a.begin(), a.end()), a.end());
  return a;
}

/// §3.1: leaders exchange one message per overlapping shard pair; the receiving side's
/// leader broadcasts the reconstructed shard to its TP x CP group.
BoundaryPlan plan_noncolocated(const ModuleLayout& src, const ModuleLayout& dst, double batch,
                               double bpu, BoundaryKind kind) {
  BoundaryPlan plan;
  plan.kind = kind;
  const int src_stage = src.pp - 1;
  for (const ShardOverlap& o : shard_overlaps(src.dp, dst.dp, batch)) {
    const int s_leader = src.stage_gpu(o.src_replica, src_stage);
    const int d_leader = dst.stage_gpu(o.dst_replica, 0);
    const double bytes = o.units * bpu;
    plan.forward.messages.push_back({s_leader, d_leader, bytes, o.src_replica, o.dst_replica});
    plan.backward.messages.push_back({d_leader, s_leader, bytes, o.dst_replica, o.src_replica});
  }
  if (dst.gpus_per_stage() > 1) {
    for (int d = 0; d < dst.dp; ++d)
      plan.forward.broadcasts.push_back({stage_group(dst, d, 0), batch / dst.dp * bpu, d});
  }
  if (src.gpus_per_stage() > 1) {
    for (int d = 0; d < src.dp; ++d)
      plan.backward.broadcasts.push_back({stage_group(src, d, src_stage), batch / src.dp * bpu, d});
  }
  return plan;
}

/// §3.2 and App. A.4: on a shared rank set every GPU already holds the slices of its own
/// source shard. Fan-in all-gathers, per position inside the source TP x CP group, the
/// GPUs whose source slices form one destination shard (fan-in scale 2 is "a 2-rank
/// all-gather", A.4); fan-out backward is the dual over sibling destination shards.
/// Equal-DP and fan-out forward, fan-in backward are rank-local selections.
BoundaryPlan plan_colocated(const ModuleLayout& src, const ModuleLayout& dst, double batch,
                            double bpu, BoundaryKind kind) {
  BoundaryPlan plan;
  plan.kind = kind;
  plan.colocated = true;
  const int last = src.pp - 1;
  const auto overlaps = shard_overlaps(src.dp, dst.dp, batch);
  for (int dv = 0; dv < dst.dp; ++dv) {
    const std::vector<int> group = stage_group(dst, dv, 0);
    std::vector<int> sources;
    for (const ShardOverlap& o : overlaps)
      if (o.dst_replica == dv) sources.push_back(o.src_replica);
    std::vector<int> covered;  // destination GPUs that end up with the shard locally
    if (kind == BoundaryKind::kFanIn) {
      for (int q = 0; q < src.gpus_per_stage(); ++q) {
        std::vector<int> members;
        for (int du : sources) members.push_back(src.stage_gpu(du, last) + q);  // stage_group()[q]
        plan.forward.allgathers.push_back({members, batch / dst.dp * bpu, dv});
        covered = sorted_union(covered, members);
      }
    } else {
      covered = stage_group(src, sources.front(), last);
    }
    // Grids that do not nest: the missing shard travels point-to-point from a holder.
    const int holder = stage_group(src, sources.front(), last).front();
    for (int g : group) {
      if (!contains(covered, g))
        plan.forward.messages.push_back({holder, g, batch / dst.dp * bpu, sources.front(), dv});
    }
    if (kind == BoundaryKind::kFanOut) continue;
    for (int du : sources) {  // backward: select the source interval from the gradient
      for (int h : stage_group(src, du, last)) {
        if (!contains(group, h))
          plan.backward.messages.push_back({group.front(), h, batch / src.dp * bpu, dv, du});
      }
    }
  }
  if (kind != BoundaryKind::kFanOut) return plan;
  for (int du = 0; du < src.dp; ++du) {
    std::vector<int> children;
    for (const ShardOverlap& o : overlaps)
      if (o.src_replica == du) children.push_back(o.dst_replica);
    std::vector<int> covered;
    for (int q = 0; q < dst.gpus_per_stage(); ++q) {
      std::vector<int> members;
      for (int dv : children) members.push_back(dst.stage_gpu(dv, 0) + q);  // stage_group()[q]
      plan.backward.allgathers.push_back({members, batch / src.dp * bpu, du});
      covered = sorted_union(covered, members);
    }
    for (int h : stage_group(src, du, last)) {
      if (!contains(covered, h))
        plan.backward.messages.push_back({stage_group(dst, children.front(), 0).front(), h,
                                          batch / src.dp * bpu, children.front(), du});
    }
  }
  return plan;
}

}  // namespace

const char* to_string(BoundaryKind kind) {
  switch (kind) {
    case BoundaryKind::kEqual:
      return "equal";
    case BoundaryKind::kFanIn:
      return "fan-in";
    case BoundaryKind::kFanOut:
      return "fan-out";
  }
  return "?";
}

BoundaryKind boundary_kind(int dp_src, int dp_dst, const std::string& what) {
  if (dp_src < 1 || dp_dst < 1 || (dp_src % dp_dst != 0 && dp_dst % dp_src != 0)) {
    throw InputError(what + ": data-parallel degrees " + std::to_string(dp_src) + " -> " +
                     std::to_string(dp_dst) +
                     " do not nest (one must divide the other for a fan-in or fan-out boundary)");
  }
  if (dp_src == dp_dst) return BoundaryKind::kEqual;
  return dp_src > dp_dst ? BoundaryKind::kFanIn : BoundaryKind::kFanOut;
}

std::vector<ShardOverlap> shard_overlaps(int dp_src, int dp_dst, double batch_units) {
  std::vector<ShardOverlap> out;
  // Shards are equal intervals of the batch; with nested degrees each finer shard lies in
  // exactly one coarser shard, so the overlaps are the finer shards in batch order.
  const int fine = std::max(dp_src, dp_dst);
  for (int k = 0; k < fine; ++k) {
    const int su = dp_src == fine ? k : k * dp_src / fine;
    const int dv = dp_dst == fine ? k : k * dp_dst / fine;
    out.push_back({su, dv, batch_units / fine});
  }
  return out;
}

double BoundaryLeg::message_bytes() const {
  double total = 0;
  for (const BoundaryMessage& m : messages) total += m.bytes;
  return total;
}

std::vector<int> stage_group(const ModuleLayout& layout, int replica, int stage) {
  std::vector<int> gpus;
  const int first = layout.stage_gpu(replica, stage);
  for (int k = 0; k < layout.gpus_per_stage(); ++k) gpus.push_back(first + k);
  return gpus;
}

BoundaryPlan plan_boundary(const ModuleLayout& src, const ModuleLayout& dst, double batch_units,
                           double bytes_per_unit, const std::string& what) {
  const BoundaryKind kind = boundary_kind(src.dp, dst.dp, what);
  if (colocated(src, dst)) return plan_colocated(src, dst, batch_units, bytes_per_unit, kind);
  const bool disjoint = src.end_gpu() <= dst.first_gpu || dst.end_gpu() <= src.first_gpu;
  if (!disjoint) {
    throw InputError(what +
                     ": rank sets overlap without being identical (colocated modules "
                     "share one rank set, non-colocated ones use disjoint sets)");
  }
  return plan_noncolocated(src, dst, batch_units, bytes_per_unit, kind);
}

}  // namespace loom
