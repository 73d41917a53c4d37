// fas_fwd's batch-layout requests on the plan families (docs/design/fa2-routing.md): which
// requests go there, and the call that runs one through a plan made for it.
#ifndef FAS_API_FWD_ROUTE_H
#define FAS_API_FWD_ROUTE_H

#include <cstddef>

#include "api/fwd_split.h"
#include "core/device.h"
#include "core/layout.h"
#include "flash_attn_standalone.h"

namespace fas {

// Where fas_fwd runs a validated request, decided once per call.
struct Route {
    // On a plan: the batch layout (host offsets) with at least one query and one key per sequence
    // (causal: at least as many keys as queries, so that no row is left without keys), out
    // contiguous, on an SM90 device with a paged kernel for it (at most kMaxDecodeQueries queries)
    // or an SM90 kernel for the dtype, head dim and mask. Where FA2 would split the keys
    // (fa2_splits: its split-KV kernel is built and chosen for the request), only if SM90's tiles
    // fill half of the SMs, or SM90 splits the keys too and key_split_beats_fa2. Else FA2.
    bool on_plan = false;
    KeySplit split;  // states() > 0: the key split on SM90 (api/fwd_split.h)
    DeviceProps device{};
};

// The request's route. Reads no device memory.
Route choose_route(const Layout& layout, bool fa2_splits);

// Device scratch a routed request needs: a key split's (api/fwd_split.h), else the plan's
// token-major LSE [batch * max_seqlen_q, num_heads_q] where batch_lse_needs_reorder (core/lse.h);
// else 0.
size_t routed_scratch_bytes(const fas_fwd_args& args, const Layout& layout, const Route& route);

// Runs a request routed on_plan: the key split on SM90 where route.split has one; else a plan over
// the host offsets i * max_seqlen_q and i * max_seqlen_k (the plan API's family choice: paged for
// decode-shaped requests, else SM90), one run, retired on args.stream (while the stream captures a
// graph, that graph then owns the plan's memory). scratch: routed_scratch_bytes of device memory,
// unused after the call's stream work. *routed = false (FAS_SUCCESS) where the call must stay on
// FA2 after all: the plan would be FA2's (a layout the SM90 kernels refuse, such as more than 2^30
// work items).
fas_status run_on_plan(const fas_fwd_args& args, const Layout& layout, const Route& route, void* scratch,
                       bool* routed);

}  // namespace fas

#endif  // FAS_API_FWD_ROUTE_H
