#include "core/workload_gen.hpp"

#include <gtest/gtest.h>

#include <cmath>

#include "core/config.hpp"
#include "core/errors.hpp"
#include "core/workload_cost.hpp"
#include "test_support.hpp"

namespace loom {
namespace {

double mean_ratio(const std::string& config, int n) {
  const Config c = load_config(test::source_path(config), {});
  const auto cost = make_cost_model(c);
  const auto comps = model_components(c.model);
  const auto batch = generate_samples(find_dataset(c.workload.dataset), n, 12345);
  const auto p = macroscopic_proportions(c.model, *cost, comps, batch, c.parallel.tp);
  return p[0] / p[1];
}

}  // namespace

TEST(WorkloadGen, NormalQuantileMatchesTables) {
  EXPECT_NEAR(normal_quantile(0.5), 0.0, 1e-12);
  EXPECT_NEAR(normal_quantile(0.975), 1.959963984540054, 1e-9);
  EXPECT_NEAR(normal_quantile(0.001), -3.090232306167813, 1e-9);
  EXPECT_NEAR(normal_quantile(1 - 1e-10), 6.361340902404056, 1e-7);
}

TEST(WorkloadGen, SameSeedSameSamplesAnyWindow) {
  const DatasetSpec& spec = find_dataset("synthchartnet");
  const auto a = generate_samples(spec, 100, 7);
  const auto b = generate_samples(spec, 40, 7, 60);  // a window of the same stream
  for (int i = 0; i < 40; ++i) EXPECT_EQ(a[static_cast<size_t>(60 + i)].tokens, b[i].tokens);
  const auto c = generate_samples(spec, 100, 8);
  int same = 0;
  for (int i = 0; i < 100; ++i) same += a[i].tokens == c[i].tokens;
  EXPECT_LT(same, 5);
}

// Fig 4.3: text and vision vary independently; every sample has both.
TEST(WorkloadGen, ModalitiesVaryIndependently) {
  for (const DatasetSpec& spec : dataset_specs()) {
    const auto s = generate_samples(spec, 4000, 3);
    double mt = 0, mv = 0, stt = 0, svv = 0, stv = 0;
    for (const Sample& x : s) {
      mt += x.tokens.at("text");
      mv += x.tokens.at("vision");
      EXPECT_GT(x.tokens.at("text"), 0);
      EXPECT_GT(x.tokens.at("vision"), 0);
    }
    mt /= s.size();
    mv /= s.size();
    for (const Sample& x : s) {
      const double t = x.tokens.at("text") - mt, v = x.tokens.at("vision") - mv;
      stt += t * t;
      svv += v * v;
      stv += t * v;
    }
    EXPECT_LT(std::abs(stv / std::sqrt(stt * svv)), 0.06) << spec.name;
    EXPECT_GT(svv, 0) << spec.name;
  }
}

// What the dissertation states: LLaVA-150k's mean ratio 2.43 (Fig 4.5); SynthChartNet on
// Qwen2.5-Vision + Llama3-3b allocates 8:8 of 16 GPUs at TP 2 (Tables 4.1, 4.2), i.e. a
// ratio inside (7/9, 9/7), centred (the stated 1.27 lies 1% from the 10:6 boundary).
TEST(WorkloadGen, DatasetRatiosMatchThePaper) {
  EXPECT_NEAR(mean_ratio("configs/paper/entrain-llava-150k-llama3-1b.toml", 20000), 2.43, 0.05);
  const double synth = mean_ratio("configs/paper/entrain-synthchartnet-llama3-3b.toml", 20000);
  EXPECT_GT(synth, 0.9);
  EXPECT_LT(synth, 1.1);
}

// SynthChartNet is the most variable subset (§4.7): the widest per-sample ratio spread.
TEST(WorkloadGen, SynthChartNetIsTheMostVariable) {
  auto cv = [](const std::string& name) {
    const auto s = generate_samples(find_dataset(name), 4000, 5);
    double m = 0, q = 0;
    for (const Sample& x : s) m += x.tokens.at("vision") + x.tokens.at("text");
    m /= s.size();
    for (const Sample& x : s) {
      const double d = x.tokens.at("vision") + x.tokens.at("text") - m;
      q += d * d;
    }
    return std::sqrt(q / s.size()) / m;
  };
  for (const char* other : {"llava-150k", "chartqa", "cocoqa"})
    EXPECT_GT(cv("synthchartnet"), cv(other)) << other;
}

TEST(WorkloadGen, ImagesPerSampleFollowTheGivenDistribution) {
  // One image always ([0, 1]) is the default stream, draw for draw.
  const auto one = generate_samples(find_dataset("llava-150k", {0, 1}), 50, 7);
  const auto plain = generate_samples(find_dataset("llava-150k"), 50, 7);
  for (size_t i = 0; i < plain.size(); ++i) {
    EXPECT_EQ(one[i].tokens, plain[i].tokens);
    EXPECT_EQ(one[i].items, plain[i].items);
  }
  // P(0, 1, 2 images) = 0.2, 0.3, 0.5 over 4,000 samples: each image one item under the
  // native rule, a sample without images has no vision tokens.
  const std::vector<double> pmf = {0.2, 0.3, 0.5};
  std::vector<int> seen(3, 0);
  for (const Sample& s : generate_samples(find_dataset("cocoqa", pmf), 4000, 3)) {
    const auto it = s.items.find("vision");
    const int images = it == s.items.end() ? 0 : isize(it->second);
    ASSERT_LE(images, 2);
    ++seen[static_cast<size_t>(images)];
    EXPECT_EQ(images == 0, s.tokens.at("vision") == 0);
  }
  for (size_t k = 0; k < pmf.size(); ++k) EXPECT_NEAR(seen[k] / 4000.0, pmf[k], 0.03) << k;
  // The count inverts the survival function: u below P(N > k) gives more than k images.
  const DatasetSpec spec = find_dataset("cocoqa", pmf);
  EXPECT_EQ(image_count(spec, 0.85), 0);  // P(N > 0) = 0.8
  EXPECT_EQ(image_count(spec, 0.6), 1);   // P(N > 1) = 0.5
  EXPECT_EQ(image_count(spec, 0.1), 2);

  const std::string key = "workload.images_per_sample";
  auto error = [&](const std::vector<std::string>& sets) {
    return test::input_error([&] { test::example("vlm-frozen.toml", sets); });
  };
  EXPECT_NE(error({"workload.dataset=\"cocoqa\"", key + "=[0.5, 0.6]"}).find("sum to"),
            std::string::npos);
  EXPECT_NE(error({"workload.dataset=\"cocoqa\"", key + "=[1.5]"}).find("probabilities"),
            std::string::npos);
  EXPECT_NE(error({key + "=[0, 1]"}).find("applies to the generators"), std::string::npos);
}

TEST(WorkloadGen, UnknownDatasetListsTheKnownOnes) {
  try {
    find_dataset("mnist");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("synthchartnet"), std::string::npos);
  }
}

