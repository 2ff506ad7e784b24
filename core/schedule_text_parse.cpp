// Reading the `loom` text form back (core/schedule_text.hpp). A strict recursive reader:
// every section comes in the order format_schedule() writes it, every count is checked
// against what follows, and every error names the line and column of the offending token
// so that a hand-edited file says where it went wrong.
#include <charconv>
#include <map>
#include <utility>
#include <vector>

#include "core/errors.hpp"
#include "core/index.hpp"
#include "core/schedule_text.hpp"

namespace loom {
namespace {

struct Token {
  std::string_view text;
  size_t column = 1;  ///< 1-based
};

struct Line {
  int number = 0;  ///< 1-based
  std::vector<Token> tokens;
};

/// The key=value fields of one line, each with its token for error positions.
using Fields = std::map<std::string, Token, std::less<>>;

class Reader {
 public:
  Reader(std::string_view text, std::string source) : source_(std::move(source)) {
    int number = 0;
    for (size_t at = 0; at <= text.size();) {
      size_t end = text.find('\n', at);
      if (end == std::string_view::npos) end = text.size();
      std::string_view raw = text.substr(at, end - at);
      if (!raw.empty() && raw.back() == '\r') raw.remove_suffix(1);
      ++number;
      Line line{number, {}};
      for (size_t i = 0; i < raw.size();) {
        if (raw[i] == ' ' || raw[i] == '\t') {
          ++i;
          continue;
        }
        const size_t start = i;
        while (i < raw.size() && raw[i] != ' ' && raw[i] != '\t') ++i;
        line.tokens.push_back({raw.substr(start, i - start), start + 1});
      }
      if (!line.tokens.empty() && line.tokens.front().text.front() != '#')
        lines_.push_back(std::move(line));
      at = end + 1;
    }
    last_line_ = number;
  }

  [[noreturn]] void fail(int line, size_t column, const std::string& what) const {
    throw InputError(source_ + ":" + std::to_string(line) + ":" + std::to_string(column) + ": " +
                     what);
  }
  [[noreturn]] void fail(const Line& line, const Token& token, const std::string& what) const {
    fail(line.number, token.column, what);
  }

  bool at_end() const { return next_ >= lines_.size(); }
  /// The first word of the next line ("" at the end).
  std::string_view peek() const {
    return at_end() ? std::string_view() : lines_[next_].tokens.front().text;
  }

  /// The next non-blank, non-comment line; `expected` says what should have come.
  const Line& next(const std::string& expected) {
    if (at_end()) fail(last_line_, 1, "unexpected end of file, expected " + expected);
    return lines_[next_++];
  }

  /// The next line, which must be `keyword` followed by `values` more tokens.
  const Line& keyword(const std::string& word, size_t values, const std::string& expected) {
    const Line& line = next(expected);
    if (line.tokens.front().text != word) {
      fail(line, line.tokens.front(),
           "expected " + expected + ", found '" + std::string(line.tokens.front().text) + "'");
    }
    if (line.tokens.size() != values + 1) {
      const Token& at =
          line.tokens.size() > values + 1 ? line.tokens[values + 1] : line.tokens.back();
      fail(line, at,
           "'" + word + "' takes " + std::to_string(values) + " value(s): expected " + expected);
    }
    return line;
  }

  int integer(const Line& line, const Token& token, std::string_view text,
              size_t offset = 0) const {
    int value = 0;
    const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec != std::errc() || ptr != text.data() + text.size() || value < 0) {
      fail(line.number, token.column + offset,
           "expected a non-negative integer, found '" + std::string(text) + "'");
    }
    return value;
  }
  int integer(const Line& line, const Token& token) const {
    return integer(line, token, token.text);
  }

  /// A count of items that take at least one line each ("groups 3", "ranks 4"): no more
  /// than the lines left, so a corrupt count is an error here rather than a huge
  /// allocation before the first missing item is noticed.
  int count(const Line& line, const Token& token, const std::string& items) const {
    const int value = integer(line, token);
    const size_t left = lines_.size() - next_;
    if (value < 0) fail(line, token, "a count of " + items + " cannot be negative");
    if (std::cmp_greater(value, left)) {
      fail(line, token,
           "says " + std::to_string(value) + " " + items + " but only " + std::to_string(left) +
               " line(s) follow");
    }
    return value;
  }

