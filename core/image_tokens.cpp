#include "core/image_tokens.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <optional>
#include <utility>
#include <vector>

#include "core/errors.hpp"
#include "core/workload.hpp"

namespace loom {
namespace {

constexpr const char* kForms =
    "\"native\" (Qwen2-VL), \"fixed:S/P\" (LLaVA-1.5: \"fixed:336/14\"), \"anyres:S/P\" "
    "(LLaVA-NeXT: \"anyres:336/14\") or \"tiling:S/P[:N]\" (InternVL: \"tiling:448/14:12\")";

std::optional<int> positive(const std::string& text) {
  int v = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, v);
  if (ec != std::errc{} || ptr != end || v < 1 || v > 100'000) return std::nullopt;
  return v;
}

/// Tiles (width, height) of LLaVA-NeXT's image_grid_pinpoints, in the order it lists them.
constexpr std::pair<int, int> kAnyResGrids[] = {{1, 2}, {2, 1}, {2, 2}, {3, 1}, {1, 3}};

/// LLaVA-NeXT's select_best_resolution: the grid whose resized image keeps the most
/// pixels of the original (capped at the original's), fewer wasted pixels on ties.
std::pair<int, int> anyres_grid(int tile, int width, int height) {
  const double original = static_cast<double>(width) * height;
  std::pair<int, int> best = kAnyResGrids[0];
  double most_kept = -1, least_wasted = std::numeric_limits<double>::infinity();
  for (const auto& [gw, gh] : kAnyResGrids) {
    const double w = gw * tile, h = gh * tile;
    const double scale = std::min(w / width, h / height);
    const double kept = std::min(std::floor(width * scale) * std::floor(height * scale), original);
    const double wasted = w * h - kept;
    if (kept > most_kept || (kept == most_kept && wasted < least_wasted)) {
      most_kept = kept;
      least_wasted = wasted;
      best = {gw, gh};
    }
  }
  return best;
}

/// InternVL's dynamic_preprocess: among the grids of 1..max_tiles tiles (by tile count,
/// then columns), the one whose aspect ratio is closest to the image's; on an equal
/// difference a later (larger) grid wins when the image has more than half its pixels.
int tiling_tiles(int tile, int max_tiles, int width, int height) {
  std::vector<std::pair<int, int>> grids;  // (columns, rows)
  for (int n = 1; n <= max_tiles; ++n)
    for (int c = 1; c <= n; ++c)
      if (n % c == 0) grids.emplace_back(c, n / c);
  const double aspect = static_cast<double>(width) / height;
  const double area = static_cast<double>(width) * height;
  std::pair<int, int> best{1, 1};
  double best_diff = std::numeric_limits<double>::infinity();
  for (const auto& [c, r] : grids) {
    const double diff = std::abs(aspect - static_cast<double>(c) / r);
    if (diff < best_diff) {
      best_diff = diff;
      best = {c, r};
    } else if (diff == best_diff && area > 0.5 * tile * tile * c * r) {
      best = {c, r};
    }
  }
  const int tiles = best.first * best.second;
  return tiles == 1 ? 1 : tiles + 1;  // the thumbnail (use_thumbnail = True)
}

}  // namespace

ImageTokenRule parse_image_token_rule(const std::string& text) {
  auto bad = [&](const std::string& why) -> InputError {
    return InputError("'" + text + "' " + why + "; expected " + kForms);
  };
  ImageTokenRule rule;
  if (text == "native") return rule;
  const size_t colon = text.find(':');
  const std::string kind = text.substr(0, colon);
  if (kind == "fixed")
    rule.kind = ImageTokenRule::Kind::kFixed;
  else if (kind == "anyres")
    rule.kind = ImageTokenRule::Kind::kAnyRes;
  else if (kind == "tiling")
    rule.kind = ImageTokenRule::Kind::kTiling;
  else
    throw bad("is not a rule");
  if (colon == std::string::npos) throw bad("needs the tile and patch sides, S/P");
  std::string rest = text.substr(colon + 1);
  if (const size_t more = rest.find(':'); more != std::string::npos) {
    if (rule.kind != ImageTokenRule::Kind::kTiling) throw bad("takes no tile count");
    const std::optional<int> n = positive(rest.substr(more + 1));
    if (!n) throw bad("needs a tile count N >= 1");
    rule.max_tiles = *n;
    rest.resize(more);
  }
  const size_t slash = rest.find('/');
  const std::optional<int> size = positive(rest.substr(0, slash));
  const std::optional<int> patch =
      slash == std::string::npos ? std::nullopt : positive(rest.substr(slash + 1));
  if (!size || !patch) throw bad("needs positive tile and patch sides, S/P");
  if (*size % *patch != 0) throw bad("has a tile side that is not a multiple of the patch side");
  rule.size = *size;
  rule.patch = *patch;
  return rule;
}

std::string format_image_token_rule(const ImageTokenRule& rule) {
  const std::string sides = std::to_string(rule.size) + "/" + std::to_string(rule.patch);
  switch (rule.kind) {
    case ImageTokenRule::Kind::kNative:
      return "native";
    case ImageTokenRule::Kind::kFixed:
      return "fixed:" + sides;
    case ImageTokenRule::Kind::kAnyRes:
      return "anyres:" + sides;
    case ImageTokenRule::Kind::kTiling:
      return "tiling:" + sides + ":" + std::to_string(rule.max_tiles);
  }
  return "";
}

int image_tiles(const ImageTokenRule& rule, int width, int height) {
  width = std::max(width, 1);
  height = std::max(height, 1);
  switch (rule.kind) {
    case ImageTokenRule::Kind::kNative:
    case ImageTokenRule::Kind::kFixed:
      return 1;
    case ImageTokenRule::Kind::kAnyRes: {
      const auto [gw, gh] = anyres_grid(rule.size, width, height);
      return 1 + gw * gh;  // the base image and the grid's tiles
    }
    case ImageTokenRule::Kind::kTiling:
      return tiling_tiles(rule.size, rule.max_tiles, width, height);
  }
  return 1;
}

int image_tokens(const ImageTokenRule& rule, int width, int height) {
  if (rule.kind == ImageTokenRule::Kind::kNative) return image_patch_tokens(width, height);
  const int side = rule.size / rule.patch;
  return image_tiles(rule, width, height) * side * side;
}

std::vector<int> image_items(const ImageTokenRule& rule, int width, int height) {
  const int tiles = image_tiles(rule, width, height);
  return std::vector<int>(static_cast<size_t>(tiles), image_tokens(rule, width, height) / tiles);
}

}  // namespace loom
