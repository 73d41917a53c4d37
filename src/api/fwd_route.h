// fas_fwd's batch-layout requests on the plan families (docs/design/fa2-routing.md): which
// requests go there, and the call that runs one through a plan made for it.
#ifndef FAS_API_FWD_ROUTE_H
#define FAS_API_FWD_ROUTE_H

#include <cstddef>

#include "core/layout.h"
#include "flash_attn_standalone.h"

namespace fas {

// Whether fas_fwd hands the validated request to a plan: the batch layout (host offsets) with at
// least one query and one key per sequence (causal: at least as many keys as queries, so that no
// row is left without keys), out contiguous, on an SM90 device with a paged kernel for it (at most
// kMaxDecodeQueries queries) or an SM90 kernel for the dtype, head dim and mask. Where FA2 would
// split the keys (fa2_splits: its split-KV kernel is built and chosen for the request), only if
// SM90 splits them too (api/fwd_split.h). Reads no device memory.
bool routes_to_plan(const Layout& layout, bool fa2_splits);

// Device scratch a routed request needs: a key split's (api/fwd_split.h), else the plan's
// token-major LSE [batch * max_seqlen_q, num_heads_q], reordered into fas_fwd's [batch,
// num_heads_q, max_seqlen_q] after the run, when softmax_lse is asked for with more than one query
// (with one the two layouts are the same); else 0.
size_t routed_scratch_bytes(const fas_fwd_args& args, const Layout& layout);

// Runs a request that routes_to_plan accepts: with few query tiles over long keys, the key split
// on SM90 (api/fwd_split.h); else a plan over the host offsets i * max_seqlen_q and
// i * max_seqlen_k (the plan API's family choice: paged for decode-shaped requests, else SM90),
// one run, retired on args.stream (while the stream captures a graph, that graph then owns the
// plan's memory). scratch: routed_scratch_bytes of device memory, unused after the call's stream
// work. *routed = false (FAS_SUCCESS) where the call must stay on FA2 after all: the plan would be
// FA2's (a layout the SM90 kernels refuse, such as more than 2^30 work items).
fas_status run_on_plan(const fas_fwd_args& args, const Layout& layout, void* scratch, bool* routed);

}  // namespace fas

#endif  // FAS_API_FWD_ROUTE_H
