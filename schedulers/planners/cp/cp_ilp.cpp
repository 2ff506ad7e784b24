// Exact inter-GPU balancing (dissertation Eq 3.4) with GLPK, to measure LPT's gap.
//
// Eq 3.4 has one binary x[i][g] per (block, GPU): at 64k tokens on 8 GPUs that is 4096
// binaries with G! symmetric copies of every solution, hopeless for branch and bound.
// Two exact reformulations shrink it:
//   - blocks with equal W are interchangeable: n[d][g] in {0..count_d} blocks of the d-th
//     distinct workload on GPU g, with sum_g n[d][g] = count_d;
//   - GPUs are interchangeable: require load_0 >= load_1 >= ... >= load_{G-1}.
// LPT is run first; if it meets the trivial bound it is optimal. Otherwise the ILP asks
// for C <= LPT - 1: infeasible proves LPT optimal, a solution is strictly better.
#include <glpk.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "core/index.hpp"
#include "schedulers/planners/cp/cp_plan.hpp"

namespace loom {
namespace {

struct Distinct {
  std::int64_t workload = 0;
  std::vector<std::size_t> blocks;  ///< in sequence order
};

std::int64_t makespan_of(const std::vector<std::int64_t>& workloads, const std::vector<int>& owners,
                         int cp) {
  PerCpRank<std::int64_t> load(cp, 0);
  for (std::size_t b = 0; b < workloads.size(); ++b) load[CpRank{owners[b]}] += workloads[b];
  return *std::max_element(load.begin(), load.end());
}

/// Branch-and-bound progress seen from GLPK's callback.
struct Search {
  double bound = 0;             ///< best open node's bound: a lower bound on the optimum
  std::int64_t selections = 0;  ///< subproblems selected so far
  std::int64_t node_limit = 0;  ///< 0 = none
};

void on_search_event(glp_tree* tree, void* info) {
  auto* search = static_cast<Search*>(info);
  const int node = glp_ios_best_node(tree);
  if (node != 0) search->bound = glp_ios_node_bound(tree, node);
  // A node budget stops the search at the same point on every run (a time limit does not).
  if (glp_ios_reason(tree) == GLP_ISELECT && search->node_limit > 0 &&
      ++search->selections > search->node_limit)
    glp_ios_terminate(tree);
}

/// Builds the reformulated Eq 3.4 with C in [lower, upper]. Column (d, g) is 1 + d*G + g;
/// C is the last column.
glp_prob* build_model(const std::vector<Distinct>& distinct, int cp, std::int64_t lower,
                      std::int64_t upper) {
  glp_prob* lp = glp_create_prob();
  glp_set_obj_dir(lp, GLP_MIN);
  const int D = isize(distinct);
  const int c_col = D * cp + 1;
  glp_add_cols(lp, c_col);
  for (int d = 0; const Distinct& group : distinct) {
    for (int g = 0; g < cp; ++g) {
      const int col = 1 + d * cp + g;
      glp_set_col_kind(lp, col, GLP_IV);
      glp_set_col_bnds(lp, col, GLP_DB, 0, static_cast<double>(group.blocks.size()));
    }
    ++d;
  }
  glp_set_col_kind(lp, c_col, GLP_IV);
  // GLPK rejects a double bound with equal ends: fix the column instead.
  glp_set_col_bnds(lp, c_col, lower == upper ? GLP_FX : GLP_DB, static_cast<double>(lower),
                   static_cast<double>(upper));
  glp_set_obj_coef(lp, c_col, 1);

  std::vector<int> ia{0}, ja{0};
  std::vector<double> ar{0};
  auto add = [&](int row, int col, double value) {
    ia.push_back(row), ja.push_back(col), ar.push_back(value);
  };
  // Every block of workload d placed once.
  const int first_assign = glp_add_rows(lp, D);
  for (int d = 0; const Distinct& group : distinct) {
    const auto count = static_cast<double>(group.blocks.size());
    glp_set_row_bnds(lp, first_assign + d, GLP_FX, count, count);
    for (int g = 0; g < cp; ++g) add(first_assign + d, 1 + d * cp + g, 1);
    ++d;
  }
  // load_g - C <= 0.
  const int first_load = glp_add_rows(lp, cp);
  for (int g = 0; g < cp; ++g) {
    glp_set_row_bnds(lp, first_load + g, GLP_UP, 0, 0);
    for (int d = 0; const Distinct& group : distinct) {
      add(first_load + g, 1 + d * cp + g, static_cast<double>(group.workload));
      ++d;
    }
    add(first_load + g, c_col, -1);
  }
  // load_g - load_{g+1} >= 0 (symmetry breaking).
  if (cp > 1) {
    const int first_sym = glp_add_rows(lp, cp - 1);
    for (int g = 0; g + 1 < cp; ++g) {
      glp_set_row_bnds(lp, first_sym + g, GLP_LO, 0, 0);
      for (int d = 0; const Distinct& group : distinct) {
        const auto w = static_cast<double>(group.workload);
        add(first_sym + g, 1 + d * cp + g, w);
        add(first_sym + g, 1 + d * cp + g + 1, -w);
        ++d;
      }
    }
  }
  glp_load_matrix(lp, isize(ia) - 1, ia.data(), ja.data(), ar.data());
  return lp;
}

/// Owners from the ILP's counts; zero-workload blocks go round-robin (they cost nothing).
std::vector<int> owners_from_counts(glp_prob* lp, const std::vector<Distinct>& distinct,
                                    const std::vector<std::int64_t>& workloads, int cp) {
  std::vector<int> owners(workloads.size(), 0);
  for (int d = 0; const Distinct& group : distinct) {
    std::size_t next = 0;
    for (int g = 0; g < cp; ++g) {
      const long long n = std::llround(glp_mip_col_val(lp, 1 + d * cp + g));
      for (long long i = 0; i < n; ++i) owners[group.blocks[next++]] = g;
    }
    ++d;
  }
  int next_rank = 0;
  for (std::size_t b = 0; b < workloads.size(); ++b) {
    if (workloads[b] == 0) owners[b] = next_rank++ % cp;
  }
  return owners;
}

}  // namespace

IlpResult ilp_owners(const std::vector<std::int64_t>& workloads, int cp,
                     const IlpOptions& options) {
  IlpResult result;
  result.owners = lpt_owners(workloads, cp);
  result.makespan = makespan_of(workloads, result.owners, cp);
  result.lower_bound = makespan_lower_bound(workloads, cp);
  if (result.makespan <= result.lower_bound) {
    result.optimal = true;
    return result;
  }
  std::map<std::int64_t, Distinct> by_workload;
  for (std::size_t b = 0; b < workloads.size(); ++b) {
    if (workloads[b] == 0) continue;
    by_workload[workloads[b]].workload = workloads[b];
    by_workload[workloads[b]].blocks.push_back(b);
  }
  std::vector<Distinct> distinct;
  for (auto& [w, group] : by_workload) distinct.push_back(std::move(group));

  const int previous_output = glp_term_out(GLP_OFF);  // library code never prints
  glp_prob* lp = build_model(distinct, cp, result.lower_bound, result.makespan - 1);
  glp_smcp simplex;
  glp_init_smcp(&simplex);
  simplex.msg_lev = GLP_MSG_OFF;
  Search search{static_cast<double>(result.lower_bound), 0, options.node_limit};
  int mip_status = GLP_NOFEAS;
  if (glp_simplex(lp, &simplex) == 0 && glp_get_status(lp) == GLP_OPT) {
    search.bound = std::max(search.bound, glp_get_obj_val(lp));
    glp_iocp mip;
    glp_init_iocp(&mip);
    mip.msg_lev = GLP_MSG_OFF;
    mip.tm_lim = static_cast<int>(std::min(options.time_limit_s * 1000.0, 2.0e9));
    mip.cb_func = on_search_event;
    mip.cb_info = &search;
    glp_intopt(lp, &mip);
    mip_status = glp_mip_status(lp);
  } else if (glp_get_status(lp) != GLP_NOFEAS) {
    mip_status = GLP_UNDEF;  // LP relaxation not solved: no proof either way
  }
  if (mip_status == GLP_OPT || mip_status == GLP_FEAS) {
    result.owners = owners_from_counts(lp, distinct, workloads, cp);
    result.makespan = makespan_of(workloads, result.owners, cp);
  }
  if (mip_status == GLP_OPT || mip_status == GLP_NOFEAS) {
    result.optimal = true;
    result.lower_bound = result.makespan;
  } else {
    // Stopped early: the optimum is >= the best open node's bound (integral: round up).
    const auto open_bound = static_cast<std::int64_t>(std::ceil(search.bound - 1e-6));
    result.lower_bound = std::max(result.lower_bound, std::min(open_bound, result.makespan));
    result.optimal = result.lower_bound == result.makespan;
  }
  glp_delete_prob(lp);
  glp_term_out(previous_output);
  return result;
}

}  // namespace loom
