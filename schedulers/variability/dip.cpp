// DIP-like: separated modality partitioning (DIP §4 "separated partitioning") and the
// greedy dual-queue interleaving that turns a segment priority order into per-rank
// programs under a memory cap. The search over priorities is dip_search.cpp, the lowering
// into the Schedule IR dip_lower.cpp.
//
//   rank 0: [vision c0][vision c2] [llm c0][llm c4] ...   chunks of every modality share
//   rank 1: [vision c1][vision c3] [llm c1][llm c5] ...   the same P ranks (colocated)
#include "schedulers/variability/dip.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/dataflow.hpp"
#include "core/errors.hpp"

namespace loom {

DipLayout dip_layout(const SchedulingProblem& problem) {
  const Model& model = *problem.model;
  const Branches branches = split_branches(model, "dip");
  std::vector<std::vector<int>> mods = branches.encoders;
  mods.push_back(branches.llm);
  // DIP profiles one microbatch (dissertation Table 4.1): the problem's first one.
  const std::vector<double> costs = view_costs(problem);
  const int P = problem.parallel.pp;
  std::vector<double> t;
  for (const auto& layers : mods) {
    double sum = 0;
    for (int l : layers) sum += costs[static_cast<size_t>(l)];
    t.push_back(sum);
  }
  const double t1 = std::max(*std::min_element(t.begin(), t.end()), 1e-12);
  DipLayout out;
  out.ranks = P;
  std::vector<int> chunk_of(static_cast<size_t>(model.num_layers()), -1);
  for (size_t i = 0; i < mods.size(); ++i) {
    const int layers = static_cast<int>(mods[i].size());
    const std::string what =
        i < branches.names.size() ? "modality '" + branches.names[i] + "'" : "LLM";
    if (layers < P)
      throw InputError("parallel.pp: dip cuts every modality into >= pp chunks, but " + what +
                       " has " + std::to_string(layers) + " layers < pp = " + std::to_string(P));
    // K_i = floor(T_i / T_1) (sub-microbatch size = the microbatch: see the docs).
    const int k = std::clamp(static_cast<int>(std::floor(t[i] / t1)), 1, layers / P);
    out.k.push_back(k);
    int c = 0;
    for (auto& piece : partition_branch(model, mods[i], costs, P * k, what)) {
      DipChunk chunk{static_cast<int>(i), c++ % P, piece, {}, {}};
      for (const Segment& s : piece)
        for (int l = s.first; l < s.end; ++l)
          chunk_of[static_cast<size_t>(l)] = static_cast<int>(out.chunks.size());
      out.chunks.push_back(std::move(chunk));
    }
  }
  const LayerGraph graph(model);
  for (size_t x = 0; x < out.chunks.size(); ++x) {
    DipChunk& chunk = out.chunks[x];
    auto add = [&](std::vector<int>& to, int layer) {
      const int y = chunk_of[static_cast<size_t>(layer)];
      if (y != static_cast<int>(x) && std::find(to.begin(), to.end(), y) == to.end())
        to.push_back(y);
    };
    for (const Segment& s : chunk.segments) {
      for (int p : graph.producers(s.first)) add(chunk.producers, p);
      if (graph.needs_backward(s.end - 1))
        for (int c : graph.consumers(s.end - 1)) add(chunk.gradients, c);
    }
  }
  return out;
}

namespace {

struct RankState {
  double free_at = 0;
  double live_bytes = 0;
  bool last_forward = false;
};

/// The dual-queue choice of one rank: the forward and the backward queue each offer
/// their earliest-startable task (priority breaks ties; the memory cap disables a forward
/// that would not fit); when both can start now they alternate as in 1F1B, otherwise the
/// earlier one goes. -1 when the rank has nothing it may run.
int pick_on_rank(const std::vector<DipTask>& tasks, const std::vector<int>& ready,
                 const RankState& st, double static_bytes, double cap_bytes,
                 const std::vector<double>& priority, const std::vector<double>& ready_at) {
  int pick[2] = {-1, -1};  // [0] forward queue, [1] backward queue
  double pick_start[2] = {0, 0};
  for (int t : ready) {
    const DipTask& task = tasks[static_cast<size_t>(t)];
    const int q = task.forward ? 0 : 1;
    if (task.forward && static_bytes + st.live_bytes + task.activation_bytes > cap_bytes)
      continue;  // the memory cap disables the forward queue
    const double start = std::max(st.free_at, ready_at[static_cast<size_t>(t)]);
    if (pick[q] < 0 || start < pick_start[q] ||
        (start == pick_start[q] &&
         priority[static_cast<size_t>(t)] < priority[static_cast<size_t>(pick[q])])) {
      pick[q] = t;
      pick_start[q] = start;
    }
  }
  if (pick[0] >= 0 && pick[1] >= 0 && pick_start[0] <= st.free_at && pick_start[1] <= st.free_at)
    return st.last_forward ? pick[1] : pick[0];  // both ready: alternate as 1F1B
  if (pick[0] >= 0 && (pick[1] < 0 || pick_start[0] < pick_start[1])) return pick[0];
  return pick[1];
}

}  // namespace

DipOrder dip_greedy(const std::vector<DipTask>& tasks, const std::vector<DipChunk>& chunks,
                    int ranks, const std::vector<double>& static_bytes, double cap_bytes,
                    const std::vector<double>& priority) {
  const size_t n = tasks.size();
  std::vector<int> waiting(n, 0);
  std::vector<std::vector<int>> users(n);
  for (size_t t = 0; t < n; ++t) {
    waiting[t] = static_cast<int>(tasks[t].deps.size());
    for (int d : tasks[t].deps) users[static_cast<size_t>(d)].push_back(static_cast<int>(t));
  }
  std::vector<double> ready_at(n, 0), end(n, 0);
  std::vector<std::vector<int>> ready(static_cast<size_t>(ranks));
  auto rank_of = [&](size_t t) { return chunks[static_cast<size_t>(tasks[t].chunk)].rank; };
  for (size_t t = 0; t < n; ++t)
    if (waiting[t] == 0) ready[static_cast<size_t>(rank_of(t))].push_back(static_cast<int>(t));
  std::vector<RankState> state(static_cast<size_t>(ranks));
  DipOrder out;
  out.per_rank.resize(static_cast<size_t>(ranks));
  for (int r = 0; r < ranks; ++r)
    out.peak_bytes = std::max(out.peak_bytes, static_bytes[static_cast<size_t>(r)]);
  for (size_t done = 0; done < n; ++done) {
    // Per rank: its pick (dual queue, memory cap) and when it would start.
    int best_task = -1;
    double best_start = std::numeric_limits<double>::infinity();
    for (int r = 0; r < ranks; ++r) {
      const RankState& st = state[static_cast<size_t>(r)];
      const int chosen =
          pick_on_rank(tasks, ready[static_cast<size_t>(r)], st,
                       static_bytes[static_cast<size_t>(r)], cap_bytes, priority, ready_at);
      if (chosen < 0) continue;
      const double start = std::max(st.free_at, ready_at[static_cast<size_t>(chosen)]);
      if (start < best_start) {
        best_start = start;
        best_task = chosen;
      }
    }
    if (best_task < 0)
      throw InfeasibleError("dip: the memory cap (" + std::to_string(cap_bytes / 1e9) +
                            " GB per rank) admits no schedule: every ready forward exceeds it");
    const DipTask& task = tasks[static_cast<size_t>(best_task)];
    const int r = rank_of(static_cast<size_t>(best_task));
    RankState& st = state[static_cast<size_t>(r)];
    auto& q = ready[static_cast<size_t>(r)];
    q.erase(std::find(q.begin(), q.end(), best_task));
    end[static_cast<size_t>(best_task)] = best_start + task.seconds;
    st.free_at = end[static_cast<size_t>(best_task)];
    st.last_forward = task.forward;
    st.live_bytes += task.forward ? task.activation_bytes : -task.activation_bytes;
    out.peak_bytes = std::max(out.peak_bytes, static_bytes[static_cast<size_t>(r)] + st.live_bytes);
    out.makespan_s = std::max(out.makespan_s, st.free_at);
    out.per_rank[static_cast<size_t>(r)].push_back(best_task);
    for (int u : users[static_cast<size_t>(best_task)]) {
      ready_at[static_cast<size_t>(u)] =
          std::max(ready_at[static_cast<size_t>(u)], end[static_cast<size_t>(best_task)]);
      if (--waiting[static_cast<size_t>(u)] == 0)
        ready[static_cast<size_t>(rank_of(static_cast<size_t>(u)))].push_back(u);
    }
  }
  return out;
}

}  // namespace loom
