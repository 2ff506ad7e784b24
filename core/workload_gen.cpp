#include "core/workload_gen.hpp"

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>

#include "core/errors.hpp"

namespace loom {

double normal_quantile(double u) {
  // Acklam's rational approximation of the normal quantile (relative error < 1.2e-9).
  static constexpr double a[] = {-3.969683028665376e+01, 2.209460984245205e+02,
                                 -2.759285104469687e+02, 1.383577518672690e+02,
                                 -3.066479806614716e+01, 2.506628277459239e+00};
  static constexpr double b[] = {-5.447609879822406e+01, 1.615858368580409e+02,
                                 -1.556989798598866e+02, 6.680131188771972e+01,
                                 -1.328068155288572e+01};
  static constexpr double c[] = {-7.784894002430293e-03, -3.223964580411365e-01,
                                 -2.400758277161838e+00, -2.549732539343734e+00,
                                 4.374664141464968e+00,  2.938163982698783e+00};
  static constexpr double d[] = {7.784695709041462e-03, 3.224671290700398e-01,
                                 2.445134137142996e+00, 3.754408661907416e+00};
  constexpr double kLow = 0.02425;
  auto tail = [&](double q) {
    return (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
           ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
  };
  double x = 0;
  if (u < kLow) {
    x = tail(std::sqrt(-2 * std::log(u)));
  } else if (u > 1 - kLow) {
    x = -tail(std::sqrt(-2 * std::log(1 - u)));
  } else {
    const double q = u - 0.5, r = q * q;
    x = (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q /
        (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1);
  }
  // One Halley step against the exact CDF brings it to double precision.
  const double e = 0.5 * std::erfc(-x / std::sqrt(2.0)) - u;
  const double step = e * std::sqrt(2 * M_PI) * std::exp(x * x / 2);
  return x - step / (1 + x * step / 2);
}

double ClippedLogNormal::quantile(double u) const {
  const double v = median * std::exp(sigma * normal_quantile(u));
  return std::clamp(v, min, max);
}

const std::vector<DatasetSpec>& dataset_specs() {
  // Reconstructed shapes (dissertation Fig 4.3 shows CDFs only; docs/data-variability.md
  // gives the reasoning per dataset). Widths in pixels, aspect = height / width.
  // {median, sigma, min, max}
  static const std::vector<DatasetSpec> kSpecs = {
      {"synthchartnet",
       "SynthChartNet: rendered charts of many sizes with long chart-to-table/code text; "
       "the most variable subset (section 4.7)",
       {360, 0.6, 16, 8192},
       {800, 0.3, 224, 3584},
       {0.75, 0.3, 0.25, 4},
       0.0,
       {}},
      {"llava-150k",
       "LLaVA-150k: COCO photos (~640x480) with multi-turn GPT-4 conversations; "
       "mean vision:LLM workload ratio 2.43 (Fig 4.5)",
       {160, 0.6, 8, 2048},
       {640, 0.08, 320, 1024},
       {0.75, 0.15, 0.4, 2},
       0.0,
       {}},
      {"chartqa",
       "ChartQA: real-world charts (~800x600) with one short question and answer",
       {40, 0.45, 8, 512},
       {800, 0.25, 300, 2000},
       {0.7, 0.2, 0.3, 2.5},
       0.0,
       {}},
      {"cocoqa",
       "COCO-QA: COCO photos (~640x480) with a one-line question and a one-word answer",
       {16, 0.25, 6, 64},
       {640, 0.06, 400, 800},
       {0.75, 0.12, 0.5, 1.5},
       0.0,
       {}},
  };
  return kSpecs;
}

const DatasetSpec& find_dataset(const std::string& name) {
  std::string known;
  for (const DatasetSpec& s : dataset_specs()) {
    if (s.name == name) return s;
    known += (known.empty() ? "" : ", ") + s.name;
  }
  throw InputError("unknown dataset '" + name + "' (known: " + known + ")");
}

DatasetSpec find_dataset(const std::string& name, const std::vector<double>& images_per_sample) {
  DatasetSpec spec = find_dataset(name);
  if (!images_per_sample.empty()) spec.images_per_sample = images_per_sample;
  return spec;
}

int image_count(const DatasetSpec& spec, double u) {
  if (spec.images_per_sample.empty()) return u < spec.second_image_probability ? 2 : 1;
  double more = 1;  // P(N > k), from k = -1
  int n = 0;
  for (const double p : spec.images_per_sample) {
    more -= p;
    if (u >= more) return n;
    ++n;
  }
  return n - 1;  // rounding left P(N > last) above u: the last count
}

namespace {

/// SplitMix64 finalizer: decorrelates the per-sample seeds (seed, id).
std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

/// Uniform in the open interval (0, 1) from 53 random bits.
double open_uniform(std::mt19937_64& rng) {
  return (static_cast<double>(rng() >> 11) + 0.5) * 0x1.0p-53;
}

/// Draws one image and appends its tiles to `items` (vision tokens each); returns its tokens.
int draw_image(const DatasetSpec& spec, std::mt19937_64& rng, const ImageTokenRule& images,
               std::vector<int>& items) {
  const double width = spec.image_width.quantile(open_uniform(rng));
  const double height = width * spec.aspect.quantile(open_uniform(rng));
  const int w = static_cast<int>(std::lround(width)), h = static_cast<int>(std::lround(height));
  const std::vector<int> tiles = image_items(images, w, h);
  items.insert(items.end(), tiles.begin(), tiles.end());
  return image_tokens(images, w, h);
}

}  // namespace

std::vector<Sample> generate_samples(const DatasetSpec& spec, int count, std::uint64_t seed,
                                     int first_id, const ImageTokenRule& images) {
  std::vector<Sample> samples;
  samples.reserve(static_cast<size_t>(std::max(count, 0)));
  for (int i = 0; i < count; ++i) {
    const int id = first_id + i;
    std::mt19937_64 rng(mix(seed ^ mix(static_cast<std::uint64_t>(id))));
    Sample s;
    s.id = id;
    s.tokens["text"] = static_cast<int>(std::lround(spec.text_tokens.quantile(open_uniform(rng))));
    // The first image is drawn before the count, so that the default stream (one image, a
    // second with second_image_probability) draws exactly as it always has.
    std::vector<int> items;
    int vision = draw_image(spec, rng, images, items);
    const int n = image_count(spec, open_uniform(rng));
    for (int k = 1; k < n; ++k) vision += draw_image(spec, rng, images, items);
    s.tokens["vision"] = n == 0 ? 0 : vision;
    if (n > 0) s.items["vision"] = std::move(items);
    samples.push_back(std::move(s));
  }
  return samples;
}

BatchSource generator_stream(const DatasetSpec& spec, std::uint64_t seed, int first_id,
                             const ImageTokenRule& images) {
  auto next = std::make_shared<int>(first_id);
  return [spec, seed, next, images](int n) {
    std::vector<Sample> batch = generate_samples(spec, n, seed, *next, images);
    *next += n;
    return batch;
  };
}

BatchSource pool_stream(std::vector<Sample> pool, std::uint64_t seed) {
  if (pool.empty()) throw InputError("cannot draw batches from an empty workload");
  auto rng = std::make_shared<std::mt19937_64>(seed);
  auto samples = std::make_shared<const std::vector<Sample>>(std::move(pool));
  return [rng, samples](int n) {
    std::vector<Sample> batch;
    // rng() % size: the modulo bias is below 2^-40 for any pool Loom can hold.
    for (int i = 0; i < n; ++i) batch.push_back((*samples)[(*rng)() % samples->size()]);
    return batch;
  };
}

}  // namespace loom
