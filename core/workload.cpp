#include "core/workload.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <fstream>
#include <memory>
#include <sstream>
#include <utility>

#include "core/csv.hpp"
#include "core/errors.hpp"
#include "core/io.hpp"

namespace loom {

std::vector<Sample> synthetic_samples(int count, const std::map<std::string, int>& tokens) {
  std::vector<Sample> samples(static_cast<size_t>(count));
  for (int id = 0; auto& sample : samples) {
    sample.id = id++;
    sample.tokens = tokens;
  }
  return samples;
}

namespace {

std::vector<std::string> split_commas(const std::string& line) {
  std::vector<std::string> cells;
  std::stringstream ss(line);
  for (std::string cell; std::getline(ss, cell, ',');) cells.push_back(cell);
  if (!line.empty() && line.back() == ',') cells.emplace_back();
  return cells;
}

int parse_count(const std::string& where, const std::string& column, const std::string& cell) {
  constexpr long kMaxValue = 1L << 30;  // ids and token counts are ints downstream
  long v = 0;
  const char* b = cell.data();
  const char* e = b + cell.size();
  auto [ptr, ec] = std::from_chars(b, e, v);
  if (ec != std::errc{} || ptr != e) {
    throw InputError(where + ": column '" + column + "': '" + cell + "' is not an integer");
  }
  if (v < 0) throw InputError(where + ": column '" + column + "' is negative");
  if (v > kMaxValue) {
    throw InputError(where + ": column '" + column + "': " + cell + " is more than " +
                     std::to_string(kMaxValue));
  }
  return static_cast<int>(v);
}

/// `WxH` or several images `WxH;WxH` (an empty cell: no image) -> each image's tiles as
/// items of vision tokens (image_tiles() x image_tokens() / tiles).
std::vector<long> resolution_items(const std::string& where, const std::string& column,
                                   const std::string& cell, const ImageTokenRule& images) {
  std::vector<long> items;
  std::stringstream ss(cell);
  for (std::string image; std::getline(ss, image, ';');) {
    const size_t x = image.find('x');
    if (x == std::string::npos) {
      throw InputError(where + ": column '" + column + "': '" + image +
                       "' is not a resolution WIDTHxHEIGHT (e.g. 1280x720)");
    }
    const int w = parse_count(where, column, image.substr(0, x));
    const int h = parse_count(where, column, image.substr(x + 1));
    for (const int item : image_items(images, w, h)) items.push_back(item);
  }
  return items;
}

/// An `_items` cell: a count N of equal items, or each item's tokens `576;576;2880`.
struct ItemCell {
  std::string column;
  int count = 0;           ///< N equal items (when `sizes` is empty)
  std::vector<int> sizes;  ///< each item's tokens
};

ItemCell item_cell(const std::string& where, const std::string& column, const std::string& cell) {
  ItemCell out{.column = column, .count = 0, .sizes = {}};
  if (cell.find(';') == std::string::npos) {
    out.count = parse_count(where, column, cell);
    return out;
  }
  std::stringstream ss(cell);
  for (std::string item; std::getline(ss, item, ';');) {
    out.sizes.push_back(parse_count(where, column, item));
    if (out.sizes.back() == 0) {
      throw InputError(where + ": column '" + column + "': item " +
                       std::to_string(out.sizes.size()) + " has no tokens");
    }
  }
  return out;
}

/// The sample's `_items` cell against its tokens: N equal items (the remainder spread over
/// the first), or a list that sums up.
std::vector<int> sized_items(const std::string& where, const ItemCell& cell, int tokens) {
  const int n = cell.sizes.empty() ? cell.count : isize(cell.sizes);
  if ((n == 0) != (tokens == 0)) {
    throw InputError(where + ": column '" + cell.column + "': " + std::to_string(n) + " items of " +
                     std::to_string(tokens) +
                     " tokens (a sample with tokens has at least one item, one without none)");
  }
  if (cell.sizes.empty()) {
    if (n > tokens) {
      throw InputError(where + ": column '" + cell.column + "': " + std::to_string(n) +
                       " items of " + std::to_string(tokens) +
                       " tokens (at most one item per token)");
    }
    std::vector<int> items(static_cast<size_t>(n));  // n <= tokens: bounded by the token cap
    for (int k = 0; k < n; ++k) items[static_cast<size_t>(k)] = tokens / n + (k < tokens % n);
    return items;
  }
  long sum = 0;
  for (int t : cell.sizes) sum += t;
  if (sum != tokens) {
    throw InputError(where + ": column '" + cell.column + "': the items sum to " +
                     std::to_string(sum) + " tokens, the sample has " + std::to_string(tokens) +
                     " (make them equal, or give a count of items)");
  }
  return cell.sizes;
}

enum class ColumnKind { kTokens, kResolution, kItems };

struct CsvColumn {
  std::string modality;
  ColumnKind kind = ColumnKind::kTokens;
};

/// `<modality>_tokens`, `<modality>_resolution` or `<modality>_items`; `image` is an alias
/// of `vision` (the modality Loom's vision encoders read).
CsvColumn parse_column(const std::string& path, const std::string& col) {
  for (const auto& [suffix, kind] :
       {std::pair<std::string, ColumnKind>{"_tokens", ColumnKind::kTokens},
        {"_resolution", ColumnKind::kResolution},
        {"_items", ColumnKind::kItems}}) {
    if (col.size() > suffix.size() &&
        col.compare(col.size() - suffix.size(), suffix.size(), suffix) == 0) {
      std::string modality = col.substr(0, col.size() - suffix.size());
      if (modality == "image") modality = "vision";
      return {modality, kind};
    }
  }
  throw InputError(path + ":1: column '" + col +
                   "' must be named <modality>_tokens, <modality>_resolution or <modality>_items");
}

}  // namespace

int image_patch_tokens(int width, int height) {
  // Qwen2-VL / Qwen2.5-VL (the encoders of dissertation §4.7): 14-pixel patches, sides
  // rounded up to a multiple of 28 so that 2x2 patches merge; at least one 28x28 block.
  constexpr long kPatch = 14, kMerge = 28;
  const long w = std::max(kMerge, (width + kMerge - 1) / kMerge * kMerge);
  const long h = std::max(kMerge, (height + kMerge - 1) / kMerge * kMerge);
  return static_cast<int>(std::min<long>((w / kPatch) * (h / kPatch), 1L << 30));
}

std::vector<Sample> load_samples_csv(const std::string& path, const ImageTokenRule& images) {
  // The modality columns vary per file, so fccp's fixed-arity CSVReader does not fit; its
  // LineReader does the buffered reading and line counting, the cells are split here.
  check_readable_file(path, "workload CSV (workload.csv, relative to the config file)");
  std::unique_ptr<io::LineReader> reader;
  try {
    reader = std::make_unique<io::LineReader>(path);
  } catch (const std::exception&) {
    throw InputError(path +
                     ": cannot open the workload CSV (workload.csv; relative paths are "
                     "relative to the config file)");
  }
  const char* header_line = reader->next_line();
  if (!header_line) throw InputError(path + ":1: empty file, expected a header");
  std::vector<std::string> columns = split_commas(header_line);
  for (auto& col : columns) {
    while (!col.empty() && (col.back() == '\r' || col.back() == ' ')) col.pop_back();
  }
  if (columns.empty() || columns[0] != "sample_id") {
    throw InputError(path + ":1: the first column must be 'sample_id'");
  }
  std::vector<CsvColumn> modalities;
  for (size_t c = 1; c < columns.size(); ++c) modalities.push_back(parse_column(path, columns[c]));
  std::vector<Sample> samples;
  constexpr long kMaxTokens = 1L << 30;  // ids and token counts are ints downstream
  while (const char* line = reader->next_line()) {
    const std::string where = path + ":" + std::to_string(reader->get_file_line());
    std::string text(line);
    if (!text.empty() && text.back() == '\r') text.pop_back();
    if (text.empty()) continue;
    const std::vector<std::string> cells = split_commas(text);
    if (cells.size() != columns.size()) {
      throw InputError(where + ": expected " + std::to_string(columns.size()) + " columns, found " +
                       std::to_string(cells.size()));
    }
    Sample s;
    s.id = parse_count(where, columns[0], cells[0]);
    long total = 0;
    std::map<std::string, ItemCell> listed;  // _items cells, by modality
    for (size_t m = 0; m < modalities.size(); ++m) {
      const std::string& col = columns[m + 1];
      const std::string& modality = modalities[m].modality;
      long v = 0;
      switch (modalities[m].kind) {
        case ColumnKind::kItems:
          listed[modality] = item_cell(where, col, cells[m + 1]);
          continue;
        case ColumnKind::kTokens:
          v = parse_count(where, col, cells[m + 1]);
          break;
        case ColumnKind::kResolution:
          for (const long item : resolution_items(where, col, cells[m + 1], images)) {
            v += item;
            s.items[modality].push_back(static_cast<int>(std::min(item, kMaxTokens)));
          }
          break;
      }
      if (v > kMaxTokens) {
        throw InputError(where + ": column '" + col + "': " + std::to_string(v) +
                         " tokens is more than " + std::to_string(kMaxTokens));
      }
      s.tokens[modality] += static_cast<int>(v);
      total += v;
    }
    for (const auto& [modality, cell] : listed) {
      if (s.items.count(modality)) {
        throw InputError(where + ": column '" + cell.column + "': " + modality +
                         " has a resolution column, whose images already give the items "
                         "(drop one of the two)");
      }
      const auto it = s.tokens.find(modality);
      if (it == s.tokens.end()) {
        throw InputError(path + ":1: column '" + cell.column + "' has no " + modality +
                         "_tokens column to divide (add one)");
      }
      std::vector<int> items = sized_items(where, cell, it->second);
      if (!items.empty()) s.items[modality] = std::move(items);
    }
    // A modality given by token counts and by resolutions: its items are only partly known,
    // so the encoder's item_tokens cuts the whole (as for token counts alone).
    for (auto it = s.items.begin(); it != s.items.end();) {
      long sum = 0;
      for (int t : it->second) sum += t;
      it = sum == s.tokens[it->first] ? std::next(it) : s.items.erase(it);
    }
    if (total == 0) throw InputError(where + ": sample " + cells[0] + " has no tokens");
    samples.push_back(std::move(s));
  }
  if (samples.empty()) throw InputError(path + ": no samples after the header");
  return samples;
}

std::vector<const Sample*> sample_batch(const std::vector<Sample>& samples,
                                        const std::vector<SampleId>& ids) {
  std::vector<const Sample*> batch;
  for (const SampleId id : ids) batch.push_back(&samples.at(id.slot()));
  return batch;
}

std::vector<const Sample*> first_samples(const std::vector<Sample>& samples, int count) {
  std::vector<const Sample*> batch;
  for (size_t k = 0; k < samples.size() && std::cmp_less(k, count); ++k)
    batch.push_back(&samples[k]);
  return batch;
}

int module_input_tokens(const Model& model, ModuleId module, const Sample& sample) {
  const Module& mod = model.module(module);
  auto tokens_of = [&](const std::string& modality) {
    const auto it = sample.tokens.find(modality);
    return it == sample.tokens.end() ? 0 : it->second;
  };
  if (mod.inputs.empty()) return tokens_of(mod.modality);
  double total = mod.kind == ModuleKind::kLlm ? tokens_of("text") : 0;
  for (const ModuleId idx : model.inputs(module)) {
    total += std::round(module_input_tokens(model, idx, sample) * model.module(idx).token_ratio);
  }
  return static_cast<int>(total);
}

double MicrobatchShape::total_tokens() const {
  double t = 0;
  for (int s : sequence_lengths) t += s;
  return t;
}

double MicrobatchShape::sum_squared() const {
  double t = 0;
  for (int s : sequence_lengths) t += static_cast<double>(s) * s;
  return t;
}

int item_tokens(const Model& model, ModuleId module) {
  const Module& mod = model.module(module);
  if (mod.kind == ModuleKind::kEncoder) return mod.item_tokens;
  if (mod.kind == ModuleKind::kLlm || model.inputs(module).size() != 1) return 0;
  const ModuleId producer = model.inputs(module).front();
  const int item = item_tokens(model, producer);
  if (item == 0) return 0;
  const double scaled = std::round(item * model.module(producer).token_ratio);
  return std::max(1, static_cast<int>(scaled));
}

namespace {

/// `total` tokens as items of `item` tokens, the last shorter; one item when `item` is 0.
std::vector<int> cut_into_items(int total, int item) {
  if (item <= 0 || total <= item) return {total};
  std::vector<int> items;
  for (int left = total; left > 0; left -= item) items.push_back(std::min(left, item));
  return items;
}

/// `items` made to sum to `total` by the last ones (rounding: a pack's or a projector's
/// token count is rounded once for the whole, its items each on their own); no empty item.
std::vector<int> absorb_rounding(std::vector<int> items, int total) {
  int placed = 0;
  for (int& n : items) {
    n = std::min(n, total - placed);
    placed += n;
  }
  if (!items.empty()) items.back() += total - placed;
  std::erase(items, 0);
  if (items.empty()) items.push_back(0);
  return items;
}

}  // namespace

std::vector<int> attention_items(const Model& model, ModuleId module, const Sample& sample) {
  const Module& mod = model.module(module);
  const int total = module_input_tokens(model, module, sample);
  if (!sample.parts.empty()) {
    std::vector<int> items;
    for (const Sample& part : sample.parts) {
      const std::vector<int> own = attention_items(model, module, part);
      items.insert(items.end(), own.begin(), own.end());
    }
    return absorb_rounding(std::move(items), total);
  }
  if (mod.kind == ModuleKind::kEncoder) {
    const auto it = sample.items.find(mod.modality);
    if (it != sample.items.end() && !it->second.empty()) return it->second;
    return cut_into_items(total, mod.item_tokens);
  }
  if (mod.kind == ModuleKind::kLlm || model.inputs(module).size() != 1) return {total};
  const ModuleId producer = model.inputs(module).front();
  std::vector<int> items = attention_items(model, producer, sample);
  if (items.size() == 1) return {total};
  // Each item scaled as module_input_tokens() scales the sample.
  const double ratio = model.module(producer).token_ratio;
  for (int& n : items) n = static_cast<int>(std::round(n * ratio));
  return absorb_rounding(std::move(items), total);
}

MicrobatchShape layer_shape(const Model& model, int global_layer,
                            const std::vector<const Sample*>& samples) {
  const ModuleId module = model.module_of(global_layer);
  MicrobatchShape shape;
  for (const Sample* s : samples) {
    for (int item : attention_items(model, module, *s)) shape.sequence_lengths.push_back(item);
  }
  return shape;
}

}  // namespace loom
