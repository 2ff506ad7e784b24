#include "core/kernel_jitter.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <random>
#include <variant>

namespace loom {
namespace {

/// One standard normal draw, truncated to [-3, 3] by redrawing (Box-Muller on two
/// uniforms in (0, 1]).
double truncated_normal(std::mt19937_64& rng) {
  constexpr double kScale = 1.0 / 18446744073709551616.0;  // 2^-64
  for (;;) {
    const double u1 = (static_cast<double>(rng()) + 1.0) * kScale;
    const double u2 = static_cast<double>(rng()) * kScale;
    const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
    if (std::abs(z) <= 3.0) return z;
  }
}

}  // namespace

void apply_kernel_jitter(Schedule& schedule, const KernelJitter& jitter) {
  if (jitter.sigma <= 0) return;
  const auto lo = [](std::uint64_t v) { return static_cast<std::uint32_t>(v); };
  const auto hi = [](std::uint64_t v) { return static_cast<std::uint32_t>(v >> 32); };
  for (const RankId rank : schedule.rank_ids()) {
    // One stream per rank, so a rank's draws do not depend on other ranks' op counts.
    std::seed_seq seq{lo(jitter.seed), hi(jitter.seed), lo(jitter.offset), hi(jitter.offset),
                      static_cast<std::uint32_t>(rank.value())};
    std::mt19937_64 rng(seq);
    for (Op& op : schedule.programs[rank]) {
      auto* compute = std::get_if<Compute>(&op);
      if (!compute) continue;
      const double factor = std::max(0.0, 1.0 + jitter.sigma * truncated_normal(rng));
      compute->seconds *= factor;
      compute->weight_grad_s *= factor;
    }
  }
}

}  // namespace loom
