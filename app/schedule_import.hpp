#pragma once
/// Schedules from files: `loom sim CONFIG --schedule FILE` runs a saved, hand-edited or
/// imported schedule through the same checks as a planned one. The one place that knows
/// the formats (docs/schedule-ir.md):
///   loom         the full IR in text (core/schedule_text.hpp), first line "loom-schedule 1"
///   pytorch-csv  PyTorch pipelining's action CSV (app/pytorch_csv.hpp), lowered by Loom
///   chakra       a folder of MLCommons Chakra traces, one per rank (app/chakra_trace.hpp)
#include <string>
#include <string_view>

#include "app/chakra_trace.hpp"
#include "app/pytorch_csv.hpp"
#include "app/study.hpp"

namespace loom {

/// The formats `loom schedule export --format` writes.
enum class ScheduleFormat { kLoom, kPytorchCsv };

/// The schedule of `study` in `format` (`comms`: PyTorch communication actions too).
std::string export_schedule(const Schedule& schedule, ScheduleFormat format, bool comms);

/// Reads `path` (format detected from its content: a folder of Chakra traces, a file with
/// the `loom` header, else PyTorch's action CSV lowered against `study`'s problem) and checks it
/// against `study`'s config: the model's modules, GPU placement, a dependency-only run (a deadlock
/// names each stuck rank, its step and the producer it waits for), validate() (every sample once,
/// every input produced before it is consumed). Those failures are errors in the file: InputError
/// (exit 2) prefixed with `path`, as are parse errors ("PATH:LINE:COL: ..."). A schedule
/// that is valid but does not fit GPU memory throws InfeasibleError (exit 3). `naming`:
/// which PyTorch release's action names a CSV uses (app/pytorch_csv.hpp).
Schedule load_schedule_file(const Study& study, const std::string& path,
                            PytorchNaming naming = PytorchNaming::kCurrent);

/// load_schedule_file on text already read; `source` names it in messages (the fuzz
/// targets in fuzz/ call this on their bytes).
Schedule load_schedule_text(const Study& study, std::string_view text, const std::string& source,
                            PytorchNaming naming = PytorchNaming::kCurrent);

/// load_schedule_file on Chakra traces already read (decode_chakra, then the same
/// checks); `source` names them in messages (the fuzz target calls this on its bytes).
Schedule load_chakra(const Study& study, const ChakraTrace& trace, const std::string& source);

}  // namespace loom
