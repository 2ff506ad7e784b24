// DIP's schedule search against its budgets (issue 4: "DIP's search within its configured
// budget"). For a config, runs the dip scheduler with several iteration budgets under a
// time budget and prints what the search did: iterations and rollouts run, wall time,
// and the greedy makespan of the root order vs. the best order found.
//
//   loom_bench_dip CONFIG [time_budget_s=1] [--set key=value ...]
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "app/study.hpp"
#include "core/errors.hpp"
#include "schedulers/variability/dip.hpp"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: loom_bench_dip CONFIG [time_budget_s=1] [key=value ...]\n");
    return 2;
  }
  const double budget = argc > 2 ? std::atof(argv[2]) : 1.0;
  std::vector<std::string> overrides = {"schedule.name=dip", "schedule.dip.search_iterations=1"};
  for (int i = 3; i < argc; ++i) overrides.push_back(argv[i]);
  try {
    const auto study = loom::prepare_study(argv[1], overrides);
    std::printf("%10s %10s %10s %9s %10s %12s %12s\n", "iter_cap", "budget_s", "iterations",
                "rollouts", "search_s", "root_ms", "best_ms");
    for (int cap : {10, 100, 1000, 100000}) {
      loom::SchedulingProblem p = study->problem;
      loom::set_option(p.schedule, "dip", "search_iterations", std::int64_t{cap});
      loom::set_option(p.schedule, "dip", "search_budget_s", budget);
      loom::DipSearchStats s;
      loom::dip_schedule(p, &s);
      std::printf("%10d %10.3f %10d %9d %10.3f %12.3f %12.3f\n", cap, budget, s.iterations,
                  s.rollouts, s.seconds, s.initial_makespan_s * 1e3, s.best_makespan_s * 1e3);
    }
  } catch (const loom::InputError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  } catch (const loom::InfeasibleError& e) {
    std::fprintf(stderr, "infeasible: %s\n", e.what());
    return 3;
  }
  return 0;
}
