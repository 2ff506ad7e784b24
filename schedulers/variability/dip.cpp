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
#include <optional>

#include "core/dataflow.hpp"
#include "core/errors.hpp"
#include "core/index.hpp"

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
  PerLayer<StageId> chunk_of(model.num_layers());
  for (size_t i = 0; i < mods.size(); ++i) {
    const int layers = isize(mods[i]);
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
      DipChunk chunk{.modality = static_cast<int>(i),
                     .rank = PipelineRank{c++ % P},
                     .segments = piece,
                     .producers = {},
                     .gradients = {}};
      for (const Segment& s : piece)
        for (int l = s.first; l < s.end; ++l) chunk_of[LayerId{l}] = out.chunks.next_id();
      out.chunks.push_back(std::move(chunk));
    }
  }
  const LayerGraph graph(model);
  for (const StageId x : out.chunks.ids()) {
    DipChunk& chunk = out.chunks[x];
    auto add = [&](std::vector<StageId>& to, int layer) {
      const StageId y = chunk_of[LayerId{layer}];
      if (y != x && std::find(to.begin(), to.end(), y) == to.end()) to.push_back(y);
    };
    for (const Segment& s : chunk.segments) {
      for (int p : graph.producers(s.first)) add(chunk.producers, p);
      if (graph.needs_backward(s.end - 1))
        for (int c : graph.consumers(s.end - 1)) add(chunk.gradients, c);
    }
  }
  return out;
}

IdVector<DipTaskId, double> dip_priorities(const DipTasks& tasks, const DipLayout& layout,
                                           const PerDipUnit<double>& unit_position) {
  const int modalities = isize(layout.k);
  IdVector<DipTaskId, double> priority;
  for (const DipTask& t : tasks) {
    const DipUnit unit{t.microbatch.value() * modalities + layout.chunks[t.chunk].modality};
    priority.push_back(unit_position[unit] * 1e4 + t.chunk.value());
  }
  return priority;
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
/// earlier one goes. Nothing when the rank has nothing it may run.
std::optional<DipTaskId> pick_on_rank(const DipTasks& tasks, const std::vector<DipTaskId>& ready,
                                      const RankState& st, double static_bytes, double cap_bytes,
                                      const IdVector<DipTaskId, double>& priority,
                                      const IdVector<DipTaskId, double>& ready_at) {
  std::optional<DipTaskId> pick[2];  // [0] forward queue, [1] backward queue
  double pick_start[2] = {0, 0};
  for (const DipTaskId t : ready) {
    const DipTask& task = tasks[t];
    const int q = task.forward ? 0 : 1;
    if (task.forward && static_bytes + st.live_bytes + task.activation_bytes > cap_bytes)
      continue;  // the memory cap disables the forward queue
    const double start = std::max(st.free_at, ready_at[t]);
    if (!pick[q] || start < pick_start[q] ||
        (start == pick_start[q] && priority[t] < priority[*pick[q]])) {
      pick[q] = t;
      pick_start[q] = start;
    }
  }
  if (pick[0] && pick[1] && pick_start[0] <= st.free_at && pick_start[1] <= st.free_at)
    return st.last_forward ? pick[1] : pick[0];  // both ready: alternate as 1F1B
  if (pick[0] && (!pick[1] || pick_start[0] < pick_start[1])) return pick[0];
  return pick[1];
}

}  // namespace

DipOrder dip_greedy(const DipTasks& tasks, const PerStage<DipChunk>& chunks, int ranks,
                    const PerPipelineRank<double>& static_bytes, double cap_bytes,
                    const IdVector<DipTaskId, double>& priority) {
  IdVector<DipTaskId, int> waiting(tasks.ssize(), 0);
  IdVector<DipTaskId, std::vector<DipTaskId>> users(tasks.ssize());
  for (const DipTaskId t : tasks.ids()) {
    waiting[t] = isize(tasks[t].deps);
    for (const DipTaskId d : tasks[t].deps) users[d].push_back(t);
  }
  IdVector<DipTaskId, double> ready_at(tasks.ssize(), 0), end(tasks.ssize(), 0);
  PerPipelineRank<std::vector<DipTaskId>> ready(ranks);
  auto rank_of = [&](DipTaskId t) { return chunks[tasks[t].chunk].rank; };
  for (const DipTaskId t : tasks.ids())
    if (waiting[t] == 0) ready[rank_of(t)].push_back(t);
  PerPipelineRank<RankState> state(ranks);
  DipOrder out;
  out.per_rank.resize(ranks);
  for (const double bytes : static_bytes) out.peak_bytes = std::max(out.peak_bytes, bytes);
  for (int done = 0; done < tasks.ssize(); ++done) {
    // Per rank: its pick (dual queue, memory cap) and when it would start.
    std::optional<DipTaskId> best_task;
    double best_start = std::numeric_limits<double>::infinity();
    for (const PipelineRank r : state.ids()) {
      const RankState& st = state[r];
      const std::optional<DipTaskId> chosen =
          pick_on_rank(tasks, ready[r], st, static_bytes[r], cap_bytes, priority, ready_at);
      if (!chosen) continue;
      const double start = std::max(st.free_at, ready_at[*chosen]);
      if (start < best_start) {
        best_start = start;
        best_task = chosen;
      }
    }
    if (!best_task)
      throw InfeasibleError("dip: the memory cap (" + std::to_string(cap_bytes / 1e9) +
                            " GB per rank) admits no schedule: every ready forward exceeds it");
    const DipTaskId picked = *best_task;
    const DipTask& task = tasks[picked];
    const PipelineRank r = rank_of(picked);
    RankState& st = state[r];
    auto& q = ready[r];
    q.erase(std::find(q.begin(), q.end(), picked));
    end[picked] = best_start + task.seconds;
    st.free_at = end[picked];
    st.last_forward = task.forward;
    st.live_bytes += task.forward ? task.activation_bytes : -task.activation_bytes;
    out.peak_bytes = std::max(out.peak_bytes, static_bytes[r] + st.live_bytes);
    out.makespan_s = std::max(out.makespan_s, st.free_at);
    out.per_rank[r].push_back(picked);
    for (const DipTaskId u : users[picked]) {
      ready_at[u] = std::max(ready_at[u], end[picked]);
      if (--waiting[u] == 0) ready[rank_of(u)].push_back(u);
    }
  }
  return out;
}

}  // namespace loom
