// Sequence packing (issue 49): first-fit as core/packing.hpp states it, every sample in
// exactly one pack, and a pack's attention work the sum of its samples'.
#include "core/packing.hpp"

#include <gtest/gtest.h>

#include <set>

#include "core/errors.hpp"
#include "core/evaluator.hpp"
#include "core/validate.hpp"
#include "core/workload_gen.hpp"
#include "test_support.hpp"

namespace loom {
namespace {

/// A text-only stream of the given lengths (ids 0..).
SampleStream text_stream(std::vector<int> lengths) {
  return [lengths = std::move(lengths)](int i) -> std::optional<Sample> {
    if (i >= isize(lengths)) return std::nullopt;
    Sample s;
    s.id = i;
    s.tokens["text"] = lengths[static_cast<size_t>(i)];
    return s;
  };
}

std::vector<std::vector<int>> part_ids(const PackedBatch& batch) {
  std::vector<std::vector<int>> out;
  for (const Sample& pack : batch.packs) {
    std::vector<int>& ids = out.emplace_back();
    for (const Sample& part : pack.parts) ids.push_back(part.id);
  }
  return out;
}

TEST(Packing, ParsesNoneAndPackN) {
  EXPECT_EQ(parse_packing("none"), 0);
  EXPECT_EQ(parse_packing("pack:8192"), 8192);
  EXPECT_EQ(format_packing(8192), "pack:8192");
  EXPECT_EQ(format_packing(0), "none");
  for (const char* bad : {"pack:0", "pack:", "pack:12x", "8192", "pack:-4", "first-fit"}) {
    EXPECT_NE(test::input_error([&] { parse_packing(bad); }).find("\"pack:N\""), std::string::npos)
        << bad;
  }
}

TEST(Packing, FirstFitByHand) {
  // Lengths 5 3 6 2 4 1 9 2 into 3 packs of 8: 5+3 | 6+2 | 4+1; the 9 fits no open pack
  // and a fourth may not open, so the batch ends there (6 samples used).
  const Model model = test::example("uniform-1f1b.toml")->config.model;
  const PackedBatch batch = pack_samples(model, 3, 8, text_stream({5, 3, 6, 2, 4, 1, 9, 2}));
  EXPECT_EQ(part_ids(batch), (std::vector<std::vector<int>>{{0, 1}, {2, 3}, {4, 5}}));
  EXPECT_EQ(batch.samples_used, 6);
  EXPECT_EQ(batch.packs[1].tokens.at("text"), 8);
  EXPECT_EQ(batch.packs[2].id, 2);

  // First fit, not next fit: a short sample goes back to the first pack with room.
  const PackedBatch back = pack_samples(model, 2, 8, text_stream({5, 6, 3, 2, 7}));
  EXPECT_EQ(part_ids(back), (std::vector<std::vector<int>>{{0, 2}, {1, 3}}));

  // A sample longer than N is not cut: it fills a pack of its own.
  const PackedBatch long_one = pack_samples(model, 2, 8, text_stream({12, 1, 3}));
  EXPECT_EQ(part_ids(long_one), (std::vector<std::vector<int>>{{0}, {1, 2}}));

  // A stream that ends early gives fewer packs.
  EXPECT_EQ(pack_samples(model, 4, 8, text_stream({8, 8})).packs.size(), 2u);
}

TEST(Packing, EverySampleOnceAndAttentionWorkIsTheSumOfItsSamples) {
  // LLaVA-150k-like samples (one image each, multiples of 4 patches) on a ViT + 2x2
  // merger + LLM, packed into 8,192-token sequences: the study's batch is 16 packs.
  const auto study = test::example(
      "vlm-frozen.toml",
      {"workload.dataset=\"llava-150k\"", "workload.packing=\"pack:8192\"", "workload.offset=10"});
  const Model& model = study->config.model;
  const std::vector<Sample>& packs = study->problem.samples;
  ASSERT_EQ(packs.size(), 16u);  // 8 microbatches x 2 x dp 1
  std::vector<int> ids;
  const ModuleId llm = model.module_index("llm").value();
  for (const Sample& pack : packs) {
    ASSERT_FALSE(pack.parts.empty());
    int length = 0;
    for (const Sample& part : pack.parts) {
      ids.push_back(part.id);
      length += module_input_tokens(model, llm, part);
    }
    EXPECT_EQ(module_input_tokens(model, llm, pack), length);
    if (pack.parts.size() > 1) {
      EXPECT_LE(length, 8192);
    }
  }
  // Every sample of the stream from the offset, once: 10, 11, ... in pack order.
  std::sort(ids.begin(), ids.end());
  for (size_t k = 0; k < ids.size(); ++k) EXPECT_EQ(ids[k], 10 + static_cast<int>(k));
  EXPECT_GT(ids.size(), 2 * packs.size());

  // Per layer, a pack's sequences are its samples' (the LLM attends within each sample,
  // the encoder within each image): the same tokens and sum of squares as its samples'.
  for (int l = 0; l < model.num_layers(); ++l) {
    for (const Sample& pack : packs) {
      std::vector<const Sample*> parts;
      for (const Sample& part : pack.parts) parts.push_back(&part);
      const MicrobatchShape whole = layer_shape(model, l, {&pack});
      const MicrobatchShape each = layer_shape(model, l, parts);
      EXPECT_EQ(whole.sequence_lengths, each.sequence_lengths) << "layer " << l;
      EXPECT_EQ(whole.sum_squared(), each.sum_squared());
    }
  }
  EXPECT_NO_THROW(validate(study->schedule, model));
  EXPECT_GT(evaluate(study->schedule, study->config.cluster).iteration_time_s(), 0);
}

TEST(Packing, ThroughputCountsSamplesNotPacks) {
  const auto study = test::example(
      "vlm-frozen.toml", {"workload.dataset=\"llava-150k\"", "workload.packing=\"pack:8192\""});
  const Timeline t = evaluate(study->schedule, study->config.cluster);
  const double packs_per_s = compute_metrics(study->schedule, t).throughput_samples_per_s;
  const int samples = sample_count(study->problem.samples);
  EXPECT_GT(samples, 16);
  EXPECT_DOUBLE_EQ(study_metrics(*study, t).throughput_samples_per_s, packs_per_s * samples / 16);
}

TEST(Packing, BadKeysAndShortFilesNameTheKeyAndTheCount) {
  EXPECT_NE(test::input_error([] {
              test::example("vlm-frozen.toml", {"workload.packing=\"pack:0\""});
            }).find("workload.packing"),
            std::string::npos);
  test::TempDir dir;
  const std::string csv =
      dir.write("few.csv", "sample_id,text_tokens,vision_tokens\n0,100,400\n1,100,400\n");
  const std::string error = test::input_error([&] {
    test::example("vlm-frozen.toml",
                  {"workload.csv=\"" + csv + "\"", "workload.packing=\"pack:4096\""});
  });
  EXPECT_NE(error.find("few.csv: has 2 samples"), std::string::npos) << error;
  EXPECT_NE(error.find("fill 1 packs"), std::string::npos) << error;
}

}  // namespace
}  // namespace loom
