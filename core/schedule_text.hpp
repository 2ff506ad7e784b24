#pragma once
/// The `loom` text form of a whole Schedule: a file that can be saved, diffed, edited by
/// hand and read back, with parse_schedule(format_schedule(s)) == s for every schedule
/// (docs/schedule-ir.md describes the grammar with an example).
///
///   loom-schedule 1
///   scheduler 1f1b
///   modules 1 llm
///   num_stages 2
///   microbatches 2
///   groups 0
///   samples 1
///   replica 0 microbatches 2
///   mb 0: 0
///   mb 1: 1
///   ranks 2
///   rank 0 gpu=0 tp=1 replica=0 parameters=1e9 gradients=1e9 optimizer=2e9
///     0F0 layers=0:2 seconds=0.001 activation=1e6
///     0SEND_F0:L2->1 bytes=4096
///     ...
///   end
///
/// Each op line starts with the op's short form (to_string(op, schedule): "0F0",
/// "1SEND_F3:L5->2", "ALLREDUCE_s1[g0]") and carries the remaining fields as key=value; a
/// rank's ops are the lines up to the next "rank" or "end" line (add or drop lines freely);
/// doubles are written in their shortest exact decimal form (std::to_chars), so they read
/// back bit for bit. Lines starting with '#' and blank lines are ignored.
#include <string>
#include <string_view>
#include <vector>

#include "core/op_origin.hpp"
#include "core/schedule.hpp"

namespace loom {

/// The first line of every file in the `loom` format.
inline constexpr std::string_view kScheduleTextMagic = "loom-schedule 1";

/// The whole schedule in the `loom` format (ends with "end\n"). Module and scheduler names
/// must be non-empty and free of whitespace, '@' and '(' (config identifiers are);
/// ranks, programs and static_memory must have one entry per rank. Throws
/// std::invalid_argument otherwise (an internal error: schedulers produce such schedules).
std::string format_schedule(const Schedule& schedule);

/// The `loom` format in pieces, for containers that keep one rank per file (Chakra
/// traces, app/chakra_trace.hpp): `header` runs from the comment line to "ranks COUNT\n",
/// then per rank its "rank ..." line and its op lines ("0F0 layers=0:2 seconds=0.001"),
/// each without indent or newline.
struct ScheduleTextParts {
  std::string header;
  PerRank<std::string> rank_lines;
  PerRank<std::vector<std::string>> op_lines;
};
ScheduleTextParts format_schedule_parts(const Schedule& schedule);
/// The file the parts make: format_schedule(s) == join_schedule_parts(format_schedule_parts(s)).
std::string join_schedule_parts(const ScheduleTextParts& parts);

/// Reads the `loom` format back. Throws InputError "SOURCE:LINE:COL: what was expected"
/// (1-based line and column of the offending token) on any syntax error, unknown key,
/// count that does not match, or index out of range (a module, group or rank that does not
/// exist). It checks the text only; validate() checks the schedule's semantics. `origins`,
/// when given, receives each op's line (its step is its place in its rank's list).
Schedule parse_schedule(std::string_view text, const std::string& source = "<schedule>",
                        OpOrigins* origins = nullptr);

/// True when `text` starts (after blank and '#' lines) with kScheduleTextMagic: how
/// `loom sim --schedule` tells the `loom` format from PyTorch's action CSV.
bool is_loom_schedule_text(std::string_view text);

/// The shortest decimal that reads back as exactly `value` ("0.1", "1e-06", "inf").
std::string exact_double(double value);

}  // namespace loom
