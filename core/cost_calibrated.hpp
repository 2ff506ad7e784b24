#pragma once
/// `calibrated`: per layer and phase, T(x) = a x^2 + b x + c in the token count x, fitted
/// by least squares from a profile CSV `layer,phase,tokens,tp,seconds` (dissertation
/// §4.4.1). `layer` is a module name (the fit applies to all its layers) or
/// "<module>.<index>" (one layer; wins over the module-wide fit); `phase` is F, I or W
/// (B = I + W when only fused backward was profiled: split evenly). A microbatch of
/// samples with x_1..x_n tokens costs sum_i (a x_i^2 + b x_i) + c: the quadratic term is
/// per sequence (attention), the constant (launch overhead) once per invocation.
/// Activation/output bytes and parameter counts come from the layer shapes (as in
/// `analytical`), since a timing profile does not measure them.
#include <map>
#include <tuple>

#include "core/cost_analytical.hpp"

namespace loom {

struct QuadraticFit {
  double a = 0, b = 0, c = 0;
  int points = 0;
  double rms_residual_s = 0;
  double max_relative_residual = 0;
  double at(double x) const { return (a * x + b) * x + c; }
};

/// Least-squares fit of y = a x^2 + b x + c. Needs three distinct x values.
QuadraticFit fit_quadratic(const std::vector<double>& x, const std::vector<double>& y);

class CalibratedCostModel final : public AnalyticalSizes {
 public:
  /// Reads and fits the profile; InputError names the file and line of a malformed row,
  /// or the layer/phase/tp that has too few distinct token counts or no rows at all.
  CalibratedCostModel(const Model& model, const Cluster& cluster, const std::string& profile_csv);
  std::string name() const override { return "calibrated"; }
  PassCost layer_cost(int layer, const MicrobatchShape& shape, int tp) const override;
  nlohmann::json describe() const override;

 private:
  using Key = std::tuple<std::string, char, int>;  // (layer key, phase, tp)
  const QuadraticFit& fit_for(int layer, char phase, int tp) const;
  double evaluate(const QuadraticFit& fit, const MicrobatchShape& shape) const;

  const Model& model_;
  std::string profile_;
  std::map<Key, QuadraticFit> fits_;
};

}  // namespace loom