TEST(WorkloadGen, PoolStreamIsSeeded) {
  const auto pool = generate_samples(find_dataset("cocoqa"), 50, 1);
  auto a = pool_stream(pool, 9), b = pool_stream(pool, 9);
  const auto x = a(20), y = b(20);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(x[i].id, y[i].id);
}

TEST(WorkloadCsv, ResolutionsAndImageAlias) {
  test::TempDir dir;
  const auto s = load_samples_csv(dir.write(
      "r.csv", "sample_id,text_tokens,image_resolution\n0,10,1280x720\n1,5,28x28;56x28\n"));
  // 1280x720 -> 1288x728 (multiples of 28) -> 92 x 52 patches of 14 px.
  EXPECT_EQ(s[0].tokens.at("vision"), 92 * 52);
  EXPECT_EQ(s[1].tokens.at("vision"), 4 + 8);
  const auto t =
      load_samples_csv(dir.write("t.csv", "sample_id,text_tokens,image_tokens\n0,3,400\n"));
  EXPECT_EQ(t[0].tokens.at("vision"), 400);
}

TEST(WorkloadCsv, NoTokensOrBadResolutionNamesTheLine) {
  test::TempDir dir;
  auto error = [&](const std::string& content) {
    try {
      load_samples_csv(dir.write("bad.csv", content));
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(error("sample_id,text_tokens,image_tokens\n0,1,2\n1,0,0\n")
                .find("bad.csv:3: sample 1 "
                      "has no tokens"),
            std::string::npos);
  EXPECT_NE(error("sample_id,text_tokens,image_resolution\n0,1,12x\n").find("bad.csv:2"),
            std::string::npos);
  EXPECT_NE(error("sample_id,text_tokens,image_resolution\n0,1,big\n").find("WIDTHxHEIGHT"),
            std::string::npos);
}

}  // namespace loom
