// Token rules per resolution (issue 49), against hand counts from each model family's
// published rule: one image each at three resolutions.
#include "core/image_tokens.hpp"

#include <gtest/gtest.h>

#include <set>

#include "core/workload.hpp"
#include "core/workload_gen.hpp"
#include "test_support.hpp"

namespace loom {
namespace {

int tokens(const std::string& rule, int width, int height) {
  return image_tokens(parse_image_token_rule(rule), width, height);
}

}  // namespace

// Qwen2-VL: sides rounded up to 28 px, 14 px patches. 1280x720 -> 1288x728 -> 92 x 52.
TEST(ImageTokens, NativeCountsQwen2VlPatches) {
  EXPECT_EQ(tokens("native", 1280, 720), 92 * 52);
  EXPECT_EQ(tokens("native", 448, 448), 32 * 32);
  EXPECT_EQ(tokens("native", 10, 10), 2 * 2);  // at least one 28 x 28 block
}

// LLaVA-1.5: every image padded and resized to 336 x 336: (336 / 14)^2 = 576 patches.
TEST(ImageTokens, FixedIsOneTileWhateverTheResolution) {
  for (const auto& [w, h] : {std::pair{336, 336}, {1280, 720}, {100, 2000}})
    EXPECT_EQ(tokens("fixed:336/14", w, h), 576) << w << "x" << h;
  EXPECT_EQ(tokens("fixed:224/14", 640, 480), 256);
}

// LLaVA-NeXT, 336 px tiles and pinpoints 1x2, 2x1, 2x2, 3x1, 1x3 (width x height tiles),
// by hand with select_best_resolution:
//   1000x1000: 2x2 keeps 672 x 672 px (the others 336 x 336)       -> 1 + 4 tiles
//   800x400:   2x1, 2x2 and 3x1 all keep 672 x 336; 2x1 wastes none -> 1 + 2 tiles
//   1500x400:  3x1 keeps 1008 x 268 (2x1 672 x 179)                -> 1 + 3 tiles
// each tile, and the base image, 576 patches.
TEST(ImageTokens, AnyResPicksLlavaNextsGridAndAddsTheBaseImage) {
  EXPECT_EQ(tokens("anyres:336/14", 1000, 1000), 5 * 576);
  EXPECT_EQ(tokens("anyres:336/14", 800, 400), 3 * 576);
  EXPECT_EQ(tokens("anyres:336/14", 1500, 400), 4 * 576);
  EXPECT_EQ(image_tiles(parse_image_token_rule("anyres:336/14"), 1500, 400), 4);
}

// InternVL, 448 px tiles of 1,024 patches, at most 12 and a thumbnail when more than one:
//   448x448:  1x1 (2x2 ties on the aspect but the image is under half its pixels) -> 1
//   800x600:  aspect 4/3 exactly 4x3                                              -> 12 + 1
//   1000x250: aspect 4 exactly 4x1                                                -> 4 + 1
// and with at most 6 tiles 800x600 takes 3x2 (aspect 1.5, the closest)          -> 6 + 1
TEST(ImageTokens, TilingPicksInternVlsClosestAspectRatioPlusAThumbnail) {
  EXPECT_EQ(tokens("tiling:448/14", 448, 448), 1024);
  EXPECT_EQ(tokens("tiling:448/14", 800, 600), 13 * 1024);
  EXPECT_EQ(tokens("tiling:448/14", 1000, 250), 5 * 1024);
  EXPECT_EQ(tokens("tiling:448/14:6", 800, 600), 7 * 1024);
  EXPECT_EQ(format_image_token_rule(parse_image_token_rule("tiling:448/14")), "tiling:448/14:12");
}

TEST(ImageTokens, BadRulesSayWhatIsWrongAndTheForms) {
  auto error = [](const std::string& rule) {
    return test::input_error([&] { parse_image_token_rule(rule); });
  };
  EXPECT_NE(error("tile:448/14").find("is not a rule"), std::string::npos);
  EXPECT_NE(error("fixed").find("S/P"), std::string::npos);
  EXPECT_NE(error("fixed:336/15").find("not a multiple of the patch side"), std::string::npos);
  EXPECT_NE(error("anyres:336/14:4").find("takes no tile count"), std::string::npos);
  EXPECT_NE(error("tiling:448/14:0").find("tile count N >= 1"), std::string::npos);
  EXPECT_NE(error("fixed:-336/14").find("\"fixed:336/14\""), std::string::npos);
}

// The rule applies where images come by size: a CSV's resolution column and the
// generators; a config that gives tokens directly refuses it, naming the key.
TEST(ImageTokens, CsvResolutionsAndGeneratorsFollowTheRule) {
  test::TempDir dir;
  const std::string csv =
      dir.write("s.csv", "sample_id,text_tokens,vision_resolution\n0,10,1000x1000;800x400\n");
  EXPECT_EQ(load_samples_csv(csv, parse_image_token_rule("anyres:336/14"))[0].tokens.at("vision"),
            (5 + 3) * 576);
  EXPECT_EQ(load_samples_csv(csv)[0].tokens.at("vision"), 72 * 72 + 58 * 30);
  auto counts = [](const std::string& rule) {  // vision tokens over 200 generated samples
    std::set<int> out;
    for (const Sample& s :
         generate_samples(find_dataset("llava-150k"), 200, 3, 0, parse_image_token_rule(rule)))
      out.insert(s.tokens.at("vision"));
    return out;
  };
  EXPECT_EQ(counts("fixed:336/14"), std::set<int>{576});  // one COCO photo a sample
  const std::set<int> anyres = counts("anyres:336/14");   // 2 to 4 tiles and the base
  EXPECT_GT(anyres.size(), 1u);
  for (const int n : anyres) EXPECT_TRUE(n % 576 == 0 && n >= 3 * 576 && n <= 5 * 576) << n;
  const std::string key = "workload.image_tokens";
  EXPECT_NE(test::input_error([&] {
              test::example("vlm-frozen.toml", {key + "=\"fixed:336/14\""});
            }).find(key),
            std::string::npos);
  EXPECT_NE(test::input_error([&] {
              test::example("vlm-frozen.toml",
                            {"workload.dataset=\"llava-150k\"", key + "=\"fixed:336\""});
            }).find(key),
            std::string::npos);
}

}  // namespace loom
