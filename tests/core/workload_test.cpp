#include "core/workload.hpp"

#include <gtest/gtest.h>

#include "core/errors.hpp"
#include "test_support.hpp"

namespace loom {

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
  Sample s{0, {{"text", 1024}, {"vision", 4600}}};
  EXPECT_EQ(module_input_tokens(m, m.module_index("vision").value(), s), 4600);
  EXPECT_EQ(module_input_tokens(m, m.module_index("projector").value(), s), 4600);
  EXPECT_EQ(module_input_tokens(m, m.module_index("llm").value(), s), 1024 + 1150);
}

}  // namespace loom
