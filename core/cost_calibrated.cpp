#include "core/cost_calibrated.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <set>

#include "core/csv.hpp"
#include "core/errors.hpp"
#include "core/index.hpp"
#include "core/units.hpp"

namespace loom {

QuadraticFit fit_quadratic(const std::vector<double>& x, const std::vector<double>& y) {
  // Normal equations on x scaled to O(1) for conditioning (token counts reach 1e5).
  double scale = 1;
  for (double v : x) scale = std::max(scale, std::abs(v));
  std::array<std::array<double, 4>, 3> m{};  // augmented 3x3 system
  for (size_t i = 0; i < x.size(); ++i) {
    const double u = x[i] / scale;
    const std::array<double, 3> basis = {u * u, u, 1.0};
    for (int r = 0; r < 3; ++r) {
      for (int c = 0; c < 3; ++c) m[r][c] += basis[r] * basis[c];
      m[r][3] += basis[r] * y[i];
    }
  }
  for (int col = 0; col < 3; ++col) {  // Gaussian elimination, partial pivoting
    int pivot = col;
    for (int r = col + 1; r < 3; ++r) {
      if (std::abs(m[r][col]) > std::abs(m[pivot][col])) pivot = r;
    }
    std::swap(m[col], m[pivot]);
    for (int r = 0; r < 3; ++r) {
      if (r == col || m[col][col] == 0) continue;
      const double f = m[r][col] / m[col][col];
      for (int c = col; c < 4; ++c) m[r][c] -= f * m[col][c];
    }
  }
  QuadraticFit fit;
  fit.a = m[0][3] / m[0][0] / (scale * scale);
  fit.b = m[1][3] / m[1][1] / scale;
  fit.c = m[2][3] / m[2][2];
  fit.points = isize(x);
  double sq = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double r = fit.at(x[i]) - y[i];
    sq += r * r;
    if (y[i] > 0)
      fit.max_relative_residual = std::max(fit.max_relative_residual, std::abs(r) / y[i]);
  }
  fit.rms_residual_s = x.empty() ? 0 : std::sqrt(sq / static_cast<double>(x.size()));
  return fit;
}

namespace {

bool parse_whole(const std::string& text, int& value) {
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  return ec == std::errc{} && ptr == end;
}

}  // namespace

CalibratedCostModel::CalibratedCostModel(const Model& model, const Cluster& cluster,
                                         const std::string& profile_csv)
    : AnalyticalSizes(model, cluster), model_(model), profile_(profile_csv) {
  std::map<Key, std::pair<std::vector<double>, std::vector<double>>> points;
  try {
    io::CSVReader<5, io::trim_chars<' ', '\t'>, io::no_quote_escape<','>, io::throw_on_overflow> in(
        profile_csv);
    in.read_header(io::ignore_no_column, "layer", "phase", "tokens", "tp", "seconds");
    // Numbers are read as text and converted here: fccp's own float parser overflows an
    // int on exponents like "1e-2147483648" (found by fuzz/fuzz_profile_calibrated).
    std::string layer, phase, tokens_text, tp_text, seconds_text;
    while (in.read_row(layer, phase, tokens_text, tp_text, seconds_text)) {
      const std::string where = profile_csv + ":" + std::to_string(in.get_file_line());
      const std::optional<double> parsed_tokens = parse_number(tokens_text);
      const std::optional<double> parsed_seconds = parse_number(seconds_text);
      int tp = 0;
      if (!parsed_tokens || !parsed_seconds || !parse_whole(tp_text, tp)) {
        throw InputError(where +
                         ": tokens and seconds must be numbers and tp a whole number "
                         "(got '" +
                         tokens_text + "', '" + seconds_text + "', '" + tp_text + "')");
      }
      if (phase != "F" && phase != "I" && phase != "W" && phase != "B") {
        throw InputError(where + ": phase '" + phase + "' is not one of F, I, W, B");
      }
      const double tokens = *parsed_tokens, seconds = *parsed_seconds;
      if (tokens < 0 || tp < 1 || seconds < 0) {
        throw InputError(where + ": tokens and seconds must be >= 0 and tp >= 1");
      }
      auto add = [&](char p, double s) {
        auto& [xs, ys] = points[{layer, p, tp}];
        xs.push_back(tokens);
        ys.push_back(s);
      };
      if (phase == "B") {
        add('I', seconds / 2);
        add('W', seconds / 2);
      } else {
        add(phase[0], seconds);
      }
    }
  } catch (const InputError&) {
    throw;
  } catch (const io::error::base& e) {
    throw InputError(std::string("calibrated profile: ") + e.what());
  }
  for (const auto& [key, xy] : points) {
    const std::set<double> distinct(xy.first.begin(), xy.first.end());
    if (distinct.size() < 3) {
      throw InputError(profile_csv + ": layer '" + std::get<0>(key) + "' phase " +
                       std::get<1>(key) + " tp " + std::to_string(std::get<2>(key)) +
                       " needs rows at >= 3 distinct token counts to fit a x^2 + b x + c");
    }
    fits_[key] = fit_quadratic(xy.first, xy.second);
  }
}

const QuadraticFit& CalibratedCostModel::fit_for(int layer, char phase, int tp) const {
  const LayerRef& ref = model_.layer_ref(layer);
  const std::string& module = model_.module(ref.module).name;
  const std::string exact = module + "." + std::to_string(ref.local_index);
  for (const std::string& key : {exact, module}) {
    const auto it = fits_.find({key, phase, tp});
    if (it != fits_.end()) return it->second;
  }
  throw InputError(profile_ + ": no rows for layer '" + exact + "' (or module '" + module +
                   "'), phase " + std::string(1, phase) + ", tp " + std::to_string(tp));
}

double CalibratedCostModel::evaluate(const QuadraticFit& fit, const MicrobatchShape& shape) const {
  double t = fit.c;
  for (int s : shape.sequence_lengths) t += (fit.a * s + fit.b) * s;
  return std::max(0.0, t);
}

PassCost CalibratedCostModel::layer_cost(int layer, const MicrobatchShape& shape, int tp) const {
  return {evaluate(fit_for(layer, 'F', tp), shape), evaluate(fit_for(layer, 'I', tp), shape),
          evaluate(fit_for(layer, 'W', tp), shape)};
}

nlohmann::json CalibratedCostModel::describe() const {
  nlohmann::json fits = nlohmann::json::array();
  for (const auto& [key, fit] : fits_) {
    fits.push_back({{"layer", std::get<0>(key)},
                    {"phase", std::string(1, std::get<1>(key))},
                    {"tp", std::get<2>(key)},
                    {"a", fit.a},
                    {"b", fit.b},
                    {"c", fit.c},
                    {"points", fit.points},
                    {"rms_residual_s", fit.rms_residual_s},
                    {"max_relative_residual", fit.max_relative_residual}});
  }
  return {{"name", name()}, {"profile", profile_}, {"fits", fits}};
}

}  // namespace loom
