#include "core/pipeline_layout.hpp"

#include <cctype>

#include "core/errors.hpp"

namespace loom {
namespace {

[[noreturn]] void fail(std::size_t at, const std::string& what) {
  throw InputError("schedule.layout: at character " + std::to_string(at + 1) + ": " + what);
}

/// Recursive descent over the string: a sequence of items, each a symbol or a group,
/// either optionally followed by "*n". Expands into a flat string of E, t, L and '|'.
class Parser {
 public:
  explicit Parser(const std::string& text) : text_(text) {}

  std::string sequence(bool in_group) {
    std::string out;
    while (true) {
      skip_separators();
      if (at_ >= text_.size()) {
        if (in_group) fail(at_, "'(' without its ')'");
        return out;
      }
      const char c = text_[at_];
      if (c == ')') {
        if (!in_group) fail(at_, "')' without its '('");
        return out;
      }
      std::string item;
      if (c == '(') {
        const std::size_t open = at_++;
        if (++depth_ > kMaxDepth) fail(open, "groups nested more than 16 deep");
        item = sequence(true);
        --depth_;
        ++at_;  // ')'
        if (item.empty()) fail(open, "an empty group '()'");
      } else if (c == 'E' || c == 't' || c == 'm' || c == 'L' || c == '|') {
        item = std::string(1, c);
        ++at_;
      } else {
        fail(at_, std::string("unexpected '") + c +
                      "' (the layout holds E, t, L, '|', groups '(...)' and repetitions '*n')");
      }
      const int times = repetition();
      // Checked before expanding: nested repetitions multiply.
      if (item.size() * static_cast<std::size_t>(times) > kMaxSymbols - out.size())
        fail(at_, "expands to more than a million symbols");
      for (int i = 0; i < times; ++i) out += item;
    }
  }

 private:
  void skip_separators() {
    while (at_ < text_.size() &&
           (text_[at_] == ',' || std::isspace(static_cast<unsigned char>(text_[at_]))))
      ++at_;
  }
  int repetition() {
    skip_separators();
    if (at_ >= text_.size() || text_[at_] != '*') return 1;
    const std::size_t star = at_++;
    skip_separators();
    long n = 0;
    const std::size_t digits = at_;
    while (at_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[at_])) &&
           n < 1'000'000)
      n = n * 10 + (text_[at_++] - '0');
    if (at_ == digits || n < 1) fail(star, "'*' needs a count of at least 1 after it");
    return static_cast<int>(n);
  }

  static constexpr int kMaxDepth = 16;
  static constexpr std::size_t kMaxSymbols = 1'000'000;
  const std::string& text_;
  std::size_t at_ = 0;
  int depth_ = 0;
};

}  // namespace

std::vector<LayoutStage> parse_pipeline_layout(const std::string& text) {
  Parser parser(text);
  const std::string flat = parser.sequence(false);
  std::vector<LayoutStage> stages(1);
  for (const char c : flat) {
    if (c == '|') {
      stages.emplace_back();
    } else if (c == 'E') {
      stages.back().embedding = true;
    } else if (c == 'L') {
      stages.back().loss = true;
    } else {
      ++stages.back().transformer_layers;
      stages.back().mtp_layers += c == 'm';
    }
  }
  return stages;
}

std::vector<int> layout_stage_layers(const std::vector<LayoutStage>& stages, int layers,
                                     int mtp_layers) {
  int total = 0, embeddings = 0, losses = 0, mtp = 0;
  std::vector<int> out;
  for (std::size_t s = 0; s < stages.size(); ++s) {
    const LayoutStage& stage = stages[s];
    total += stage.transformer_layers;
    mtp += stage.mtp_layers;
    embeddings += stage.embedding;
    losses += stage.loss;
    if (stage.embedding && s != 0)
      throw InputError("schedule.layout: stage " + std::to_string(s) +
                       " holds the embedding E; it belongs to the first stage");
    if (stage.loss && s + 1 != stages.size())
      throw InputError("schedule.layout: stage " + std::to_string(s) +
                       " holds the loss L; it belongs to the last stage");
    if (stage.mtp_layers > 0 && s + 1 != stages.size())
      throw InputError("schedule.layout: stage " + std::to_string(s) +
                       " holds a multi-token-prediction layer m; they belong to the last stage "
                       "(after the model's last layer), as Megatron-Core places them");
    if (stage.transformer_layers == 0) {
      std::string why = ": every stage needs at least one t";
      if (stage.embedding || stage.loss) {
        why = std::string(" (only the ") + (stage.embedding ? "embedding" : "loss") +
              "): Loom runs the embedding with the first transformer layer and the loss with "
              "the last, so a stage of its own is not modelled; move it into the next stage "
              "(\"Et|...\") or the previous one (\"...|tL\")";
      }
      throw InputError("schedule.layout: stage " + std::to_string(s) +
                       " holds no transformer layer" + why);
    }
    out.push_back(stage.transformer_layers);
  }
  if (mtp != mtp_layers)
    throw InputError("schedule.layout: names " + std::to_string(mtp) +
                     " multi-token-prediction layers (m) but the model has " +
                     std::to_string(mtp_layers) +
                     " (mtp_layers): write one m for each, in the "
                     "last stage");
  if (embeddings > 1 || losses > 1)
    throw InputError("schedule.layout: names the embedding E " + std::to_string(embeddings) +
                     " and the loss L " + std::to_string(losses) + " times; each at most once");
  if (total != layers) {
    throw InputError("schedule.layout: counts " + std::to_string(total) +
                     " transformer layers (t) in " + std::to_string(stages.size()) +
                     " stages but the model has " + std::to_string(layers));
  }
  return out;
}

std::string format_pipeline_layout(const std::vector<LayoutStage>& stages) {
  std::string out;
  for (std::size_t s = 0; s < stages.size(); ++s) {
    if (s > 0) out += '|';
    if (stages[s].embedding) out += 'E';
    const int t = stages[s].transformer_layers - stages[s].mtp_layers;
    if (t > 0) out += t == 1 ? "t" : "t*" + std::to_string(t);
    const int m = stages[s].mtp_layers;
    if (m > 0) out += m == 1 ? "m" : "m*" + std::to_string(m);
    if (stages[s].loss) out += 'L';
  }
  return out;
}

}  // namespace loom
