#pragma once
/// The two places where the SimGrid backend reaches below s4u, into SimGrid 3.32's kernel,
/// to get what the public API promises: a host-to-host comm (Comm::sendto_init) that keeps
/// its rate cap and that costs O(1) to finish. The first links against a symbol libsimgrid
/// exports (a SimGrid without it fails to link; tests check the caps hold); the second
/// checks itself on every comm and leaves SimGrid's list alone where its layout differs.
#include <simgrid/forward.h>  // xbt's declaration macros, which version.h needs first
#include <simgrid/version.h>

#include <simgrid/s4u/Comm.hpp>

namespace loom::sim {

/// Whether untrack_detached knows where this SimGrid keeps its detached list (3.32.0).
inline constexpr bool kKnowsDetachedList = SIMGRID_VERSION == 33200;

/// Caps a host-to-host comm's rate before it starts. SimGrid 3.32's s4u::Comm::set_rate
/// refuses once the hosts are set and is not passed on before (only mailbox comms hand it
/// to the kernel); the kernel's own CommImpl::set_rate, which that mailbox path calls, is
/// exported by libsimgrid though its class is opaque in the public headers.
void set_comm_rate(simgrid::s4u::Comm& comm, double bytes_per_s);

/// Takes a comm that Comm::sendto_init has just created out of SimGrid's list of detached
/// activities, which the caller must then keep alive (hold its CommPtr) until it completes.
///
/// SimGrid 3.32 detaches every host-to-host comm: CommImpl::detach appends it to maestro's
/// activity list and CommImpl::finish takes it out with std::list::remove, a scan of every
/// comm in flight (14 % of an unfolded 16,384-GPU run, growing with the square of the job;
/// README, Benchmarks). The comm is the list's last element right after sendto_init, so it
/// comes out in O(1) and finish then scans an empty list. Returns false, and leaves the
/// list as it is, when that last element is not this comm (another SimGrid version).
bool untrack_detached(const simgrid::s4u::Comm& comm);

}  // namespace loom::sim
