#pragma once
/// Workload: a batch of samples, each with a token count per modality ("text", "vision",
/// "audio", ...). Fixed-size synthetic samples or a CSV (`sample_id,text_tokens,...`).
#include <map>
#include <string>
#include <vector>

#include "core/image_tokens.hpp"
#include "core/index.hpp"
#include "core/model.hpp"

namespace loom {

struct Sample {
  int id = 0;
  std::map<std::string, int> tokens;  ///< modality -> tokens (e.g. "text" -> 1024)
  /// modality -> the encoder tokens of each item (image, tile, clip) the modality's tokens
  /// are made of, in order, summing to tokens[modality]; absent when the workload does not
  /// say (token-count columns, workload.tokens): the encoder's item_tokens cuts them then.
  std::map<std::string, std::vector<int>> items;
  /// A pack (core/packing.hpp): the samples it holds, whose token counts `tokens` sums;
  /// attention stays within each. Empty for a plain sample.
  std::vector<Sample> parts;
};

/// `count` identical samples with the given per-modality token counts.
std::vector<Sample> synthetic_samples(int count, const std::map<std::string, int>& tokens);

/// Reads `sample_id,text_tokens,<modality>_tokens,...`. Column names ending in `_tokens`
/// name modalities (`image_tokens` is read as `vision`); a `<modality>_resolution` column
/// holds image sizes `WxH` (several images `WxH;WxH`) converted by image_tokens(), each
/// image's tiles becoming items; a `<modality>_items` column says how the modality's tokens
/// divide into items: a count N (N equal items, the remainder spread over the first) or
/// each item's tokens `576;576;2880` (summing to the tokens column).
/// Throws InputError naming the file and line on malformed input or a sample with no
/// tokens at all. `images` says how a resolution becomes tokens (core/image_tokens.hpp).
std::vector<Sample> load_samples_csv(const std::string& path, const ImageTokenRule& images = {});

/// The samples `ids` names, in order: a microbatch as the cost model reads it. Throws
/// std::out_of_range on an id past `samples`.
std::vector<const Sample*> sample_batch(const std::vector<Sample>& samples,
                                        const std::vector<SampleId>& ids);
/// The first `count` samples (all of them if there are fewer): the representative
/// microbatch that partitioners and planners cost an iteration by.
std::vector<const Sample*> first_samples(const std::vector<Sample>& samples, int count);

/// Vision tokens of one image of `width` x `height` pixels: Qwen2-VL-style 14-pixel
/// patches, sides rounded up to a multiple of 28 (2x2 patch merge).
int image_patch_tokens(int width, int height);

/// Tokens a module processes for one sample: an encoder its modality's tokens; a module
/// with inputs the sum of its inputs' output tokens (the LLM adds the text tokens); the
/// output of a module is its input scaled by token_ratio.
int module_input_tokens(const Model& model, ModuleId module, const Sample& sample);

/// Tokens per input item of `module` when a sample does not list its items; 0 = one item
/// per sample. Encoders: Module::item_tokens (default kDefaultItemTokens, core/model.hpp).
/// A projector's item is its producer's item times that producer's token_ratio (rounded,
/// at least 1), so a projector sees the items its encoder produced. The LLM (and any
/// module fed by several producers): 0, one sequence per sample.
int item_tokens(const Model& model, ModuleId module);

/// The sequences one sample presents to `module`'s attention, summing to
/// module_input_tokens(): the LLM one per sample; an encoder one per item (the sample's
/// own Sample::items, else its tokens cut into item_tokens() pieces, the last shorter), as
/// an encoder runs a batch of images, never their concatenation; a projector its
/// encoder's items scaled by the token_ratio (the last absorbing the rounding). A pack:
/// its parts' sequences in order (the last absorbing the rounding of the pack's sums).
std::vector<int> attention_items(const Model& model, ModuleId module, const Sample& sample);

/// Per-sequence lengths a layer sees for one microbatch (attention_items() of every
/// sample, in order): what cost models consume.
struct MicrobatchShape {
  std::vector<int> sequence_lengths;
  double total_tokens() const;
  double sum_squared() const;  ///< sum of s^2 over sequences (attention is quadratic)
};
MicrobatchShape layer_shape(const Model& model, int global_layer,
                            const std::vector<const Sample*>& samples);

}  // namespace loom
