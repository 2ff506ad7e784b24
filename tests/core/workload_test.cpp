#include "core/workload.hpp"

#include <gtest/gtest.h>

#include "core/errors.hpp"
#include "core/image_tokens.hpp"
#include "test_support.hpp"

namespace loom {
namespace {

Sample sample_of(int id, std::map<std::string, int> tokens) {
  Sample s;
  s.id = id;
  s.tokens = std::move(tokens);
  return s;
}

}  // namespace

TEST(Workload, ReadsPerModalityTokenCounts) {
  test::TempDir dir;
  const auto samples = load_samples_csv(
      dir.write("s.csv", "sample_id,text_tokens,vision_tokens\n0,100,400\n1,50,0\n"));
  ASSERT_EQ(samples.size(), 2u);
  EXPECT_EQ(samples[0].tokens.at("text"), 100);
  EXPECT_EQ(samples[0].tokens.at("vision"), 400);
  EXPECT_EQ(samples[1].tokens.at("vision"), 0);
}

TEST(Workload, MalformedRowsNameFileAndLine) {
  test::TempDir dir;
  auto error = [&](const std::string& content) {
    try {
      load_samples_csv(dir.write("bad.csv", content));
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(error("sample_id,text_tokens\n0,1\n1\n").find("bad.csv:3"), std::string::npos);
  EXPECT_NE(error("sample_id,text_tokens\n0,-4\n").find("negative"), std::string::npos);
  EXPECT_NE(error("id,text_tokens\n").find("sample_id"), std::string::npos);
  EXPECT_NE(error("sample_id,text\n").find("_tokens"), std::string::npos);
  EXPECT_NE(error("sample_id,text_tokens\n").find("no samples"), std::string::npos);
}

// The LLM sees its text tokens plus each projector's output (input x token_ratio).
TEST(Workload, ModuleTokensFollowTheModelGraph) {
  const auto study = test::example("vlm-frozen.toml");
  const Model& m = study->config.model;
  Sample s = sample_of(0, {{"text", 1024}, {"vision", 4600}});
  EXPECT_EQ(module_input_tokens(m, m.module_index("vision").value(), s), 4600);
  EXPECT_EQ(module_input_tokens(m, m.module_index("projector").value(), s), 4600);
  EXPECT_EQ(module_input_tokens(m, m.module_index("llm").value(), s), 1024 + 1150);
}

// An encoder attends within each item (issue 49): the sample's own items, else its tokens
// cut into item_tokens; the projector sees them scaled; the LLM one sequence per sample.
TEST(Workload, AttentionItemsFollowTheEncoder) {
  const auto study = test::example("vlm-frozen.toml", {"model.modules.vision.item_tokens=1000"});
  const Model& m = study->config.model;
  const ModuleId vision = m.module_index("vision").value();
  const ModuleId projector = m.module_index("projector").value();
  const ModuleId llm = m.module_index("llm").value();
  Sample cut = sample_of(0, {{"text", 1024}, {"vision", 4600}});
  EXPECT_EQ(attention_items(m, vision, cut), (std::vector<int>{1000, 1000, 1000, 1000, 600}));
  EXPECT_EQ(attention_items(m, projector, cut), attention_items(m, vision, cut));  // ratio 1
  EXPECT_EQ(attention_items(m, llm, cut), std::vector<int>{1024 + 1150});

  // Listed items win over item_tokens.
  Sample listed = sample_of(1, {{"text", 10}, {"vision", 4048}});
  listed.items["vision"] = {577, 577, 2894};
  EXPECT_EQ(attention_items(m, vision, listed), (std::vector<int>{577, 577, 2894}));

  // Behind an encoder that merges 2x2 (token_ratio 0.25) the projector's items are scaled,
  // the last absorbing the rounding: 0.25 x {577, 577, 2894} -> 144, 144, and the rest of
  // round(0.25 x 4048) = 1012, 724.
  const auto sss = prepare_study(test::source_path("configs/paper/cornstarch-sss.toml"), {});
  const Model& merged = sss->config.model;
  const ModuleId vproj = merged.module_index("vproj").value();
  EXPECT_EQ(attention_items(merged, vproj, listed), (std::vector<int>{144, 144, 724}));
  EXPECT_EQ(module_input_tokens(merged, vproj, listed), 1012);

  // layer_shape is the items of every sample, in order: what the cost model prices.
  const int first_vision_layer = 0;
  EXPECT_EQ(layer_shape(m, first_vision_layer, {&cut, &listed}).sequence_lengths,
            (std::vector<int>{1000, 1000, 1000, 1000, 600, 577, 577, 2894}));

  // item_tokens = 0: one item per sample, the concatenated reading.
  const auto whole = test::example("vlm-frozen.toml", {"model.modules.vision.item_tokens=0"});
  EXPECT_EQ(attention_items(whole->config.model, vision, cut), std::vector<int>{4600});
}

// A CSV says how a modality's tokens divide into items: a count or a list; resolutions
// give one item per tile.
TEST(Workload, CsvItemsColumnsAndResolutionsGiveItems) {
  test::TempDir dir;
  const auto samples =
      load_samples_csv(dir.write("s.csv",
                                 "sample_id,text_tokens,vision_tokens,vision_items\n"
                                 "0,10,2308,4\n1,10,1730,3\n2,10,3000,576;2424\n3,10,0,0\n"));
  EXPECT_EQ(samples[0].items.at("vision"), (std::vector<int>{577, 577, 577, 577}));
  EXPECT_EQ(samples[1].items.at("vision"), (std::vector<int>{577, 577, 576}));
  EXPECT_EQ(samples[2].items.at("vision"), (std::vector<int>{576, 2424}));
  EXPECT_FALSE(samples[3].items.count("vision"));

  const auto tiles = load_samples_csv(
      dir.write("r.csv", "sample_id,text_tokens,vision_resolution\n0,10,1000x1000;800x400\n"),
      parse_image_token_rule("anyres:336/14"));
  // LLaVA-NeXT's AnyRes (image_tokens_test.cpp): 1000x1000 on a 2x2 grid plus the base
  // image, 800x400 on 2x1 plus the base: 8 tiles of 576 tokens, each its own item.
  EXPECT_EQ(tiles[0].items.at("vision"), std::vector<int>(8, 576));
  EXPECT_EQ(tiles[0].tokens.at("vision"), 8 * 576);
}

TEST(Workload, BadItemsColumnsNameTheLineAndTheFix) {
  test::TempDir dir;
  auto error = [&](const std::string& content) {
    return test::input_error([&] { load_samples_csv(dir.write("bad.csv", content)); });
  };
  const std::string head = "sample_id,text_tokens,vision_tokens,vision_items\n";
  EXPECT_NE(error(head + "0,1,100,60;50\n").find("sum to 110"), std::string::npos);
  EXPECT_NE(error(head + "0,1,100,60;50\n").find("bad.csv:2"), std::string::npos);
  EXPECT_NE(error(head + "0,1,3,4\n").find("at most one item per token"), std::string::npos);
  // A count is checked before anything is allocated for it.
  EXPECT_NE(error(head + "0,1,3,1000000000\n").find("1000000000 items of 3 tokens"),
            std::string::npos);
  EXPECT_NE(error(head + "0,1,100,0;100\n").find("item 1 has no tokens"), std::string::npos);
  EXPECT_NE(error(head + "0,1,100,0\n").find("at least one item"), std::string::npos);
  EXPECT_NE(error("sample_id,text_tokens,vision_items\n0,1,2\n").find("no vision_tokens column"),
            std::string::npos);
  EXPECT_NE(error("sample_id,text_tokens,vision_resolution,vision_items\n0,1,28x28,1\n")
                .find("resolution column"),
            std::string::npos);
}

}  // namespace loom
