// Megatron's pipeline layout string (schedule.layout): parsing, what it resolves to, the
// errors that name what it counted, and a layout run through a scheduler with chunks.
#include "core/pipeline_layout.hpp"

#include <gtest/gtest.h>

#include "app/study.hpp"
#include "core/config.hpp"
#include "core/errors.hpp"
#include "core/schedule_text.hpp"
#include "test_support.hpp"

namespace loom {
namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no InputError)";
}

TEST(PipelineLayout, ParsesSymbolsGroupsAndRepetitions) {
  // Megatron-Bridge's Llama 3.1 405B split over 8 x 8 stages.
  const auto stages = parse_pipeline_layout("Et|(tt|)*62tL");
  ASSERT_EQ(stages.size(), 64u);
  EXPECT_TRUE(stages.front().embedding);
  EXPECT_EQ(stages.front().transformer_layers, 1);
  EXPECT_TRUE(stages.back().loss);
  EXPECT_EQ(stages[31].transformer_layers, 2);
  EXPECT_EQ(layout_stage_layers(stages, 126).size(), 64u);
  // Repeated symbols, commas and spaces as separators (layouts as recipes write them).
  const auto ds = parse_pipeline_layout("Et*3 | t*4, t | t*2L");
  ASSERT_EQ(ds.size(), 3u);
  EXPECT_EQ(layout_stage_layers(ds, 10), (std::vector<int>{3, 5, 2}));
  EXPECT_EQ(format_pipeline_layout(ds), "Et*3|t*5|t*2L");
  EXPECT_EQ(format_pipeline_layout(parse_pipeline_layout(format_pipeline_layout(ds))),
            "Et*3|t*5|t*2L");
}

TEST(PipelineLayout, ErrorsSayWhatWasCountedAndWhere) {
  EXPECT_NE(error_of([] {
              layout_stage_layers(parse_pipeline_layout("Et|t|tL"), 4);
            }).find("counts 3 transformer layers (t) in 3 stages but the model has 4"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_pipeline_layout("Et|(tt|*2"); }).find("'(' without its ')'"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_pipeline_layout("Et|tx"); }).find("at character 5: unexpected 'x'"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_pipeline_layout("Et*|t"); }).find("'*' needs a count"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              layout_stage_layers(parse_pipeline_layout("Et|tm|tL"), 4);
            }).find("stage 1 holds a multi-token-prediction layer m; they belong to the last"),
            std::string::npos);
  // DeepSeek-V3's: m counts as a layer of the last stage, and prints back as written.
  const auto deepseek = parse_pipeline_layout("Et*3|(t*4|)*14t*2mL");
  EXPECT_EQ(layout_stage_layers(deepseek, 62, 1).back(), 3);
  EXPECT_NE(error_of([&] {
              layout_stage_layers(deepseek, 62, 0);
            }).find("names 1 multi-token-prediction layers (m) but the model has 0"),
            std::string::npos);
  EXPECT_EQ(deepseek.back().mtp_layers, 1);
  std::string expected = "Et*3|";
  for (int i = 0; i < 14; ++i) expected += "t*4|";
  EXPECT_EQ(format_pipeline_layout(deepseek), expected + "t*2mL");
  // Input that would blow up: nested repetitions, and deep nesting.
  EXPECT_NE(error_of([] {
              parse_pipeline_layout("((t*1000)*1000)*1000");
            }).find("expands to more than a million symbols"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              parse_pipeline_layout(std::string(100000, '('));
            }).find("nested more than 16 deep"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              layout_stage_layers(parse_pipeline_layout("t|Et|tL"), 3);
            }).find("stage 1 holds the embedding E; it belongs to the first stage"),
            std::string::npos);
  // Llama 3's own layout gives the embedding and the loss stages of their own, which Loom
  // does not model: the message says how to write it instead.
  EXPECT_NE(error_of([] {
              layout_stage_layers(parse_pipeline_layout("E|t|t|L"), 2);
            }).find("stage 0 holds no transformer layer (only the embedding)"),
            std::string::npos);
}

TEST(PipelineLayout, AConfigsLayoutSplitsTheVirtualStagesOfAnInterleavedSchedule) {
  // Narayanan's 145.6B GPT (80 layers, pp 8), interleaved with 2 chunks: 16 virtual stages,
  // the embedding's stage and the loss's lighter than the rest.
  const std::string config = test::source_path("validation/megatron-narayanan-2021/n1-145.6b.toml");
  const std::vector<std::string> overrides = {"schedule.stage_layers=[]",
                                              "schedule.layout=\"Et*4|(t*5|)*14t*6L\"",
                                              "schedule.name=interleaved-1f1b",
                                              "schedule.interleaved-1f1b.chunks=2",
                                              "parallel.dp=1",
                                              "schedule.microbatches=16"};
  const auto study = prepare_study(config, overrides);
  EXPECT_EQ(study->config.schedule.layout,
            "Et*4|t*5|t*5|t*5|t*5|t*5|t*5|t*5|t*5|t*5|t*5|t*5|"
            "t*5|t*5|t*5|t*6L");
  // Virtual stage s holds the layout's stage s: its first layer is the sum before it. Read
  // the stages off the IR text, as a saved schedule holds them.
  const Schedule back = parse_schedule(format_schedule(study->schedule));
  std::map<int, std::pair<int, int>> stage_layers;  // stage -> [first, end)
  for (const auto& program : back.programs) {
    for (const Op& op : program) {
      if (const auto* c = std::get_if<Compute>(&op); c && c->pass == Pass::kF) {
        auto [it, fresh] = stage_layers.try_emplace(c->stage.value(), c->first_layer, c->end_layer);
        it->second.first = std::min(it->second.first, c->first_layer);
        it->second.second = std::max(it->second.second, c->end_layer);
      }
    }
  }
  ASSERT_EQ(stage_layers.size(), 16u);
  EXPECT_EQ(stage_layers[0], std::make_pair(0, 4));
  EXPECT_EQ(stage_layers[1], std::make_pair(4, 9));
  EXPECT_EQ(stage_layers[15], std::make_pair(74, 80));
  // A layout for another number of virtual stages names both counts.
  std::vector<std::string> one_chunk = overrides;
  one_chunk[3] = "schedule.interleaved-1f1b.chunks=1";
  EXPECT_NE(error_of([&] { prepare_study(config, one_chunk); })
                .find("schedule.layout: 16 stages but the schedule runs 8 (parallel.pp = 8 x 1 "
                      "chunks per rank)"),
            std::string::npos);
}

}  // namespace
}  // namespace loom
