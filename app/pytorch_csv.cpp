// PyTorch pipelining's action CSV, both ways (see pytorch_csv.hpp). Export reads the
// compute order (and optionally the messages) straight off the IR; import parses the
// actions and hands the per-rank order to the same lowering the schedulers use, so an
// imported schedule gets Loom's messages, all-reduces, samples and memory events.
#include "app/pytorch_csv.hpp"

#include <algorithm>
#include <charconv>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <tuple>
#include <vector>

#include "core/errors.hpp"
#include "core/index.hpp"
#include "core/overloaded.hpp"

namespace loom {
namespace {

std::string compute_action(const Compute& c) {
  return to_string(c.stage) + to_string(c.pass) + to_string(c.microbatch);
}

/// PyTorch's communication action for a Loom op ("" when it has none).
std::string comm_action(const Op& op) {
  return std::visit(
      Overloaded{
          [](const Compute&) { return std::string(); },
          [](const Send& s) {
            return to_string(s.stage) + (s.tag.pass == Pass::kF ? "SEND_F" : "SEND_B") +
                   to_string(s.tag.microbatch);
          },
          [](const Recv& r) {
            return to_string(r.stage) + (r.tag.pass == Pass::kF ? "RECV_F" : "RECV_B") +
                   to_string(r.tag.microbatch);
          },
          [](const Collective& c) {
            // PyTorch's REDUCE_GRAD is a stage's data-parallel reduction; the tied
            // embedding's all-reduce is the training loop's business there.
            return c.kind == CollectiveKind::kAllReduce && !c.tied_embedding
                       ? to_string(c.stage) + "REDUCE_GRAD"
                       : std::string();
          },
          // PyTorch's actions have no optimizer step: the training loop runs it after.
          [](const OptimizerStep&) { return std::string(); },
      },
      op);
}

/// One parsed action with where it was, for import errors.
struct Located {
  RankAction action;
  int line = 0;
  size_t column = 0;  ///< 1-based position in the line
  int step = 0;       ///< the field's index in its row (PyTorch's step; idle fields count)
  std::string_view text;
  bool legacy_b = false;  ///< a legacy file's "B": the input-gradient half where W exists
};

[[noreturn]] void fail(const std::string& source, int line, size_t column,
                       const std::string& what) {
  throw InputError(source + ":" + std::to_string(line) + ":" + std::to_string(column) + ": " +
                   what);
}

/// Parses one `_Action` string (already trimmed); appends compute actions to `out`.
void parse_action(std::string_view text, const std::string& source, int line, size_t column,
                  int step, PytorchNaming naming, std::vector<Located>& out) {
  if (!text.empty() && text.front() == '(') {  // "(0F1;1B0)OVERLAP_F_B"
    const size_t close = text.find(')');
    if (close == std::string_view::npos || text.substr(close + 1) != "OVERLAP_F_B")
      fail(source, line, column,
           "expected '(ACTION;ACTION)OVERLAP_F_B', found '" + std::string(text) + "'");
    const size_t first = out.size();
    size_t at = 1;
    while (at < close) {
      size_t end = std::min(text.find(';', at), close);
      parse_action(text.substr(at, end - at), source, line, column + at, step, naming, out);
      at = end + 1;
    }
    // A forward and a full backward of another microbatch: Loom's overlapped pair
    // (Join::kOverlap). Other combinations run one after the other, unfused (the
    // pair receives before and sends after both halves, so a B that needs its own F's
    // output downstream cannot be one).
    if (out.size() == first + 2 && out[first].action.pass == Pass::kF &&
        out[first + 1].action.pass == Pass::kB &&
        out[first].action.microbatch != out[first + 1].action.microbatch) {
      out[first].action.with_next = Join::kOverlap;
    }
    return;
  }
  int stage = 0;
  const auto [after_stage, ec] = std::from_chars(text.data(), text.data() + text.size(), stage);
  const size_t type_at = static_cast<size_t>(after_stage - text.data());
  if (ec != std::errc() || type_at == 0 || text.front() == '-') {
    fail(source, line, column,
         "expected an action [stage][type][microbatch] such as 0F0, 1B3, 0I2, 0W2 or 0SEND_F0, "
         "found '" +
             std::string(text) + "'");
  }
  // The first type that matches is the one: legacy "BW" is tried before "B", and no other
  // type is a prefix of another.
  static const char* const kTypes[] = {"UNSHARD", "RESHARD", "REDUCE_GRAD", "SEND_F",
                                       "RECV_F",  "SEND_B",  "RECV_B",      "F",
                                       "BW",      "B",       "I",           "W"};
  std::string_view type;
  for (const char* t : kTypes) {
    if (naming == PytorchNaming::kCurrent && std::string_view(t) == "BW") continue;
    if (text.substr(type_at).rfind(t, 0) == 0) {
      type = t;
      break;
    }
  }
  if (type.empty()) {
    fail(source, line, column + type_at,
         "unknown action type in '" + std::string(text) +
             "' (valid: F, B, I, W, SEND_F, RECV_F, SEND_B, RECV_B, REDUCE_GRAD, UNSHARD, "
             "RESHARD)");
  }
  const std::string_view rest = text.substr(type_at + type.size());
  const bool compute = type.size() == 1 || type == "BW";
  const bool takes_microbatch = compute || type.rfind("SEND", 0) == 0 || type.rfind("RECV", 0) == 0;
  int microbatch = 0;
  const auto [end, mec] = std::from_chars(rest.data(), rest.data() + rest.size(), microbatch);
  const bool ok = takes_microbatch ? (mec == std::errc() && end == rest.data() + rest.size() &&
                                      !rest.empty() && rest.front() != '-')
                                   : rest.empty();
  if (!ok) {
    fail(source, line, column + type_at + type.size(),
         std::string(takes_microbatch ? "expected a microbatch number" : "expected nothing") +
             " after '" + std::string(type) + "' in '" + std::string(text) + "'");
  }
  if (!compute) return;  // communication: Loom's lowering adds its own
  // A legacy "B" is settled by parse_rows once it knows whether the file has W actions.
  const Pass pass = type == "F"                   ? Pass::kF
                    : type == "B" || type == "BW" ? Pass::kB
                    : type == "I"                 ? Pass::kI
                                                  : Pass::kW;
  out.push_back({{StageId{stage}, pass, MicrobatchId{microbatch}},
                 line,
                 column,
                 step,
                 text,
                 naming == PytorchNaming::kLegacy && type == "B"});
}

/// The file's rows: row r is pipeline rank r's actions.
PerPipelineRank<std::vector<Located>> parse_rows(std::string_view text, const std::string& source,
                                                 PytorchNaming naming) {
  std::vector<std::vector<Located>> rows;
  int number = 0;
  for (size_t at = 0; at < text.size();) {
    size_t end = text.find('\n', at);
    if (end == std::string_view::npos) end = text.size();
    std::string_view row = text.substr(at, end - at);
    if (!row.empty() && row.back() == '\r') row.remove_suffix(1);  // csv.writer's "\r\n"
    if (number == 0 && row.rfind("\xEF\xBB\xBF", 0) == 0) row.remove_prefix(3);  // BOM
    ++number;
    at = end + 1;
    std::vector<Located> actions;
    int step = 0;
    for (size_t field = 0; field <= row.size(); ++step) {
      size_t comma = row.find(',', field);
      if (comma == std::string_view::npos) comma = row.size();
      std::string_view cell = row.substr(field, comma - field);
      size_t lead = 0;
      while (lead < cell.size() && (cell[lead] == ' ' || cell[lead] == '"')) ++lead;
      cell.remove_prefix(lead);
      while (!cell.empty() && (cell.back() == ' ' || cell.back() == '"')) cell.remove_suffix(1);
      if (!cell.empty())  // an empty field is an idle step
        parse_action(cell, source, number, field + lead + 1, step, naming, actions);
      field = comma + 1;
    }
    rows.push_back(std::move(actions));
  }
  while (!rows.empty() && rows.back().empty()) rows.pop_back();  // trailing blank lines
  // Legacy naming: B was the input-gradient backward in a schedule with W actions.
  const auto has_w = [](const auto& row) {
    return std::any_of(row.begin(), row.end(),
                       [](const Located& a) { return a.action.pass == Pass::kW; });
  };
  if (std::any_of(rows.begin(), rows.end(), has_w)) {
    for (auto& row : rows)
      for (Located& a : row)
        if (a.legacy_b) a.action.pass = Pass::kI;
  }
  return PerPipelineRank<std::vector<Located>>(std::move(rows));
}

std::string microbatch_mismatch(MicrobatchId max_microbatch, int m) {
  return "the actions use microbatches 0.." + to_string(max_microbatch) +
         " but schedule.microbatches = " + std::to_string(m) +
         " (run with --set schedule.microbatches=" + std::to_string(max_microbatch.value() + 1) +
         ")";
}

/// Where each compute op of the lowered schedule is in the file: a rank's computes come
/// from the row that runs their stage, in the row's order; the segments of a multi-module
/// stage are its one action, and the messages Loom adds have no origin.
OpOrigins locate(const Schedule& schedule, const PerPipelineRank<std::vector<Located>>& rows,
                 const PerStage<PipelineRank>& stage_rank) {
  using Key = std::tuple<int, int, int>;  // stage, pass, microbatch
  auto key_of = [](const RankAction& a) {
    return Key{a.stage.value(), static_cast<int>(a.pass), a.microbatch.value()};
  };
  OpOrigins origins(schedule.num_ranks());
  for (const RankId r : schedule.rank_ids()) {
    std::map<Key, std::deque<const Located*>> pending;  // the row's actions not yet met
    std::optional<OpOrigin> last;
    Key last_key{-1, -1, -1};
    for (const Op& op : schedule.programs[r]) {
      const auto* c = std::get_if<Compute>(&op);
      if (!c || c->redundant || !stage_rank.contains(c->stage)) {
        origins[r].emplace_back();
        continue;
      }
      if (pending.empty()) {
        for (const Located& a : rows[stage_rank[c->stage]]) pending[key_of(a.action)].push_back(&a);
      }
      const Key key = key_of({c->stage, c->pass, c->microbatch});
      if (key != last_key) {
        auto& queue = pending[key];
        last.reset();
        if (!queue.empty()) {
          const Located& a = *queue.front();
          queue.pop_front();
          last = OpOrigin{.line = a.line,
                          .column = static_cast<int>(a.column),
                          .step = a.step,
                          .action = std::string(a.text),
                          .place = {}};
        }
        last_key = key;
      }
      origins[r].push_back(last);
    }
  }
  return origins;
}

/// FSDP's collectives (lowering/pass_fsdp.cpp) are the async all-gathers and
/// reduce-scatters; context parallelism's (refused above) and a module layout's boundary
/// gathers are synchronous.
bool is_fsdp(const Collective& c) {
  return c.async &&
         (c.kind == CollectiveKind::kAllGather || c.kind == CollectiveKind::kReduceScatter);
}

/// PyTorch pipelining unshards a stage once and holds it across the step's microbatches
/// (its UNSHARD / RESHARD are per stage): a schedule that gathers a layer again for each
/// microbatch (FSDP's reshard_after_forward) has no action for its re-gathers.
void refuse_per_microbatch_gathers(const Schedule& schedule) {
  for (const auto& program : schedule.programs) {
    std::set<std::pair<int, int>> gathered;  // (stage, first layer)
    for (const Op& op : program) {
      const auto* c = std::get_if<Collective>(&op);
      if (!c || !is_fsdp(*c) || c->kind != CollectiveKind::kAllGather) continue;
      if (!gathered.emplace(c->stage.value(), c->first_layer).second)
        throw InputError(
            "--comms: the schedule gathers each layer's parameters again for every microbatch "
            "(parallel.fsdp_reshard_after_forward = true); PyTorch's UNSHARD and RESHARD hold "
            "a stage unsharded across the step. Export with --set "
            "parallel.fsdp_reshard_after_forward=false (torchtitan's choice under pipelining), "
            "without --comms, or in the loom format");
    }
  }
}

}  // namespace

std::string format_pytorch_csv(const Schedule& schedule, bool comms) {
  if (schedule.cp > 1)
    throw InputError(
        "--format pytorch-csv: the schedule runs context parallelism (parallel.cp = " +
        std::to_string(schedule.cp) +
        "), whose ranks and K/V exchange PyTorch's pipeline actions cannot name; export it in "
        "the loom format, or without parallel.cp");
  if (comms) refuse_per_microbatch_gathers(schedule);
  std::string out;
  for (const RankId r : schedule.rank_ids()) {
    if (schedule.ranks[r].replica != ReplicaId{0}) continue;
    std::vector<std::string> row;
    std::string last_compute;
    // The overlapped pair being written: its F, then its B once seen. The halves' parts may
    // interleave (expert parallelism hides each half's all-to-alls under the other's compute).
    std::string pair_forward, pair_backward;
    std::set<StageId> unsharded, reduced;  // FSDP: the stages whose actions are written
    for (const Op& op : schedule.programs[r]) {
      std::string action;
      if (const auto* c = std::get_if<Compute>(&op)) {
        if (c->redundant) continue;
        action = compute_action(*c);
        // One action per (stage, pass, microbatch): a multi-module stage's segments and
        // the messages between them belong to it.
        if (action == last_compute) continue;
        last_compute = action;
        if (c->overlapped && (action == pair_forward || action == pair_backward)) continue;
        // The B half of an overlapped pair joins its F: "(0F3;3B1)OVERLAP_F_B".
        if (c->overlapped && c->pass != Pass::kF && !row.empty() && !pair_forward.empty() &&
            pair_backward.empty()) {
          row.back() = "(" + pair_forward + ";" + action + ")OVERLAP_F_B";
          pair_backward = action;
          continue;
        }
        pair_forward = c->overlapped && c->pass == Pass::kF ? action : "";
        pair_backward.clear();
      } else if (comms) {
        if (const auto* fsdp = std::get_if<Collective>(&op); fsdp && is_fsdp(*fsdp)) {
          // FSDP held across the step: a stage's first gather is its UNSHARD; its
          // reduce-scatters, after its last backward, are one REDUCE_GRAD, and then the
          // stage is freed (RESHARD).
          const std::string stage = to_string(fsdp->stage);
          if (fsdp->kind == CollectiveKind::kAllGather) {
            if (unsharded.insert(fsdp->stage).second) row.push_back(stage + "UNSHARD");
          } else if (reduced.insert(fsdp->stage).second) {
            row.push_back(stage + "REDUCE_GRAD");
            row.push_back(stage + "RESHARD");
          }
          continue;
        }
        action = comm_action(op);
        if (action.empty() || (!row.empty() && row.back() == action)) continue;
      } else {
        continue;
      }
      row.push_back(action);
    }
    for (size_t i = 0; i < row.size(); ++i) out += (i ? "," : "") + row[i];
    out += "\n";
  }
  return out;
}

RankOrders parse_pytorch_csv(std::string_view text, const std::string& source,
                             PytorchNaming naming) {
  RankOrders orders;
  for (const auto& row : parse_rows(text, source, naming)) {
    orders.emplace_back();
    for (const Located& a : row) orders.back().push_back(a.action);
  }
  return orders;
}

Schedule import_pytorch_csv(const SchedulingProblem& problem, std::string_view text,
                            const std::string& source, OpOrigins* origins, PytorchNaming naming) {
  const auto rows = parse_rows(text, source, naming);
  const int pp = problem.parallel.pp;
  const int m = problem.schedule.microbatches;
  if (rows.ssize() != pp) {
    // At the first row too many, or just past the last one.
    fail(source, std::min(rows.ssize(), pp) + 1, 1,
         "the file has " + std::to_string(rows.size()) +
             " row(s), one per pipeline rank, but "
             "parallel.pp = " +
             std::to_string(pp) + " (run with --set parallel.pp=" + std::to_string(rows.size()) +
             ")");
  }
  std::set<StageId> stages;
  MicrobatchId max_microbatch{0};  // no action at all fails on the stages below
  for (const auto& row : rows) {
    for (const Located& a : row) {
      stages.insert(a.action.stage);
      max_microbatch = std::max(max_microbatch, a.action.microbatch);
    }
  }
  const int count = isize(stages);
  if (stages.empty() || *stages.rbegin() != StageId{count - 1} || count % pp != 0) {
    fail(source, 1, 1,
         "the actions name " + std::to_string(count) + " distinct stage(s) (highest " +
             (stages.empty() ? std::string("none") : to_string(*stages.rbegin())) +
             "); Loom needs stages 0..pp*v-1, v chunks on each of parallel.pp = " +
             std::to_string(pp) + " ranks");
  }
  // Each stage runs on the one row that names it: the looped placement (stage s on rank
  // s mod pp), a V (ZB-V: rank r holds r and 2pp-1-r) or any other.
  PerStage<std::optional<PipelineRank>> owners(count);
  PerStage<const Located*> first_seen(count, nullptr);
  for (const PipelineRank r : rows.ids()) {
    for (const Located& a : rows[r]) {
      std::optional<PipelineRank>& owner = owners[a.action.stage];
      if (owner && *owner != r) {
        const Located& before = *first_seen[a.action.stage];
        fail(source, a.line, a.column,
             "stage " + to_string(a.action.stage) + " on rank " + to_string(r) + ", but line " +
                 std::to_string(before.line) + " column " + std::to_string(before.column) +
                 " runs it on rank " + to_string(*owner) + ": a stage lives on one rank");
      }
      owner = r;
      if (!first_seen[a.action.stage]) first_seen[a.action.stage] = &a;
      if (a.action.microbatch >= MicrobatchId{m})
        fail(source, a.line, a.column, microbatch_mismatch(max_microbatch, m));
    }
  }
  PerStage<PipelineRank> stage_rank;  // every stage has its owner (checked above)
  PerPipelineRank<int> held(pp, 0);
  for (const std::optional<PipelineRank>& owner : owners) {
    stage_rank.push_back(*owner);
    ++held[*owner];
  }
  for (const PipelineRank r : held.ids()) {
    if (held[r] != count / pp)
      fail(source, r.value() + 1, 1,
           "rank " + to_string(r) + " runs " + std::to_string(held[r]) +
               " stage(s); Loom needs the same number of chunks (" + std::to_string(count / pp) +
               ") on every rank");
  }
  if (max_microbatch + 1 != MicrobatchId{m})
    fail(source, 1, 1, microbatch_mismatch(max_microbatch, m));
  require_single_layout(problem, "pytorch-csv");
  const PipelinePrograms programs{
      .stages = chain_stages(*problem.model, plan_stages(problem, count)),
      .ranks = pp,
      .stage_rank = std::move(stage_rank),
      .replicas = {parse_pytorch_csv(text, source, naming)}};
  try {
    Schedule schedule = lower(problem, "pytorch-csv", programs);
    if (origins) *origins = locate(schedule, rows, programs.stage_rank);
    return schedule;
  } catch (const InputError& e) {  // an order that misses a producer: name the file too
    throw InputError(source + ": " + e.what());
  }
}

}  // namespace loom
