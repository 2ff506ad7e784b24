// Writing the `loom` text form (the parser is in schedule_text_parse.cpp). Every field of
// the IR is written, in a fixed order, so that reading it back gives an equal Schedule and
// two runs of a scheduler give byte-identical files.
#include "core/schedule_text.hpp"

#include <charconv>
#include <stdexcept>

#include "core/overloaded.hpp"

namespace loom {
namespace {

void check_name(const std::string& name, const char* what) {
  const bool bad = name.empty() || name.find_first_of(" \t\r\n@(#") != std::string::npos;
  if (bad) {
    throw std::invalid_argument(std::string("format_schedule: ") + what + " '" + name +
                                "' is empty or holds whitespace, '@', '(' or '#'");
  }
}

/// " key=value", with the module by name.
std::string field(const char* key, double value) {
  return std::string(" ") + key + "=" + exact_double(value);
}

std::string module_field(ModuleId module, const Schedule& s) {
  if (s.module_names.size() <= 1 && module == ModuleId{0}) return "";
  return " module=" + s.module_names.at(module);
}

std::string op_line(const Op& op, const Schedule& s) {
  std::string line = to_string(op, s);
  std::visit(
      Overloaded{
          [&](const Compute& c) {
            line += " layers=" + std::to_string(c.first_layer) + ":" + std::to_string(c.end_layer) +
                    field("seconds", c.seconds);
            if (c.activation_bytes != 0) line += field("activation", c.activation_bytes);
            if (c.weight_grad_s != 0) line += field("weight_grad", c.weight_grad_s);
            if (c.releases_activation) line += " release=1";
            if (c.async_pending >= 0) line += " wait=" + std::to_string(c.async_pending);
            if (c.continues) line += " cont=1";
            // The short form names the module only when there are several.
            if (s.module_names.size() <= 1) line += module_field(c.module, s);
          },
          [&](const Send& x) { line += module_field(x.module, s) + field("bytes", x.bytes); },
          [&](const Recv& x) { line += module_field(x.module, s) + field("bytes", x.bytes); },
          [&](const Collective& x) {
            line += module_field(x.module, s) + field("bytes", x.bytes);
            if (x.tied_embedding) line += " tied_embedding=1";
            if (x.async) line += " async=1";
            if (x.end_layer > x.first_layer)
              line +=
                  " layers=" + std::to_string(x.first_layer) + ":" + std::to_string(x.end_layer);
          },
          [&](const OptimizerStep& x) {
            line += module_field(x.module, s) + field("parameters", x.parameters) +
                    field("seconds", x.seconds);
          },
      },
      op);
  return line;
}

template <class T>
std::string int_list(const std::vector<T>& values) {
  using std::to_string;
  std::string out;
  for (const T v : values) out += " " + to_string(v);
  return out;
}

}  // namespace

std::string exact_double(double value) {
  char buf[64];
  const auto result = std::to_chars(buf, buf + sizeof buf, value);
  return std::string(buf, result.ptr);
}

ScheduleTextParts format_schedule_parts(const Schedule& s) {
  check_name(s.scheduler, "scheduler name");
  for (const std::string& m : s.module_names) check_name(m, "module name");
  const size_t n = s.programs.size();
  if (s.ranks.size() != n || s.static_memory.size() != n) {
    throw std::invalid_argument(
        "format_schedule: ranks, programs and static_memory differ in length");
  }
  ScheduleTextParts parts;
  std::string& out = parts.header;
  out =
      "# Loom schedule IR (docs/schedule-ir.md); run it with: loom sim CONFIG "
      "--schedule FILE\n";
  out += std::string(kScheduleTextMagic) + "\n";
  out += "scheduler " + s.scheduler + "\n";
  out += "modules " + std::to_string(s.module_names.size());
  for (const std::string& m : s.module_names) out += " " + m;
  out += "\nnum_stages " + std::to_string(s.num_stages) + "\n";
  out += "microbatches " + std::to_string(s.microbatches) + "\n";
  // Only folded schedules carry the line: unfolded files stay as they were.
  if (s.replica_fold != 1) out += "replica_fold " + std::to_string(s.replica_fold) + "\n";
  if (s.cp != 1) out += "context_parallel " + std::to_string(s.cp) + "\n";
  out += "groups " + std::to_string(s.groups.size()) + "\n";
  for (const GroupId g : s.groups.ids())
    out += "group " + to_string(g) + ":" + int_list(s.groups[g]) + "\n";
  out += "samples " + std::to_string(s.samples.size()) + "\n";
  for (const ReplicaId d : s.samples.ids()) {
    out +=
        "replica " + to_string(d) + " microbatches " + std::to_string(s.samples[d].size()) + "\n";
    for (const MicrobatchId j : s.samples[d].ids())
      out += "mb " + to_string(j) + ":" + int_list(s.samples[d][j]) + "\n";
  }
  out += "ranks " + std::to_string(n) + "\n";
  for (const RankId r : s.rank_ids()) {
    const RankInfo& info = s.ranks[r];
    const StaticMemory& mem = s.static_memory[r];
    parts.rank_lines.push_back(
        "rank " + to_string(r) + " gpu=" + std::to_string(info.gpu) +
        " tp=" + std::to_string(info.tp) + " replica=" + to_string(info.replica) +
        field("parameters", mem.parameters) + field("gradients", mem.gradients) +
        field("optimizer", mem.optimizer));
    auto& ops = parts.op_lines.emplace_back();
    for (const Op& op : s.programs[r]) ops.push_back(op_line(op, s));
  }
  return parts;
}

std::string join_schedule_parts(const ScheduleTextParts& parts) {
  std::string out = parts.header;
  for (const RankId r : parts.rank_lines.ids()) {
    out += parts.rank_lines[r] + "\n";
    for (const std::string& op : parts.op_lines[r]) out += "  " + op + "\n";
  }
  return out + "end\n";
}

std::string format_schedule(const Schedule& s) {
  return join_schedule_parts(format_schedule_parts(s));
}

}  // namespace loom
