#pragma once
/// Kernel-time noise: a measured run never repeats a kernel in exactly the same time, so
/// a study of variability (the standard deviation of a module's forward time across
/// microbatches, dissertation Table 4.3) needs a floor that a deterministic cost model
/// does not have. `cost.jitter = sigma` scales every compute op of the planned schedule by
/// its own factor 1 + sigma * z, z standard normal truncated to [-3, 3], drawn
/// independently per op. The schedulers plan without it (noise is not known in advance);
/// every backend then runs the same noisy durations.
///
/// Draws come from std::mt19937_64 (its output is fixed by the standard) through a
/// Box-Muller transform written here (std::normal_distribution differs between standard
/// libraries), seeded by cost.jitter_seed and workload.offset: reruns are byte-identical,
/// and consecutive iterations (offsets) draw different noise.
#include <cstdint>

#include "core/schedule.hpp"

namespace loom {

struct KernelJitter {
  double sigma = 0;          ///< relative standard deviation of one op's time (0 = off)
  std::uint64_t seed = 1;    ///< cost.jitter_seed
  std::uint64_t offset = 0;  ///< workload.offset: which iteration of the data this is
};

/// Scales every Compute op's seconds (and its weight-gradient share) in place.
void apply_kernel_jitter(Schedule& schedule, const KernelJitter& jitter);

}  // namespace loom
