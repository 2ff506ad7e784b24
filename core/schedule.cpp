#include "core/schedule.hpp"

#include "core/errors.hpp"
#include "core/index.hpp"
#include "core/overloaded.hpp"

namespace loom {

const char* to_string(Pass pass) {
  switch (pass) {
    case Pass::kF:
      return "F";
    case Pass::kB:
      return "B";
    case Pass::kI:
      return "I";
    case Pass::kW:
      return "W";
  }
  return "?";
}

const char* to_string(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::kAllReduce:
      return "allreduce";
    case CollectiveKind::kAllGather:
      return "allgather";
    case CollectiveKind::kReduceScatter:
      return "reducescatter";
    case CollectiveKind::kAllToAll:
      return "alltoall";
  }
  return "?";
}

size_t Schedule::num_ops() const {
  size_t n = 0;
  for (const auto& program : programs) n += program.size();
  return n;
}

namespace {

// Op names are built for every op of every output file (12 M at 16,384 GPUs): appended
// into one string, not concatenated from temporaries.
void append_module_suffix(std::string& text, ModuleId module, const Schedule& schedule) {
  if (schedule.module_names.size() <= 1) return;
  text += '@';
  text += schedule.module_names.at(module);
}

// "(copy)" on a redundant compute, "(F+B)" on a half of an overlapped pair.
void append_compute_flags(std::string& text, const Compute& c) {
  if (c.redundant) text += "(copy)";
  if (c.overlapped) text += "(F+B)";
}

// "F3:L5" within a module; "F3:L19>50" across an edge from layer 19 into layer 50.
void append_tag(std::string& text, const MessageTag& tag) {
  text += to_string(tag.pass);
  append_decimal(text, tag.microbatch);
  text += ":L";
  if (tag.producer() != tag.boundary_layer - 1) {
    append_decimal(text, tag.producer());
    text += '>';
  }
  append_decimal(text, tag.boundary_layer);
}

void append_message(std::string& text, StageId stage, const char* kind, const MessageTag& tag,
                    const char* arrow, RankId peer) {
  append_decimal(text, stage);
  text += kind;
  append_tag(text, tag);
  text += arrow;
  append_decimal(text, peer);
}

}  // namespace

std::string to_string(const Op& op, const Schedule& schedule) {
  std::string text;
  text.reserve(32);
  std::visit(
      Overloaded{
          [&](const Compute& c) {
            append_decimal(text, c.stage);
            text += to_string(c.pass);
            append_decimal(text, c.microbatch);
            append_module_suffix(text, c.module, schedule);
            append_compute_flags(text, c);
          },
          [&](const Send& s) { append_message(text, s.stage, "SEND_", s.tag, "->", s.peer); },
          [&](const Recv& r) { append_message(text, r.stage, "RECV_", r.tag, "<-", r.peer); },
          [&](const Collective& c) {
            for (const char* ch = to_string(c.kind); *ch; ++ch)
              text += static_cast<char>(*ch - 'a' + 'A');
            text += "_s";
            append_decimal(text, c.stage);
            text += "[g";
            append_decimal(text, c.group);
            text += ']';
          },
          [&](const OptimizerStep& o) {
            text += "OPTIMIZER_s";
            append_decimal(text, o.stage);
          },
      },
      op);
  return text;
}

bool Schedule::group_in_one_replica(GroupId group) const {
  const auto& members = group_members(group);
  for (const RankId m : members) {
    if (ranks.at(m).replica != ranks.at(members[0]).replica) return false;
  }
  return true;
}

int ring_steps(CollectiveKind kind, int members) {
  if (members <= 1) return 0;
  return kind == CollectiveKind::kAllReduce ? 2 * (members - 1) : members - 1;
}

double ring_chunk_bytes(CollectiveKind /*kind*/, int members, double bytes) {
  // All-reduce (reduce-scatter + all-gather), all-gather and reduce-scatter all move
  // bytes/n per step; an all-to-all moves bytes/n to each of the n - 1 others.
  return members <= 0 ? 0.0 : bytes / members;
}

void throw_if_deadlocked(const Schedule& schedule, const PerRank<std::size_t>& next_op,
                         const std::string& where) {
  std::string blocked;
  int count = 0;
  for (const RankId r : schedule.rank_ids()) {
    const auto& program = schedule.programs[r];
    const std::size_t i = next_op[r];
    if (i >= program.size()) continue;
    if (count++ < 8) {
      blocked += "\n  rank " + to_string(r) + " blocked at op #" + std::to_string(i) + " (" +
                 to_string(schedule.op({r, i}), schedule) + ")";
    }
  }
  if (count > 0) {
    throw InfeasibleError("schedule deadlocks" + where + ": " + std::to_string(count) +
                          " rank(s) can never finish" + blocked);
  }
}

double ring_stream_bytes(CollectiveKind kind, int members, double bytes) {
  return ring_steps(kind, members) * ring_chunk_bytes(kind, members, bytes);
}

StageId op_stage(const Op& op) {
  return std::visit([](const auto& o) { return o.stage; }, op);
}

ModuleId op_module(const Op& op) {
  return std::visit([](const auto& o) { return o.module; }, op);
}

std::optional<MicrobatchId> op_microbatch(const Op& op) {
  return std::visit(
      Overloaded{
          [](const Compute& c) -> std::optional<MicrobatchId> { return c.microbatch; },
          [](const Send& s) -> std::optional<MicrobatchId> { return s.tag.microbatch; },
          [](const Recv& r) -> std::optional<MicrobatchId> { return r.tag.microbatch; },
          [](const Collective&) -> std::optional<MicrobatchId> { return std::nullopt; },
          [](const OptimizerStep&) -> std::optional<MicrobatchId> { return std::nullopt; },
      },
      op);
}

std::size_t async_needed_before(const Op& op, std::size_t issued) {
  if (std::holds_alternative<OptimizerStep>(op)) return issued;
  const auto* c = std::get_if<Compute>(&op);
  if (!c || c->async_pending < 0) return 0;
  const auto pending = static_cast<std::size_t>(c->async_pending);
  return issued > pending ? issued - pending : 0;
}

const char* op_kind_name(const Op& op) {
  return std::visit(Overloaded{
                        [](const Compute& c) { return to_string(c.pass); },
                        [](const Send&) { return "send"; },
                        [](const Recv&) { return "recv"; },
                        [](const Collective& c) { return to_string(c.kind); },
                        [](const OptimizerStep&) { return "optimizer"; },
                    },
                    op);
}

}  // namespace loom
