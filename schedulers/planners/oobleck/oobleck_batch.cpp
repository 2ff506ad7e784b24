// Batch distribution across heterogeneous pipelines (dissertation §2.4.2.2, Eq 2.6):
// integer microbatches per pipeline, summing to B / b, minimising the variance of the
// pipelines' iteration times. The paper hands Eq 2.6 to a MINLP solver (MindtPy, §2.6);
// here small instances are solved exhaustively and larger ones by equalising the times in
// the continuous relaxation, rounding, and pairwise one-microbatch exchanges.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>

#include "core/errors.hpp"
#include "core/index.hpp"
#include "schedulers/planners/oobleck/oobleck_planner.hpp"

namespace loom::oobleck {
namespace {

using Pipes = std::vector<const PipelineTemplate*>;

double variance_of(const Pipes& pipes, const std::vector<int>& nb) {
  double mean = 0;
  std::vector<double> y(pipes.size());
  for (size_t i = 0; i < pipes.size(); ++i) {
    y[i] = pipes[i]->iteration_time_s(nb[i]);
    mean += y[i];
  }
  mean /= static_cast<double>(pipes.size());
  double var = 0;
  for (double v : y) var += (v - mean) * (v - mean);
  return var / static_cast<double>(pipes.size());
}

/// Compositions of `total` into x parts >= 1: C(total - 1, x - 1), saturating.
double compositions(int total, int x) {
  double c = 1;
  for (int i = 1; i < x; ++i) {
    c = c * (total - i) / i;
    if (c > 1e12) return c;
  }
  return c;
}

constexpr double kExhaustiveLimit = 20'000;  // instantiate() runs this per candidate X

std::vector<int> exhaustive(const Pipes& pipes, int total) {
  const size_t x = pipes.size();
  std::vector<int> nb(x, 1), best;
  double best_var = std::numeric_limits<double>::infinity();
  std::function<void(size_t, int)> rec = [&](size_t i, int left) {
    if (i + 1 == x) {
      nb[i] = left;
      const double v = variance_of(pipes, nb);
      if (v < best_var - 1e-18) {
        best_var = v;
        best = nb;
      }
      return;
    }
    for (int n = 1; n <= left - static_cast<int>(x - i - 1); ++n) {
      nb[i] = n;
      rec(i + 1, left - n);
    }
  };
  rec(0, total);
  return best;
}

/// Continuous relaxation: all pipelines finish at time y; N_i(y) = (y - a_i) / t*_i.
std::vector<int> balanced_rounding(const Pipes& pipes, int total) {
  // T(N) = a + t* N with a = T1 + T3 - (S - k* + 1) t* (Eq 2.2, unclamped).
  auto n_of = [&](const PipelineTemplate* t, double y) {
    const double a = t->t1_s + t->t3_s - (t->num_stages() - t->slowest_stage + 1) * t->slowest_s;
    return t->slowest_s > 0 ? (y - a) / t->slowest_s : static_cast<double>(total);
  };
  double lo = 0, hi = 1;
  auto sum_at = [&](double y) {
    double s = 0;
    for (const auto* t : pipes) s += std::max(1.0, n_of(t, y));
    return s;
  };
  while (sum_at(hi) < total) hi *= 2;
  for (int it = 0; it < 100; ++it) {
    const double mid = (lo + hi) / 2;
    (sum_at(mid) < total ? lo : hi) = mid;
  }
  std::vector<int> nb;
  int used = 0;
  for (const auto* t : pipes) {
    nb.push_back(std::max(1, static_cast<int>(std::floor(n_of(t, hi)))));
    used += nb.back();
  }
  // Rounding leaves a few microbatches over (or, from the floor at 1, too many).
  while (used < total) {
    size_t pick = 0;
    for (size_t i = 1; i < nb.size(); ++i) {
      if (pipes[i]->iteration_time_s(nb[i] + 1) < pipes[pick]->iteration_time_s(nb[pick] + 1))
        pick = i;
    }
    ++nb[pick];
    ++used;
  }
  while (used > total) {
    size_t pick = nb.size();
    for (size_t i = 0; i < nb.size(); ++i) {
      if (nb[i] > 1 && (pick == nb.size() || pipes[i]->iteration_time_s(nb[i]) >
                                                 pipes[pick]->iteration_time_s(nb[pick])))
        pick = i;
    }
    --nb[pick];
    --used;
  }
  return nb;
}

void pairwise_exchange(const Pipes& pipes, std::vector<int>& nb) {
  // Moving one microbatch from i to j changes only y_i and y_j: the variance follows from
  // the running sums in O(1) per trial (recomputing it made each pass cubic in the pipes).
  const size_t x = nb.size();
  const double n = static_cast<double>(x);
  std::vector<double> y(x);
  double sum = 0, sq = 0;
  for (size_t i = 0; i < x; ++i) {
    y[i] = pipes[i]->iteration_time_s(nb[i]);
    sum += y[i];
    sq += y[i] * y[i];
  }
  auto variance = [n](double s, double q) { return q / n - (s / n) * (s / n); };
  double var = variance_of(pipes, nb);
  for (bool improved = true; improved;) {
    improved = false;
    for (size_t i = 0; i < x; ++i) {
      for (size_t j = 0; j < x; ++j) {
        if (i == j || nb[i] <= 1) continue;
        const double yi = pipes[i]->iteration_time_s(nb[i] - 1);
        const double yj = pipes[j]->iteration_time_s(nb[j] + 1);
        const double s2 = sum - y[i] - y[j] + yi + yj;
        const double q2 = sq - y[i] * y[i] - y[j] * y[j] + yi * yi + yj * yj;
        if (variance(s2, q2) >= var - 1e-12 * std::max(1.0, var)) continue;
        // Confirm with the exact two-pass variance (the running sums lose digits).
        --nb[i];
        ++nb[j];
        const double v = variance_of(pipes, nb);
        if (v < var - 1e-12 * std::max(1.0, var)) {
          var = v;
          improved = true;
          y[i] = yi;
          y[j] = yj;
          sum = s2;
          sq = q2;
        } else {
          ++nb[i];
          --nb[j];
        }
      }
    }
  }
}

}  // namespace

BatchDistribution distribute_batch(const std::vector<const PipelineTemplate*>& pipelines,
                                   int global_batch, int microbatch_size) {
  BatchDistribution out;
  const int x = isize(pipelines);
  if (x == 0 || microbatch_size < 1) return out;
  const std::int64_t b = microbatch_size;
  if (global_batch % b != 0 || global_batch / b < x) {
    // Nearest multiple of b with at least one microbatch per pipeline; ties to the larger.
    const std::int64_t down = (global_batch / b) * b, up = down + (global_batch % b ? b : 0);
    const std::int64_t floor_ok = x * b;
    std::int64_t rec = (global_batch - down < up - global_batch) ? down : up;
    rec = std::max(rec, floor_ok);
    out.recommended_global_batch = static_cast<int>(rec);
    return out;
  }
  const int total = global_batch / microbatch_size;
  out.distributable = true;
  out.microbatches = compositions(total, x) <= kExhaustiveLimit
                         ? exhaustive(pipelines, total)
                         : balanced_rounding(pipelines, total);
  if (compositions(total, x) > kExhaustiveLimit) pairwise_exchange(pipelines, out.microbatches);
  out.variance = variance_of(pipelines, out.microbatches);
  return out;
}

void distribute_batch(const PlanningProblem& problem,
                      const PerTemplate<PipelineTemplate>& templates, Instantiation& inst) {
  std::vector<const PipelineTemplate*> pipes;
  for (const Pipeline& p : inst.pipelines) pipes.push_back(&templates.at(p.template_index));
  const BatchDistribution d =
      distribute_batch(pipes, problem.global_batch, problem.microbatch_size);
  if (!d.distributable) {
    throw InputError(
        "oobleck: global batch B = " + std::to_string(problem.global_batch) +
        " cannot be split into microbatches of b = " + std::to_string(problem.microbatch_size) +
        " over " + std::to_string(pipes.size()) +
        " pipelines (Eq 2.6 needs B / b integral and >= one per pipeline); "
        "nearest distributable global batch: " +
        std::to_string(d.recommended_global_batch));
  }
  for (size_t i = 0; i < pipes.size(); ++i) inst.pipelines[i].microbatches = d.microbatches[i];
  inst.global_batch = problem.global_batch;
  evaluate(problem, templates, inst);
}

}  // namespace loom::oobleck
