// Per-module layouts (core/layout.hpp): the checks every per-module scheduler relies on.
#include "core/layout.hpp"

#include <gtest/gtest.h>

#include "core/config.hpp"
#include "core/errors.hpp"
#include "test_support.hpp"

namespace loom {
namespace {

/// tests/data/two-encoders.toml (vision + vproj, audio + aproj -> llm on 4 GPUs) with
/// per-module layout overrides.
Config two_encoders(const std::vector<std::string>& overrides) {
  return load_config(test::source_path("tests/data/two-encoders.toml"), overrides);
}

std::string message_of(const std::vector<std::string>& overrides) {
  try {
    two_encoders(overrides);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

const std::vector<std::string> kNonColocated = {
    "parallel.modules.llm.pp=2", "parallel.modules.llm.gpus=0-1", "parallel.modules.vision.gpus=2",
    "parallel.modules.audio.gpus=3"};

}  // namespace

TEST(Layout, AbsentTablesKeepTheSingleLayout) {
  EXPECT_TRUE(two_encoders({}).parallel.module_layouts.empty());
}

TEST(Layout, ProjectorsFollowTheirEncoder) {
  const Config c = two_encoders(kNonColocated);
  const Model& m = c.model;
  const auto& l = c.parallel.module_layouts;
  ASSERT_EQ(l.size(), m.modules().size());
  const ModuleId vproj = m.module_index("vproj").value();
  EXPECT_EQ(l[vproj].owner, m.module_index("vision").value());
  EXPECT_EQ(l[vproj].first_gpu, 2);
  EXPECT_EQ(l[m.module_index("llm").value()].gpus, 2);
  const auto groups = layout_groups(m, l);
  ASSERT_EQ(groups.size(), 3u);
  EXPECT_EQ(groups[0].modules, (std::vector<ModuleId>{ModuleId{0}, ModuleId{1}}));  // vision, vproj
  EXPECT_EQ(groups[2].owner, m.module_index("llm").value());
  EXPECT_FALSE(colocated(l[ModuleId{0}], l[m.module_index("llm").value()]));
}

TEST(Layout, ColocatedModulesShareTheDefaultRankSet) {
  const Config c = two_encoders({"parallel.modules.llm.pp=2", "parallel.modules.llm.dp=2",
                                 "parallel.modules.vision.dp=4", "parallel.modules.audio.tp=4"});
  const auto& l = c.parallel.module_layouts;
  for (const ModuleLayout& layout : l) {
    EXPECT_EQ(layout.first_gpu, 0);
    EXPECT_EQ(layout.gpus, 4);
  }
  EXPECT_TRUE(colocated(l[ModuleId{0}], l.back()));
  EXPECT_EQ(l.back().stage_gpu(1, 1), 3);  // replica 1, stage 1 of a 2 x 2 grid
}

TEST(Layout, SizeMismatchNamesTheModule) {
  const std::string e =
      message_of({"parallel.modules.llm.pp=2", "parallel.modules.llm.gpus=0-2",
                  "parallel.modules.vision.gpus=3", "parallel.modules.audio.gpus=3"});
  EXPECT_NE(e.find("parallel.modules.llm"), std::string::npos) << e;
  EXPECT_NE(e.find("= 2 GPUs"), std::string::npos) << e;
  EXPECT_THROW(two_encoders({"parallel.modules.llm.pp=2", "parallel.modules.llm.gpus=0-2",
                             "parallel.modules.vision.gpus=3", "parallel.modules.audio.gpus=3"}),
               InputError);
}

TEST(Layout, PartialOverlapNamesBothModules) {
  const std::vector<std::string> o = {
      "parallel.modules.llm.pp=2", "parallel.modules.llm.gpus=0-1", "parallel.modules.vision.pp=2",
      "parallel.modules.vision.gpus=1-2", "parallel.modules.audio.gpus=3"};
  EXPECT_THROW(two_encoders(o), InputError);
  const std::string e = message_of(o);
  EXPECT_NE(e.find("parallel.modules.llm"), std::string::npos) << e;
  EXPECT_NE(e.find("'vision'"), std::string::npos) << e;
  EXPECT_NE(e.find("partly overlaps"), std::string::npos) << e;
}

TEST(Layout, EncodersNeedATableAndNamesMustExist) {
  const std::string missing = message_of({"parallel.modules.llm.dp=4"});
  EXPECT_NE(missing.find("parallel.modules.vision: missing"), std::string::npos) << missing;
  const std::string unknown = message_of({"parallel.modules.lm.dp=4"});
  EXPECT_NE(unknown.find("no module named 'lm'"), std::string::npos) << unknown;
  EXPECT_THROW(two_encoders({"parallel.modules.llm.gpus=3-1"}), InputError);
}

TEST(Layout, CpModeReplicateIsForEncodersOnly) {
  // Megatron-LM's LLaVA runs its vision model whole on every CP rank (layout.hpp).
  const Config c = two_encoders({"parallel.modules.llm.cp=4", "parallel.modules.vision.cp=4",
                                 "parallel.modules.vision.cp_mode=\"replicate\"",
                                 "parallel.modules.audio.dp=4"});
  const Model& m = c.model;
  EXPECT_TRUE(c.parallel.module_layouts[m.module_index("vision").value()].cp_replicates);
  EXPECT_TRUE(c.parallel.module_layouts[m.module_index("vproj").value()].cp_replicates);
  EXPECT_FALSE(c.parallel.module_layouts[m.module_index("audio").value()].cp_replicates);
  const std::string llm =
      message_of({"parallel.modules.llm.cp=4", "parallel.modules.vision.dp=4",
                  "parallel.modules.audio.dp=4", "parallel.modules.llm.cp_mode=\"replicate\""});
  EXPECT_NE(llm.find("parallel.modules.llm.cp_mode"), std::string::npos) << llm;
  const std::string bad =
      message_of({"parallel.modules.llm.dp=4", "parallel.modules.vision.dp=4",
                  "parallel.modules.audio.dp=4", "parallel.modules.vision.cp_mode=\"copy\""});
  EXPECT_NE(bad.find("parallel.modules.vision.cp_mode"), std::string::npos) << bad;
}

TEST(Layout, RankSetBeyondTheClusterIsInfeasible) {
  EXPECT_THROW(two_encoders({"parallel.modules.llm.gpus=4", "parallel.modules.vision.gpus=0",
                             "parallel.modules.audio.gpus=1"}),
               InfeasibleError);
}

TEST(Layout, EncoderFeedingNothingIsAnInputErrorNamingIt) {
  // The audio projector no longer feeds the LLM: the audio branch leads nowhere.
  const std::string e = message_of({"model.modules.llm.inputs=[\"vproj\"]"});
  EXPECT_NE(e.find("model.modules.aproj"), std::string::npos) << e;
  EXPECT_NE(e.find("feeds nothing"), std::string::npos) << e;
  EXPECT_THROW(two_encoders({"model.modules.llm.inputs=[\"vproj\"]"}), InputError);
}

TEST(Layout, GpuRangeParsing) {
  int first = 0, end = 0;
  EXPECT_TRUE(parse_gpu_range("4-7", &first, &end));
  EXPECT_EQ(first, 4);
  EXPECT_EQ(end, 8);
  EXPECT_TRUE(parse_gpu_range("5", &first, &end));
  EXPECT_EQ(end, 6);
  EXPECT_FALSE(parse_gpu_range("7-4", &first, &end));
  EXPECT_FALSE(parse_gpu_range("a-b", &first, &end));
  EXPECT_FALSE(parse_gpu_range("", &first, &end));
}

}  // namespace loom

namespace loom {

// Configs without [parallel.modules] still give per-module schedulers a layout: the
// single layout's GPUs, shared (colocated) or split one stage per encoder (non-colocated).
TEST(Layout, DefaultsFromTheSingleLayout) {
  const Config c = two_encoders({});  // pp 2, dp 1, tp 1 on 4 GPUs
  const auto co = default_module_layouts(c.model, 4, 1, 1, true, c.cluster);
  for (const ModuleLayout& l : co) EXPECT_EQ(l.gpus, 4);
  EXPECT_EQ(co.front().dp, 4);  // vision: 1 stage x 4 replicas
  EXPECT_EQ(co.back().pp, 4);   // llm
  const auto nc = default_module_layouts(c.model, 4, 1, 1, false, c.cluster);
  const Model& m = c.model;
  EXPECT_EQ(nc[m.module_index("vision").value()].first_gpu, 0);
  EXPECT_EQ(nc[m.module_index("audio").value()].first_gpu, 1);
  EXPECT_EQ(nc[m.module_index("llm").value()].first_gpu, 2);
  EXPECT_EQ(nc[m.module_index("llm").value()].pp, 2);
  EXPECT_THROW(default_module_layouts(c.model, 2, 1, 1, false, c.cluster), InputError);
}

}  // namespace loom