  double real(const Line& line, const Token& token, std::string_view text, size_t offset) const {
    double value = 0;
    const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec != std::errc() || ptr != text.data() + text.size()) {
      fail(line.number, token.column + offset,
           "expected a number, found '" + std::string(text) + "'");
    }
    return value;
  }

  /// "N:" as written before a list ("group 0:", "mb 3:"); must equal `expected`.
  void index_colon(const Line& line, const Token& token, size_t expected) const {
    if (token.text.empty() || token.text.back() != ':')
      fail(line, token, "expected '" + std::to_string(expected) + ":'");
    const int value = integer(line, token, token.text.substr(0, token.text.size() - 1));
    if (std::cmp_not_equal(value, expected)) {
      fail(line, token,
           "expected index " + std::to_string(expected) + ", found " + std::to_string(value) +
               " (entries are numbered in order from 0)");
    }
  }

  /// The ids (ranks of a group, samples of a microbatch) from token `from` on.
  template <class IdT>
  std::vector<IdT> id_list(const Line& line, size_t from) const {
    std::vector<IdT> out;
    for (size_t i = from; i < line.tokens.size(); ++i)
      out.push_back(IdT{integer(line, line.tokens[i])});
    return out;
  }

  /// key=value tokens from `from` on; keys must be in `allowed`, each at most once.
  Fields fields(const Line& line, size_t from, std::initializer_list<const char*> allowed) const {
    Fields out;
    for (size_t i = from; i < line.tokens.size(); ++i) {
      const Token& t = line.tokens[i];
      const size_t eq = t.text.find('=');
      if (eq == std::string_view::npos || eq == 0)
        fail(line, t, "expected key=value, found '" + std::string(t.text) + "'");
      const std::string key(t.text.substr(0, eq));
      bool known = false;
      std::string keys;
      for (const char* k : allowed) {
        known = known || key == k;
        keys += (keys.empty() ? "" : ", ") + std::string(k);
      }
      if (!known) fail(line, t, "unknown key '" + key + "' (valid here: " + keys + ")");
      if (!out.emplace(key, Token{t.text.substr(eq + 1), t.column + eq + 1}).second)
        fail(line, t, "key '" + key + "' given twice");
    }
    return out;
  }

  const Token& require(const Line& line, const Fields& f, const char* key) const {
    const auto it = f.find(key);
    if (it == f.end()) fail(line, line.tokens.front(), std::string("missing key '") + key + "='");
    return it->second;
  }
  double real_field(const Line& line, const Fields& f, const char* key, bool required) const {
    const auto it = f.find(key);
    if (it == f.end()) {
      if (required) require(line, f, key);
      return 0;
    }
    return real(line, it->second, it->second.text, 0);
  }
  int int_field(const Line& line, const Fields& f, const char* key) const {
    const Token& t = require(line, f, key);
    return integer(line, t, t.text);
  }

 private:
  std::string source_;
  std::vector<Line> lines_;
  size_t next_ = 0;
  int last_line_ = 0;
};

/// Reads one op line's short form and fields (see schedule_text.hpp).
class OpReader {
 public:
  OpReader(const Reader& in, const Schedule& s, const Line& line)
      : in_(in), s_(s), line_(line), token_(line.tokens.front()), text_(token_.text) {}

