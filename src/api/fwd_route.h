// fas_fwd's batch-layout requests on the plan families (docs/design/fa2-routing.md): which
// requests go there, and the call that runs one through a plan made for it.
#ifndef FAS_API_FWD_ROUTE_H
#define FAS_API_FWD_ROUTE_H

#include "core/layout.h"
#include "flash_attn_standalone.h"

namespace fas {

// Whether fas_fwd hands the validated request to a plan: the batch layout (host offsets) with at
// least one query and one key per sequence (causal: at least as many keys as queries, so that no
// row is left without keys), out contiguous, the LSE asked only of one query per sequence
// (fas_fwd's [batch, heads, queries] is then the plan's [queries, heads]), on an SM90 device with
// an SM90 kernel for the dtype, head dim and mask, or (at most kMaxDecodeQueries queries) a paged
// one. Reads no device memory.
bool routes_to_plan(const fas_fwd_args& args, const Layout& layout);

// Runs a request that routes_to_plan accepts: a plan over the host offsets i * max_seqlen_q and
// i * max_seqlen_k (the plan API's family choice: paged for decode-shaped requests, else SM90),
// one run, retired on args.stream (while the stream captures a graph, that graph then owns the
// plan's memory). *routed = false (FAS_SUCCESS) where the call must stay on FA2 after all: the
// plan would be FA2's (a layout the SM90 kernels refuse, such as more than 2^30 work items).
fas_status run_on_plan(const fas_fwd_args& args, const Layout& layout, bool* routed);

}  // namespace fas

#endif  // FAS_API_FWD_ROUTE_H
