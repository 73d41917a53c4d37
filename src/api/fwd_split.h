// fas_fwd's few query tiles over long keys on SM90: the keys split into chunks, each chunk an
// attention of its own, the partial results merged by their LSE (docs/design/fa2-routing.md,
// "The keys split on SM90"). SM90's prefill kernels give a (query tile, head) pair one CTA over
// all its keys; a call of one sequence with 64 queries over 32k keys and 16 query heads is 16
// CTAs on 132 SMs. Under a causal mask (bottom-right) every query sees every key before the
// last max_seqlen_q - 1, so the chunks before the last are attentions without a mask (one launch
// of the non-causal kernel over all of them) and the last one, of at least max_seqlen_q keys, is
// the causal rule over its own keys (one launch of the causal kernel).
#ifndef FAS_API_FWD_SPLIT_H
#define FAS_API_FWD_SPLIT_H

#include <cstddef>
#include <cstdint>

#include "core/device.h"
#include "core/layout.h"
#include "flash_attn_standalone.h"
#include "sm90/sm90.h"

namespace fas {

struct KeySplit {
    int chunks = 0;              // unmasked chunks per sequence, of chunk_keys keys (the last one: the rest)
    int32_t chunk_keys = 0;
    int32_t unmasked_keys = 0;   // the keys those chunks cover, from each sequence's first
    int32_t last_keys = 0;       // causal: the last chunk's keys, on the causal kernel; else 0
    const fas_sm90::Kernel* unmasked = nullptr;
    const fas_sm90::Kernel* causal = nullptr;
    // The SM90 kernel's (query tile, head) pairs fill less than half of the SMs, split or not.
    bool few_tiles = false;
    int states() const { return chunks + (last_keys > 0 ? 1 : 0); }  // partial results merged
};

// The split of a validated batch-layout request that choose_route sends to a plan, or none
// (states() == 0) where it does not pay: its (query tile, head) pairs fill half of the SMs or
// more, its keys make fewer than two chunks of kMinChunkKeys (there the split's launches and two
// plans a call cost more than its parallelism gains), its rows are not 16-byte multiples, or no
// SM90 kernel serves its pieces. Reads no device memory.
KeySplit choose_key_split(const Layout& layout, const DeviceProps& device);

// Whether the request has work enough (batch x queries x keys x query heads x head dim >= 2^32)
// to repay the split's fixed cost a call (two plans, six launches) against FA2's split-KV kernel.
bool key_split_beats_fa2(const Layout& layout);

// Device scratch of a split run: the partial outputs (the call's dtype) and LSEs, the chunks'
// copies of the query rows, and the merged LSE before its reorder into fas_fwd's layout.
size_t key_split_scratch_bytes(const Layout& layout, const KeySplit& split, const float* softmax_lse);

// Enqueues the split on args.stream: the query copies, a plan over the unmasked chunks, one over
// the causal last chunks, the merge into out (and softmax_lse, reordered into [batch, heads,
// queries]). The plans are made under a relaxed capture mode and retired on the stream (while it
// captures, the graph owns their memory). scratch: key_split_scratch_bytes, 16-byte aligned.
fas_status run_key_split(const fas_fwd_args& args, const Layout& layout, const KeySplit& split,
                         const DeviceProps& device, void* scratch);

}  // namespace fas

#endif  // FAS_API_FWD_SPLIT_H
