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

/// `WxH` or several images `WxH;WxH` (an empty cell: no image) -> vision tokens.
long resolution_tokens(const std::string& where, const std::string& column, const std::string& cell,
                       const ImageTokenRule& images) {
  long total = 0;
  std::stringstream ss(cell);
  for (std::string image; std::getline(ss, image, ';');) {
    const size_t x = image.find('x');
    if (x == std::string::npos) {
      throw InputError(where + ": column '" + column + "': '" + image +
                       "' is not a resolution WIDTHxHEIGHT (e.g. 1280x720)");
    }
    const int w = parse_count(where, column, image.substr(0, x));
    const int h = parse_count(where, column, image.substr(x + 1));
    total += image_tokens(images, w, h);
  }
  return total;
}

struct CsvColumn {
  std::string modality;
  bool resolution = false;  ///< cells are image resolutions, not token counts
};

/// `<modality>_tokens` or `<modality>_resolution`; `image` is an alias of `vision` (the
/// modality Loom's vision encoders read).
CsvColumn parse_column(const std::string& path, const std::string& col) {
  for (const auto& [suffix, resolution] :
       {std::pair<std::string, bool>{"_tokens", false}, {"_resolution", true}}) {
    if (col.size() > suffix.size() &&
        col.compare(col.size() - suffix.size(), suffix.size(), suffix) == 0) {
      std::string modality = col.substr(0, col.size() - suffix.size());
      if (modality == "image") modality = "vision";
      return {modality, resolution};
    }
  }
  throw InputError(path + ":1: column '" + col +
                   "' must be named <modality>_tokens or <modality>_resolution");
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
    for (size_t m = 0; m < modalities.size(); ++m) {
      const std::string& col = columns[m + 1];
      const long v = modalities[m].resolution ? resolution_tokens(where, col, cells[m + 1], images)
                                              : parse_count(where, col, cells[m + 1]);
      if (v > kMaxTokens) {
        throw InputError(where + ": column '" + col + "': " + std::to_string(v) +
                         " tokens is more than " + std::to_string(kMaxTokens));
      }
      s.tokens[modalities[m].modality] += static_cast<int>(v);
      total += v;
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

MicrobatchShape layer_shape(const Model& model, int global_layer,
                            const std::vector<const Sample*>& samples) {
  const ModuleId module = model.module_of(global_layer);
  MicrobatchShape shape;
  for (const Sample* s : samples)
    shape.sequence_lengths.push_back(module_input_tokens(model, module, *s));
  return shape;
}

}  // namespace loom
