#pragma once
/// How many vision-encoder tokens one image becomes, by the rule of the model family that
/// reads it (`workload.image_tokens`). Every rule counts the patches the encoder runs over;
/// the LLM receives them scaled by the projector's token_ratio. The CLS token a CLIP-style
/// encoder adds to each tile is not counted (1 of 577 at 336 px).
///
///   native             Qwen2-VL: the image at its own resolution, sides rounded up to 28 px,
///                      14 px patches (Wang et al. 2024, §2.1 "Naive Dynamic Resolution")
///   fixed:S/P          LLaVA-1.5: padded to a square, resized to S x S: (S/P)^2 patches
///                      (fixed:336/14 = 576; Liu et al., CVPR 2024, §3 and Table 9)
///   anyres:S/P         LLaVA-NeXT: the grid of S-px tiles among its pinpoints that keeps the
///                      most of the image's resolution (least waste on ties), each tile and a
///                      base image resized to S x S: (1 + tiles) (S/P)^2 patches (Liu et al.,
///                      "LLaVA-NeXT", 2024; reference select_best_resolution and
///                      image_grid_pinpoints 1x2, 2x1, 2x2, 3x1, 1x3 tiles)
///   tiling:S/P[:N]     InternVL 1.5/2: 1..N tiles of S px (default N = 12) whose aspect ratio
///                      is closest to the image's, plus a thumbnail when there is more than
///                      one: tiles x (S/P)^2 patches (tiling:448/14: 1,024 a tile; Chen et
///                      al., "How Far Are We to GPT-4V?", 2024, §3.2 dynamic high resolution)
#include <string>
#include <vector>

namespace loom {

struct ImageTokenRule {
  enum class Kind { kNative, kFixed, kAnyRes, kTiling };
  Kind kind = Kind::kNative;
  int size = 0;        ///< S: the side of a tile (fixed, anyres, tiling), pixels
  int patch = 14;      ///< P: the side of a patch, pixels
  int max_tiles = 12;  ///< tiling: N, the most tiles an image is cut into
};

/// Reads "native", "fixed:S/P", "anyres:S/P" or "tiling:S/P[:N]"; throws InputError saying
/// what is wrong and the accepted forms on anything else (S a multiple of P, N >= 1).
ImageTokenRule parse_image_token_rule(const std::string& text);
/// The rule as parse_image_token_rule() reads it.
std::string format_image_token_rule(const ImageTokenRule& rule);

/// The tiles an image of `width` x `height` pixels is cut into (base image and thumbnail
/// included; 1 for native and fixed): the items a per-item encoder runs.
int image_tiles(const ImageTokenRule& rule, int width, int height);
/// The encoder tokens of that image under `rule`.
int image_tokens(const ImageTokenRule& rule, int width, int height);
/// Each tile's encoder tokens (image_tiles() items summing to image_tokens()): what the
/// encoder attends over one at a time.
std::vector<int> image_items(const ImageTokenRule& rule, int width, int height);

}  // namespace loom