  Op read() {
    for (const CollectiveKind kind : {CollectiveKind::kAllReduce, CollectiveKind::kAllGather,
                                      CollectiveKind::kReduceScatter, CollectiveKind::kAllToAll}) {
      if (eat(collective_prefix(kind))) return collective(kind);
    }
    if (eat("OPTIMIZER_s")) return optimizer_step();
    const int stage = number();
    if (eat("SEND_")) return message<Send>(stage, "->");
    if (eat("RECV_")) return message<Recv>(stage, "<-");
    return compute(stage);
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    in_.fail(line_.number, token_.column + pos_, what);
  }
  bool eat(std::string_view word) {
    if (text_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }
  void expect(std::string_view word) {
    if (!eat(word)) fail("expected '" + std::string(word) + "' in '" + std::string(text_) + "'");
  }
  int number() {
    size_t end = pos_;
    while (end < text_.size() && text_[end] >= '0' && text_[end] <= '9') ++end;
    if (end == pos_) fail("expected a number in '" + std::string(text_) + "'");
    const int value = in_.integer(line_, token_, text_.substr(pos_, end - pos_), pos_);
    pos_ = end;
    return value;
  }
  Pass pass() {
    const char c = pos_ < text_.size() ? text_[pos_] : '\0';
    const Pass p = c == 'F' ? Pass::kF : c == 'B' ? Pass::kB : c == 'I' ? Pass::kI : Pass::kW;
    if (c != 'F' && c != 'B' && c != 'I' && c != 'W')
      fail("expected a pass F, B, I or W in '" + std::string(text_) + "'");
    ++pos_;
    return p;
  }
  void finish() {
    if (pos_ != text_.size())
      fail("unexpected '" + std::string(text_.substr(pos_)) + "' after the operation");
  }
  ModuleId module_index(std::string_view name, size_t column) const {
    for (const ModuleId m : s_.module_names.ids())
      if (s_.module_names[m] == name) return m;
    in_.fail(line_.number, column, "unknown module '" + std::string(name) + "'");
  }
  ModuleId module_field(const Fields& f) const {
    const auto it = f.find("module");
    if (it == f.end()) return ModuleId{0};
    return module_index(it->second.text, it->second.column);
  }

  Op compute(int stage) {
    Compute c;
    c.stage = StageId{stage};
    c.pass = pass();
    c.microbatch = MicrobatchId{number()};
    const Fields f = in_.fields(
        line_, 1,
        {"layers", "seconds", "activation", "weight_grad", "release", "module", "wait", "cont"});
    if (eat("@")) {
      const size_t end = std::min(text_.find('(', pos_), text_.size());
      c.module = module_index(text_.substr(pos_, end - pos_), token_.column + pos_);
      pos_ = end;
    } else {
      c.module = module_field(f);
    }
    c.redundant = eat("(copy)");
    c.overlapped = eat("(F+B)");
    finish();
    layer_range(in_.require(line_, f, "layers"), &c.first_layer, &c.end_layer);
    c.seconds = in_.real_field(line_, f, "seconds", true);
    c.activation_bytes = in_.real_field(line_, f, "activation", false);
    c.weight_grad_s = in_.real_field(line_, f, "weight_grad", false);
    c.releases_activation = flag(f, "release");
    if (f.count("wait") != 0) c.async_pending = in_.int_field(line_, f, "wait");
    c.continues = flag(f, "cont");
    return c;
  }

  template <class Message>
  Op message(int stage, std::string_view arrow) {
    Message m;
    m.stage = StageId{stage};
    m.tag.pass = pass();
    m.tag.microbatch = MicrobatchId{number()};
    expect(":L");
    const int first = number();
    if (eat(">")) {
      m.tag.producer_layer = first;
      m.tag.boundary_layer = number();
    } else {
      m.tag.boundary_layer = first;
    }
    expect(arrow);
    const size_t peer_at = pos_;
    m.peer = RankId{number()};
    finish();
    if (m.peer.value() >= s_.num_ranks()) {
      in_.fail(line_.number, token_.column + peer_at,
               "peer rank " + to_string(m.peer) + " does not exist (the schedule has " +
                   std::to_string(s_.num_ranks()) + " ranks)");
    }
    const Fields f = in_.fields(line_, 1, {"module", "bytes"});
    m.module = module_field(f);
    m.bytes = in_.real_field(line_, f, "bytes", true);
    return m;
  }

  /// "ALLREDUCE_s", "ALLGATHER_s", "REDUCESCATTER_s", "ALLTOALL_s": what to_string(Op) writes.
  static std::string collective_prefix(CollectiveKind kind) {
    std::string name = to_string(kind);
    for (char& ch : name) ch = static_cast<char>(ch - 'a' + 'A');
    return name + "_s";
  }

  Op collective(CollectiveKind kind) {
    Collective c;
    c.kind = kind;
    c.stage = StageId{number()};
    expect("[g");
    const size_t group_at = pos_;
    c.group = GroupId{number()};
    expect("]");
    finish();
    if (!s_.groups.contains(c.group)) {
      in_.fail(line_.number, token_.column + group_at,
               "group " + to_string(c.group) + " does not exist (the schedule has " +
                   std::to_string(s_.groups.size()) + " groups)");
    }
    const Fields f = in_.fields(line_, 1, {"module", "bytes", "tied_embedding", "async", "layers"});
    c.module = module_field(f);
    c.bytes = in_.real_field(line_, f, "bytes", true);
    c.tied_embedding = flag(f, "tied_embedding");
    c.async = flag(f, "async");
    if (const auto it = f.find("layers"); it != f.end())
      layer_range(it->second, &c.first_layer, &c.end_layer);
    return c;
  }

  /// "FIRST:END", a global layer range.
  void layer_range(const Token& layers, int* first, int* end) const {
    const size_t colon = layers.text.find(':');
    if (colon == std::string_view::npos) in_.fail(line_, layers, "expected layers=FIRST:END");
    *first = in_.integer(line_, layers, layers.text.substr(0, colon));
    *end = in_.integer(line_, layers, layers.text.substr(colon + 1), colon + 1);
  }

  /// An optional 0/1 field; absent is 0.
  bool flag(const Fields& f, const char* key) const {
    const auto it = f.find(key);
    if (it == f.end()) return false;
    if (it->second.text != "1" && it->second.text != "0")
      in_.fail(line_, it->second, std::string(key) + " takes 0 or 1");
    return it->second.text == "1";
  }

  Op optimizer_step() {
    OptimizerStep o;
    o.stage = StageId{number()};
    finish();
    const Fields f = in_.fields(line_, 1, {"module", "parameters", "seconds"});
    o.module = module_field(f);
    o.parameters = in_.real_field(line_, f, "parameters", true);
    o.seconds = in_.real_field(line_, f, "seconds", true);
    return o;
  }

  const Reader& in_;
  const Schedule& s_;
  const Line& line_;
  const Token& token_;
  std::string_view text_;
  size_t pos_ = 0;
};

void read_header(Reader& in, Schedule& s) {
  const Line& magic = in.next("'" + std::string(kScheduleTextMagic) + "'");
  if (magic.tokens.size() != 2 || magic.tokens[0].text != "loom-schedule" ||
      magic.tokens[1].text != "1") {
    in.fail(magic, magic.tokens.front(),
            "expected '" + std::string(kScheduleTextMagic) +
                "' (not a Loom schedule file, or another version of the format)");
  }
  s.scheduler = std::string(in.keyword("scheduler", 1, "'scheduler NAME'").tokens[1].text);
  const Line& modules = in.next("'modules COUNT NAME...'");
  if (modules.tokens.front().text != "modules" || modules.tokens.size() < 2)
    in.fail(modules, modules.tokens.front(), "expected 'modules COUNT NAME...'");
  const int count = in.integer(modules, modules.tokens[1]);
  const size_t names = modules.tokens.size() - 2;
  if (std::cmp_not_equal(names, count)) {
    in.fail(modules, modules.tokens[1],
            "says " + std::to_string(count) + " module(s) but names " + std::to_string(names));
  }
  for (size_t i = 2; i < modules.tokens.size(); ++i)
    s.module_names.emplace_back(modules.tokens[i].text);
  const Line& stages = in.keyword("num_stages", 1, "'num_stages N'");
  s.num_stages = in.integer(stages, stages.tokens[1]);
  const Line& mbs = in.keyword("microbatches", 1, "'microbatches N'");
  s.microbatches = in.integer(mbs, mbs.tokens[1]);
  if (!in.at_end() && in.peek() == "replica_fold") {
    const Line& fold = in.keyword("replica_fold", 1, "'replica_fold N'");
    s.replica_fold = in.integer(fold, fold.tokens[1]);
    if (s.replica_fold < 1) in.fail(fold, fold.tokens[1], "replica_fold must be at least 1");
  }
  if (!in.at_end() && in.peek() == "context_parallel") {
    const Line& cp = in.keyword("context_parallel", 1, "'context_parallel N'");
    s.cp = in.integer(cp, cp.tokens[1]);
    if (s.cp < 1 || s.num_stages < 1)
      in.fail(cp, cp.tokens[1], "context_parallel must be at least 1, after num_stages N >= 1");
  }
}

void read_groups_and_samples(Reader& in, Schedule& s) {
  const Line& groups = in.keyword("groups", 1, "'groups COUNT'");
  s.groups.resize(in.count(groups, groups.tokens[1], "groups"));
  for (const GroupId g : s.groups.ids()) {
    const Line& line = in.next("'group " + to_string(g) + ": RANK...'");
    if (line.tokens.front().text != "group" || line.tokens.size() < 2)
      in.fail(line, line.tokens.front(), "expected 'group " + to_string(g) + ": RANK...'");
    in.index_colon(line, line.tokens[1], g.slot());
    s.groups[g] = in.id_list<RankId>(line, 2);
  }
  const Line& samples = in.keyword("samples", 1, "'samples REPLICAS'");
  s.samples.resize(in.count(samples, samples.tokens[1], "replicas"));
  for (const ReplicaId d : s.samples.ids()) {
    const std::string expected = "'replica " + to_string(d) + " microbatches K'";
    const Line& head = in.keyword("replica", 3, expected);
    if (in.integer(head, head.tokens[1]) != d.value() || head.tokens[2].text != "microbatches")
      in.fail(head, head.tokens[1], "expected " + expected);
    s.samples[d].resize(in.count(head, head.tokens[3], "microbatches"));
    for (const MicrobatchId j : s.samples[d].ids()) {
      const Line& line = in.next("'mb " + to_string(j) + ": SAMPLE...'");
      if (line.tokens.front().text != "mb" || line.tokens.size() < 2)
        in.fail(line, line.tokens.front(), "expected 'mb " + to_string(j) + ": SAMPLE...'");
      in.index_colon(line, line.tokens[1], j.slot());
      s.samples[d][j] = in.id_list<SampleId>(line, 2);
    }
  }
}

void read_ranks(Reader& in, Schedule& s, OpOrigins* origins) {
  const Line& ranks = in.keyword("ranks", 1, "'ranks COUNT'");
  const int n = in.count(ranks, ranks.tokens[1], "ranks");
  if (s.cp > 1 && n % (s.cp * s.num_stages) != 0)
    in.fail(ranks, ranks.tokens[1],
            "with context_parallel " + std::to_string(s.cp) +
                " the ranks come in blocks of "
                "context_parallel x num_stages = " +
                std::to_string(s.cp * s.num_stages));
  s.ranks.resize(n);
  s.static_memory.resize(n);
  s.programs.resize(n);
  if (origins) *origins = OpOrigins(n);
  for (const RankId r : s.rank_ids()) {
    const std::string expected = "'rank " + to_string(r) + " gpu=.. tp=.. ...'";
    const Line& head = in.next(expected);
    if (head.tokens.front().text != "rank" || head.tokens.size() < 2)
      in.fail(head, head.tokens.front(), "expected " + expected);
    if (in.integer(head, head.tokens[1]) != r.value())
      in.fail(head, head.tokens[1], "expected " + expected + " (ranks come in order from 0)");
    const Fields f =
        in.fields(head, 2, {"gpu", "tp", "replica", "parameters", "gradients", "optimizer"});
    s.ranks[r] = {.gpu = in.int_field(head, f, "gpu"),
                  .tp = in.int_field(head, f, "tp"),
                  .replica = ReplicaId{in.int_field(head, f, "replica")}};
    s.static_memory[r] = {in.real_field(head, f, "parameters", true),
                          in.real_field(head, f, "gradients", true),
                          in.real_field(head, f, "optimizer", true)};
    // The rank's ops run to the next rank line (or 'end'), so a hand edit adds or removes
    // op lines without counting them.
    while (!in.at_end() && in.peek() != "rank" && in.peek() != "end") {
      const Line& line = in.next("an operation");
      if (origins) {
        (*origins)[r].push_back(OpOrigin{.line = line.number,
                                         .step = isize(s.programs[r]),
                                         .action = std::string(line.tokens.front().text),
                                         .place = {}});
      }
      s.programs[r].push_back(OpReader(in, s, line).read());
    }
  }
}

}  // namespace

Schedule parse_schedule(std::string_view text, const std::string& source, OpOrigins* origins) {
  Reader in(text, source);
  Schedule s;
  read_header(in, s);
  read_groups_and_samples(in, s);
  read_ranks(in, s, origins);
  const Line& end = in.keyword("end", 0, "'end' after the last rank's operations");
  (void)end;
  if (!in.at_end()) {
    const Line& extra = in.next("nothing");
    in.fail(extra, extra.tokens.front(), "unexpected text after 'end'");
  }
  return s;
}

bool is_loom_schedule_text(std::string_view text) {
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find('\n', at);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(at, end - at);
    while (!line.empty() && (line.front() == ' ' || line.front() == '\t')) line.remove_prefix(1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (!line.empty() && line.front() != '#') return line.rfind(kScheduleTextMagic, 0) == 0;
    at = end + 1;
  }
  return false;
}

}  // namespace loom
