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

std::string module_suffix(ModuleId module, const Schedule& schedule) {
  if (schedule.module_names.size() <= 1) return "";
  return "@" + schedule.module_names.at(module);
}

// "(copy)" on a redundant compute, "(F+B)" on a half of an overlapped pair.
std::string compute_flags(const Compute& c) {
  return std::string(c.redundant ? "(copy)" : "") + (c.overlapped ? "(F+B)" : "");
}

// "F3:L5" within a module; "F3:L19>50" across an edge from layer 19 into layer 50.
std::string tag_string(const MessageTag& tag) {
  std::string text = std::string(to_string(tag.pass)) + to_string(tag.microbatch) + ":L";
  if (tag.producer() != tag.boundary_layer - 1) text += std::to_string(tag.producer()) + ">";
  return text + std::to_string(tag.boundary_layer);
}

}  // namespace

std::string to_string(const Op& op, const Schedule& schedule) {
  return std::visit(
      Overloaded{
          [&](const Compute& c) {
            return to_string(c.stage) + to_string(c.pass) + to_string(c.microbatch) +
                   module_suffix(c.module, schedule) + compute_flags(c);
          },
          [&](const Send& s) {
            return to_string(s.stage) + "SEND_" + tag_string(s.tag) + "->" + to_string(s.peer);
          },
          [&](const Recv& r) {
            return to_string(r.stage) + "RECV_" + tag_string(r.tag) + "<-" + to_string(r.peer);
          },
          [&](const Collective& c) {
            std::string name = to_string(c.kind);
            for (char& ch : name) ch = static_cast<char>(ch - 'a' + 'A');
            return name + "_s" + to_string(c.stage) + "[g" + to_string(c.group) + "]";
          },
          [&](const OptimizerStep& o) { return "OPTIMIZER_s" + to_string(o.stage); },
      },
      op);
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
