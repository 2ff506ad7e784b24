#include "core/workload.hpp"

#include <charconv>
#include <cmath>
#include <fstream>
#include <memory>
#include <sstream>

#include "core/csv.hpp"
#include "core/errors.hpp"

namespace loom {

std::vector<Sample> synthetic_samples(int count, const std::map<std::string, int>& tokens) {
  std::vector<Sample> samples(static_cast<size_t>(count));
  for (int i = 0; i < count; ++i) {
    samples[static_cast<size_t>(i)].id = i;
    samples[static_cast<size_t>(i)].tokens = tokens;
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

}  // namespace

std::vector<Sample> load_samples_csv(const std::string& path) {
  constexpr long kMaxTokens = 1L << 30;  // ids and token counts are ints downstream
  // The modality columns vary per file, so fccp's fixed-arity CSVReader does not fit; its
  // LineReader does the buffered reading and line counting, the cells are split here.
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
  std::vector<std::string> modalities;
  const std::string suffix = "_tokens";
  for (size_t c = 1; c < columns.size(); ++c) {
    const std::string& col = columns[c];
    if (col.size() <= suffix.size() ||
        col.compare(col.size() - suffix.size(), suffix.size(), suffix) != 0) {
      throw InputError(path + ":1: column '" + col + "' must be named <modality>_tokens");
    }
    modalities.push_back(col.substr(0, col.size() - suffix.size()));
  }
  std::vector<Sample> samples;
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
    std::vector<long> values;
    for (size_t c = 0; c < cells.size(); ++c) {
      long v = 0;
      const char* b = cells[c].data();
      const char* e = b + cells[c].size();
      auto [ptr, ec] = std::from_chars(b, e, v);
      if (ec != std::errc{} || ptr != e) {
        throw InputError(where + ": column '" + columns[c] + "': '" + cells[c] +
                         "' is not an integer");
      }
      if (v < 0) throw InputError(where + ": column '" + columns[c] + "' is negative");
      if (v > kMaxTokens) {
        throw InputError(where + ": column '" + columns[c] + "': " + cells[c] + " is more than " +
                         std::to_string(kMaxTokens));
      }
      values.push_back(v);
    }
    Sample s;
    s.id = static_cast<int>(values[0]);
    for (size_t m = 0; m < modalities.size(); ++m)
      s.tokens[modalities[m]] = static_cast<int>(values[m + 1]);
    samples.push_back(std::move(s));
  }
  if (samples.empty()) throw InputError(path + ": no samples after the header");
  return samples;
}

int module_input_tokens(const Model& model, int module, const Sample& sample) {
  const Module& mod = model.module(module);
  auto tokens_of = [&](const std::string& modality) {
    const auto it = sample.tokens.find(modality);
    return it == sample.tokens.end() ? 0 : it->second;
  };
  if (mod.inputs.empty()) return tokens_of(mod.modality);
  double total = mod.kind == ModuleKind::kLlm ? tokens_of("text") : 0;
  for (const std::string& input : mod.inputs) {
    const int idx = model.module_index(input);
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
  const int module = model.layers()[static_cast<size_t>(global_layer)].module;
  MicrobatchShape shape;
  for (const Sample* s : samples)
    shape.sequence_lengths.push_back(module_input_tokens(model, module, *s));
  return shape;
}

}  // namespace loom
