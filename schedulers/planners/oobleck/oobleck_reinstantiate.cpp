// Pipeline reinstantiation on node loss and addition (dissertation §2.5.1, Fig 2.8, App. A.2)
// and the layer copies it needs from surviving replicas.
//
//   lost node in a 4-node pipeline, a 3-node template exists  -> simple  (Fig 2.8a)
//   a 2-node pipeline keeps 1 node, n_0 = 2, another has > n_0 -> borrow  (Fig 2.8b)
//   ... and every other pipeline has exactly n_0 nodes         -> merge   (Fig 2.8c)
// A merge of a pipeline left with k < n_0 nodes and an n_0-node one has 2 n_0 - k nodes, and
// a template of that size exists (App. A.2, Theorem 2).
#include <algorithm>
#include <map>
#include <set>

#include "core/errors.hpp"
#include "core/index.hpp"
#include "schedulers/planners/oobleck/oobleck_planner.hpp"

namespace loom::oobleck {

const char* to_string(ReconfigurationCase c) {
  switch (c) {
    case ReconfigurationCase::kNone:
      return "none";
    case ReconfigurationCase::kSimple:
      return "simple";
    case ReconfigurationCase::kBorrow:
      return "borrow";
    case ReconfigurationCase::kMerge:
      return "merge";
    case ReconfigurationCase::kAddNodes:
      return "add-nodes";
    case ReconfigurationCase::kFull:
      return "full";
  }
  return "?";
}

namespace {

using NodeLists = std::vector<std::vector<int>>;

struct Steps {
  NodeLists pipes;
  std::vector<std::string> actions;
  bool borrowed = false, merged = false, affected = false;
};

std::string size_change(size_t i, size_t from, size_t to) {
  return "pipeline " + std::to_string(i) + ": " + std::to_string(from) + " -> " +
         std::to_string(to) + " nodes";
}

/// Borrow (Fig 2.8b) or, when the others cannot spare enough, merge (Fig 2.8c) until
/// pipeline i has n_0 nodes; merged pipelines are left empty (and dropped later).
void repair(Steps& st, size_t i, int n0) {
  auto& pipes = st.pipes;
  int need = n0 - isize(pipes[i]);
  int spare = 0;
  for (size_t j = 0; j < pipes.size(); ++j)
    if (j != i && isize(pipes[j]) > n0) spare += isize(pipes[j]) - n0;
  if (spare >= need) {
    while (need > 0) {  // largest donor first, then the lowest index
      size_t donor = pipes.size();
      for (size_t j = 0; j < pipes.size(); ++j) {
        if (j == i || isize(pipes[j]) <= n0) continue;
        if (donor == pipes.size() || pipes[j].size() > pipes[donor].size()) donor = j;
      }
      st.actions.push_back(size_change(donor, pipes[donor].size(), pipes[donor].size() - 1) +
                           " (lends node " + std::to_string(pipes[donor].back()) + " to pipeline " +
                           std::to_string(i) + ")");
      pipes[i].push_back(pipes[donor].back());
      pipes[donor].pop_back();
      --need;
    }
    st.borrowed = true;
    return;
  }
  // Merge with the smallest other non-empty pipeline until n_0 nodes (App. A.2).
  while (isize(pipes[i]) < n0) {
    size_t other = pipes.size();
    for (size_t j = 0; j < pipes.size(); ++j) {
      if (j == i || pipes[j].empty()) continue;
      if (other == pipes.size() || pipes[j].size() < pipes[other].size()) other = j;
    }
    if (other == pipes.size()) return;  // nothing left to merge with: caller falls back
    st.actions.push_back("pipeline " + std::to_string(i) + " (" + std::to_string(pipes[i].size()) +
                         " nodes) merged with pipeline " + std::to_string(other) + " (" +
                         std::to_string(pipes[other].size()) + " nodes)");
    pipes[i].insert(pipes[i].begin(), pipes[other].begin(), pipes[other].end());
    pipes[other].clear();
    st.merged = true;
  }
}

/// Node id -> layers it holds under `inst`.
std::map<int, std::set<int>> ownership(const PerTemplate<PipelineTemplate>& templates,
                                       const Instantiation& inst) {
  std::map<int, std::set<int>> own;
  for (const Pipeline& p : inst.pipelines) {
    for (const TemplateStage& s : templates[p.template_index].stages) {
      for (int l = s.layer_begin; l < s.layer_end; ++l) own[p.nodes[s.node]].insert(l);
    }
  }
  return own;
}

std::vector<LayerCopy> layer_copies(const PlanningProblem& problem,
                                    const PerTemplate<PipelineTemplate>& templates,
                                    const Instantiation& before, const Instantiation& after,
                                    const std::set<int>& lost) {
  const auto old_own = ownership(templates, before);
  const auto new_own = ownership(templates, after);
  std::map<int, std::vector<int>> holders;  // layer -> surviving nodes that held it
  for (const auto& [node, layers] : old_own) {
    if (lost.count(node)) continue;
    for (int l : layers) holders[l].push_back(node);
  }
  std::map<int, double> sent;
  std::vector<LayerCopy> copies;
  for (const auto& [node, layers] : new_own) {
    const auto had = old_own.find(node);
    for (int l : layers) {
      if (had != old_own.end() && had->second.count(l)) continue;
      const auto h = holders.find(l);
      if (h == holders.end()) {
        throw InfeasibleError("oobleck: layer " + std::to_string(l) +
                              " has no surviving replica: every node holding it failed, so "
                              "training must restart from a checkpoint (dissertation §2.3.2)");
      }
      int from = h->second.front();
      for (int c : h->second)
        if (sent[c] < sent[from]) from = c;  // least loaded, then the lowest id
      const double bytes = problem.layers[static_cast<size_t>(l)].state_bytes;
      sent[from] += bytes;
      copies.push_back({l, from, node, bytes});
    }
  }
  return copies;
}

/// Each pipeline without its lost nodes (order kept).
Steps remove_lost(const Instantiation& current, const std::set<int>& lost) {
  Steps st;
  for (size_t i = 0; i < current.pipelines.size(); ++i) {
    const PerPipelineNode<int>& had = current.pipelines[i].nodes;
    std::vector<int> keep;
    for (int n : had)
      if (!lost.count(n)) keep.push_back(n);
    if (keep.size() != had.size()) {
      st.affected = true;
      st.actions.push_back(size_change(i, had.size(), keep.size()) + " (lost " +
                           std::to_string(had.size() - keep.size()) + ")");
    }
    st.pipes.push_back(std::move(keep));
  }
  return st;
}

/// Added nodes: whole n_0-node pipelines first (more replicas), then one at a time to the
/// smallest pipeline a larger template exists for. Returns the nodes it could not place.
std::vector<int> place_added(Steps& st, const std::vector<int>& added, int n0, int nmax) {
  auto next = added.begin();  // the first added node not placed yet
  while (added.end() - next >= n0) {
    st.pipes.emplace_back(next, next + n0);
    st.actions.push_back("pipeline " + std::to_string(st.pipes.size() - 1) + ": new with " +
                         std::to_string(n0) + " added nodes");
    next += n0;
  }
  for (; next != added.end(); ++next) {
    size_t pick = st.pipes.size();
    for (size_t j = 0; j < st.pipes.size(); ++j) {
      const int sz = isize(st.pipes[j]);
      if (sz < n0 || sz >= nmax) continue;
      if (pick == st.pipes.size() || st.pipes[j].size() < st.pipes[pick].size()) pick = j;
    }
    if (pick == st.pipes.size()) break;
    st.actions.push_back(size_change(pick, st.pipes[pick].size(), st.pipes[pick].size() + 1) +
                         " (gains node " + std::to_string(*next) + ")");
    st.pipes[pick].push_back(*next);
  }
  return {next, added.end()};
}

/// Whether the steps left >= f+1 pipelines, each of a template's size, and no more
/// pipelines than microbatches (Eq 2.6 gives each at least one; many added nodes can
/// form more n_0-node pipelines than that, and Eq 2.5 then decides afresh).
bool valid_layout(const Steps& st, int n0, int nmax, int f, int microbatches) {
  int pipelines = 0;
  for (const auto& p : st.pipes) {
    if (p.empty()) continue;
    ++pipelines;
    if (isize(p) < n0 || isize(p) > nmax) return false;
  }
  return pipelines >= f + 1 && pipelines <= microbatches;
}

}  // namespace

Reinstantiation reinstantiate(const PlanningProblem& problem,
                              const PerTemplate<PipelineTemplate>& templates,
                              const Instantiation& current, const std::vector<int>& lost,
                              const std::vector<int>& added) {
  const int n0 = templates.front().nodes, nmax = templates.back().nodes;
  const int f = problem.fault_tolerance;
  const std::set<int> lost_set(lost.begin(), lost.end());
  Steps st = remove_lost(current, lost_set);
  int remaining = isize(added);
  for (const auto& p : st.pipes) remaining += isize(p);
  if (remaining < (f + 1) * n0)
    throw InfeasibleError("oobleck: " + too_few_nodes_message(remaining, f, n0));
  for (size_t i = 0; i < st.pipes.size(); ++i) {
    const int r = isize(st.pipes[i]);
    if (r > 0 && r < n0) repair(st, i, n0);
  }
  const std::vector<int> unplaced = place_added(st, added, n0, nmax);

  Reinstantiation out;
  out.actions = std::move(st.actions);
  const int microbatches =
      problem.microbatch_size > 0 ? problem.global_batch / problem.microbatch_size : 0;
  if (unplaced.empty() && valid_layout(st, n0, nmax, f, microbatches)) {
    out.next.counts = PerTemplate<int>(templates.ssize(), 0);
    for (auto& p : st.pipes) {
      if (p.empty()) continue;
      const TemplateId t{isize(p) - n0};  // templates are n_0, n_0 + 1, ...
      ++out.next.counts[t];
      out.next.pipelines.push_back({t, PerPipelineNode<int>(std::move(p)), 0});
    }
    out.kind = st.merged       ? ReconfigurationCase::kMerge
               : st.borrowed   ? ReconfigurationCase::kBorrow
               : st.affected   ? ReconfigurationCase::kSimple
               : added.empty() ? ReconfigurationCase::kNone
                               : ReconfigurationCase::kAddNodes;
    distribute_batch(problem, templates, out.next);
  } else {
    // The incremental steps could not keep f+1 pipelines on templates: Eq 2.5 afresh.
    std::vector<int> nodes;
    for (const auto& p : st.pipes) nodes.insert(nodes.end(), p.begin(), p.end());
    nodes.insert(nodes.end(), unplaced.begin(), unplaced.end());
    out.next = instantiate(problem, templates, nodes);
    out.kind = ReconfigurationCase::kFull;
    out.actions.push_back("re-instantiated all " + std::to_string(nodes.size()) +
                          " nodes from the templates (Eq 2.5)");
  }
  out.copies = layer_copies(problem, templates, current, out.next, lost_set);
  return out;
}

double copy_time_s(const std::vector<LayerCopy>& copies, double bandwidth_bytes_per_s,
                   double latency_s) {
  if (copies.empty()) return 0;
  std::map<int, double> sent, received;
  for (const LayerCopy& c : copies) {
    sent[c.from_node] += c.bytes;
    received[c.to_node] += c.bytes;
  }
  double worst = 0;
  for (const auto& [n, b] : sent) worst = std::max(worst, b);
  for (const auto& [n, b] : received) worst = std::max(worst, b);
  return worst / bandwidth_bytes_per_s + latency_s;
}

}  // namespace loom::oobleck
