#pragma once
/// Process-group bootstrap for the cuda backend (one process per GPU), independent of
/// CUDA so it can be tested anywhere.
///
/// Who am I: LaunchInfo from the environment, in the conventions of the usual launchers:
///   torchrun / generic    RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT
///   Open MPI mpirun       OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_RANK
///   MPICH / Hydra         PMI_RANK, PMI_SIZE
///   Slurm srun            SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID
/// (first match wins, in that order). No variables: a single process, rank 0 of 1.
/// MASTER_ADDR defaults to 127.0.0.1 and MASTER_PORT to 29500.
///
/// How we meet: rank 0 broadcasts a small blob (the ncclUniqueId) to every rank either
/// over TCP (rank 0 listens on MASTER_PORT, the others connect to MASTER_ADDR) or through
/// a shared file (`loom exec --rendezvous FILE`, else LOOM_RENDEZVOUS_FILE: rank 0 writes
/// it atomically, the others poll for it; the file must not exist before the launch, and
/// rank 0 removes it once every rank has joined: release_rendezvous).
#include <string>
#include <vector>

namespace loom::exec::cuda {

struct LaunchInfo {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::string rendezvous_file;  ///< non-empty: meet through this file instead of TCP
};

/// Reads the environment (see above). `rendezvous_file`, when non-empty, overrides
/// LOOM_RENDEZVOUS_FILE. Throws InputError naming the variable when one is malformed
/// (not an integer, rank outside [0, world size), port outside [1, 65535]).
LaunchInfo launch_info_from_env(const std::string& rendezvous_file = "");

/// Rank 0 passes `blob` and gets it back; every other rank gets rank 0's blob.
/// Throws ExecError naming the rank and what it waited for when `timeout_s` passes
/// (rank 0: not every rank connected; others: rank 0 unreachable or file never written).
std::vector<char> broadcast_from_rank0(const LaunchInfo& info, const std::vector<char>& blob,
                                       double timeout_s);

/// Rank 0 removes the rendezvous file; call it only after a collective every rank has
/// joined (so every rank has read the file). The next bootstrap (another iteration of the
/// same launch, or the next launch with the same path) then starts from no file, as
/// broadcast_from_rank0 requires. A no-op on other ranks, over TCP, or for a missing file.
void release_rendezvous(const LaunchInfo& info);

}  // namespace loom::exec::cuda
