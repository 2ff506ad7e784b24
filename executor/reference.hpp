#pragma once
/// The reference the executor is checked against: a plain sequential run over the same
/// samples (one rank, one sample at a time in id order, forward through every module then
/// backward), and the gradient-equivalence check of a schedule's run against it.
///
/// Tolerance: relative error ||g - g_ref||_2 / ||g_ref||_2 <= 1e-4 on every trainable
/// parameter tensor (float math; summation order differs between microbatchings, which
/// moves results by ~1e-6 relative; a dropped microbatch moves them by ~1/m).
#include <string>
#include <vector>

#include "executor/backend.hpp"

namespace loom::exec {

constexpr double kGradientTolerance = 1e-4;

/// The one-rank schedule of the sequential run: microbatch j is sample j alone.
Schedule sequential_schedule(const Schedule& schedule, const Model& model);

/// Runs the sequential schedule on the host backend and returns its gradients.
Gradients reference_gradients(const ExecProblem& problem, const ExecOptions& options);

struct GradientCheck {
  double tolerance = kGradientTolerance;
  double max_relative_error = 0;
  std::string worst;  ///< "layer 5 w1 (rank 2)"
  int tensors_checked = 0;
  std::vector<std::string> failures;  ///< one line per problem (missing, frozen, too far)
  bool passed() const { return failures.empty(); }
};

/// Compares every rank's gradients with the reference: each trainable parameter tensor of
/// each replica must be present on some rank of that replica and within tolerance; a
/// frozen layer must have no gradient at all. Where a rank's program has an OptimizerStep,
/// its parameters' update must be one Adam step (executor/adam.hpp) with the reference
/// gradients from their initial values, within the same tolerance.
GradientCheck check_gradients(const ExecProblem& problem, const ExecResult& result,
                              const Gradients& reference, double tolerance = kGradientTolerance);

}  // namespace loom::exec
