#include "executor/adam.hpp"

#include <cmath>
#include <stdexcept>

namespace loom::exec {

void adam_step(std::vector<float>& param, const std::vector<float>& grad, AdamState& state) {
  if (grad.size() != param.size())
    throw std::logic_error("adam_step: gradient and parameter sizes differ");
  if (state.m.empty()) {
    state.m.assign(param.size(), 0.0F);
    state.v.assign(param.size(), 0.0F);
  }
  ++state.step;
  const float bias1 = 1.0F - std::pow(kAdamBeta1, static_cast<float>(state.step));
  const float bias2 = 1.0F - std::pow(kAdamBeta2, static_cast<float>(state.step));
  for (size_t i = 0; i < param.size(); ++i) {
    state.m[i] = kAdamBeta1 * state.m[i] + (1.0F - kAdamBeta1) * grad[i];
    state.v[i] = kAdamBeta2 * state.v[i] + (1.0F - kAdamBeta2) * grad[i] * grad[i];
    const float m_hat = state.m[i] / bias1;
    const float v_hat = state.v[i] / bias2;
    param[i] -= kAdamLr * m_hat / (std::sqrt(v_hat) + kAdamEps);
  }
}

}  // namespace loom::exec
