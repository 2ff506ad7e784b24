#pragma once
/// Chakra execution traces (MLCommons; the schema in app/chakra/et_def.proto): the format
/// ASTRA-sim and Chakra's tools read. `loom schedule export --format chakra --out DIR`
/// writes one trace per rank, DIR/loom.RANK.et (ASTRA-sim's {path_prefix}.{npu_id}.et:
/// pass DIR/loom as its --workload-configuration), and DIR/comm_group.json (its
/// --comm-group-configuration: {"GROUP": [ranks]}). A rank is Loom's: one GPU, or a
/// tensor-parallel group of tp GPUs whose TP collectives are inside its compute times.
///
/// Each op is one node, id = its place in the rank's program, in program order:
///   Compute, OptimizerStep  COMP_NODE, duration_micros (rounded), num_ops (model FLOPs per
///                           GPU, core/model_flops.hpp's compute_op_flops), is_cpu_op false
///   Send / Recv             COMM_SEND_NODE comm_dst / COMM_RECV_NODE comm_src, comm_tag,
///                           comm_size (bytes, rounded); a send and its receive share a
///                           tag: the k-th message from one rank to another gets tag k
///   Collective              COMM_COLL_NODE comm_type (ALL_REDUCE, ALL_GATHER,
///                           REDUCE_SCATTER, ALL_TO_ALL), comm_size, pg_name (the group,
///                           comm_group.json's key)
/// Dependencies say what a Loom rank does (core/schedule.hpp), all of them in data_deps
/// (Chakra's feeders before FeederV3 read only data_deps; ctrl_deps stay empty): the last
/// node before it that holds the rank (a compute, a receive, a blocking collective, the
/// optimizer step), so a send does not block what follows it; for an async collective
/// also the async collective before it (one communication stream); and the async
/// collective a compute waits for (FSDP's gather: async_pending) or the optimizer step
/// waits for (the last gradient bucket).
///
/// Every node also carries `loom_op`, the op's line in the `loom` text form, and the
/// file's GlobalMetadata the schedule's header (`loom_schedule`) and the rank's line
/// (`loom_rank`), so that `loom sim CONFIG --schedule DIR` reads back exactly the schedule
/// that was written (docs/schedule-ir.md).
#include <filesystem>
#include <string>

#include "core/model.hpp"
#include "core/op_origin.hpp"
#include "core/schedule.hpp"
#include "core/workload.hpp"

namespace loom {

/// ASTRA-sim's name for the file of communicator groups.
inline constexpr const char* kChakraCommGroups = "comm_group.json";

/// A schedule as Chakra traces: each rank's .et bytes and the file's name, and
/// comm_group.json ("" when a folder has none).
struct ChakraTrace {
  PerRank<std::string> ranks;
  PerRank<std::string> names;  ///< "loom.3.et" (read from a folder: its path)
  std::string comm_groups;
  std::string comm_groups_name;
};

/// The schedule as traces (the FLOP counts from `model` and the workload's `samples`),
/// named loom.RANK.et and comm_group.json.
ChakraTrace export_chakra(const Schedule& schedule, const Model& model,
                          const std::vector<Sample>& samples);

/// Writes each file of `trace` into DIR (which exists) under its name.
void write_chakra(const ChakraTrace& trace, const std::filesystem::path& dir);

/// True when `path` is a folder holding a rank-0 trace (some PREFIX.0.et).
bool is_chakra_folder(const std::filesystem::path& path);

/// A folder's traces: PREFIX.0.et .. PREFIX.(n-1).et with one prefix (InputError naming
/// the folder otherwise), and its comm_group.json if it has one.
ChakraTrace read_chakra_folder(const std::filesystem::path& dir);

/// The schedule the traces hold, each rank's nodes in file order. It refuses, with
/// InputError naming the file and node id and the reason: a file that is truncated or does
/// not parse; a node without `loom_op` (from another producer: Loom cannot tell its stage,
/// pass, microbatch and layers) or whose op does not parse; a dependency on a node the
/// file lacks or that comes later (a cycle); a send or receive without its partner; a
/// node whose Chakra fields (type, dependencies, duration, peer, tag, size, collective
/// type, group) are not what its op gives, so the trace other tools read and the schedule
/// Loom runs cannot differ; a comm_group.json that differs from the groups. `origins`
/// receives each op's file and node id for the deadlock report. num_ops is not read
/// (only ASTRA-sim's roofline mode uses it).
Schedule decode_chakra(const ChakraTrace& trace, OpOrigins* origins = nullptr);

}  // namespace loom
