// fas_fwd's decode-shaped requests on the paged family (docs/design/fa2-routing.md): which
// requests go there, and the call that runs one through a plan made for it.
#ifndef FAS_API_FWD_ROUTE_H
#define FAS_API_FWD_ROUTE_H

#include "core/layout.h"
#include "flash_attn_standalone.h"

namespace fas {

// Whether fas_fwd hands the validated request to the paged family: the batch layout with at most
// kMaxDecodeQueries queries and at least one key per sequence (causal: at least as many keys as
// queries, so that no row is left without keys), out contiguous, the LSE asked only of one query
// per sequence (fas_fwd's [batch, heads, queries] is then the plan's [queries, heads]), and a
// paged kernel built for it on this device. Reads no device memory.
bool routes_to_paged(const fas_fwd_args& args, const Layout& layout);

// Runs a request that routes_to_paged accepts: a plan over the host offsets i * max_seqlen_q and
// i * max_seqlen_k, one run, retired on args.stream (while the stream captures a graph, that
// graph then owns the plan's memory). *routed = false (FAS_SUCCESS) where the call must stay on
// FA2 after all: the plan's checks turn the request away (strides the paged kernels cannot hold).
fas_status run_on_paged(const fas_fwd_args& args, const Layout& layout, bool* routed);

}  // namespace fas

#endif  // FAS_API_FWD_ROUTE_H
