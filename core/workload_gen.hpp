#pragma once
/// Seeded generators of multimodal workloads that mimic the four FineVision subsets of
/// dissertation §4.7 (SynthChartNet, LLaVA-150k, ChartQA, CocoQA). Per Fig 4.3, text and
/// vision tokens vary independently: each sample draws its text length and its image(s)
/// from separate distributions. The parameters are reconstructed (the dissertation plots
/// the CDFs but prints no numbers); two are calibrated to what the text states (see
/// docs/data-variability.md), workloads from the analytical cost model at TP 2:
/// LLaVA-150k's dataset-mean vision:LLM workload ratio 2.43 (Fig 4.5; on Qwen2.5-Vision +
/// Llama3-1b), and SynthChartNet's Table 4.2 on Qwen2.5-Vision + Llama3-3b (batches of 64
/// and more all allocate 8:8 GPUs, smaller ones several allocations; mean ratio 0.98 --
/// the stated 1.27:1 would round to 10:6 at TP 2, contradicting the table's 8:8).
///
/// Deterministic across platforms: mt19937_64 plus Loom's own inverse-CDF sampling (the
/// standard library's distributions are implementation-defined).
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/image_tokens.hpp"
#include "core/workload.hpp"

namespace loom {

/// A log-normal distribution clipped to [min, max]: median e^mu and shape sigma.
struct ClippedLogNormal {
  double median = 1;
  double sigma = 0;
  double min = 1;
  double max = 1;
  /// The value at cumulative probability `u` in (0, 1) (inverse CDF, then clipped).
  double quantile(double u) const;
};

/// One dataset: per-sample text tokens, images per sample, and each image's width and
/// aspect ratio (height / width); vision tokens follow from image_tokens().
struct DatasetSpec {
  std::string name;
  std::string mimics;  ///< what it reconstructs, for --help and docs
  ClippedLogNormal text_tokens;
  ClippedLogNormal image_width;
  ClippedLogNormal aspect;
  double second_image_probability = 0;  ///< samples with two images
  /// P(0 images), P(1), P(2), ... a sample (workload.images_per_sample); empty: one image,
  /// a second with second_image_probability.
  std::vector<double> images_per_sample;
};

/// The generators Loom knows: synthchartnet, llava-150k, chartqa, cocoqa.
const std::vector<DatasetSpec>& dataset_specs();
/// Throws InputError listing the valid names when `name` is unknown.
const DatasetSpec& find_dataset(const std::string& name);
/// find_dataset(name) with its images per sample replaced by `images_per_sample` where that
/// is not empty (probabilities of 0, 1, 2, ... images; workload.images_per_sample).
DatasetSpec find_dataset(const std::string& name, const std::vector<double>& images_per_sample);

/// The images of a sample whose draw is `u` in (0, 1): the count N with
/// P(N > k) > u for k < N (inverse survival function), so that the default, one image and
/// a second with probability p, draws a second exactly when u < p.
int image_count(const DatasetSpec& spec, double u);

/// `count` samples numbered from `first_id`, drawn from `spec` with `seed`. Sample i
/// depends only on (seed, first_id + i): any window of the stream is reproducible. Each
/// image drawn becomes vision tokens by `images` (core/image_tokens.hpp; the datasets'
/// encoders are Qwen2-VL's, so "native" is the default).
std::vector<Sample> generate_samples(const DatasetSpec& spec, int count, std::uint64_t seed,
                                     int first_id = 0, const ImageTokenRule& images = {});

/// Draws a fresh random batch of `n` samples from a dataset (stateful, seeded): what the
/// planners of dissertation §4.4 profile.
using BatchSource = std::function<std::vector<Sample>(int n)>;

/// Fresh samples from the generator: batch j holds the next n ids of the stream that
/// starts at `first_id`.
BatchSource generator_stream(const DatasetSpec& spec, std::uint64_t seed, int first_id,
                             const ImageTokenRule& images = {});

/// Draws with replacement from a fixed pool (a CSV dataset), mt19937_64-seeded.
BatchSource pool_stream(std::vector<Sample> pool, std::uint64_t seed);

/// Inverse of the standard normal CDF (Acklam's rational approximation refined by one
/// Halley step; |error| < 1e-12 on (0, 1)).
double normal_quantile(double u);

}  // namespace loom
