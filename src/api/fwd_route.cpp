// fas_fwd's batch-layout requests on the plan families (docs/design/fa2-routing.md): decode-shaped
// ones on the paged family, whose kernel reads K and V at 3-4.4 TB/s where FA2's split-KV and plain
// kernels read 0.3-0.7 (H200), the rest on SM90 where it has a kernel. A plan made per call
// costs at most 3% of a decode call and less of a prefill one.
#include "api/fwd_route.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "api/plan.h"
#include "core/capture.h"
#include "core/device.h"
#include "core/kv_cache.h"
#include "core/lse.h"
#include "core/status.h"
#include "paged/paged.h"
#include "sm90/sm90.h"

namespace fas {

namespace {

// Sequence i's rows start at i * length: the batch layout's offsets, on the host.
std::vector<int32_t> uniform_offsets(int batch_size, int length) {
    std::vector<int32_t> offsets(static_cast<size_t>(batch_size) + 1);
    for (int i = 0; i <= batch_size; ++i) offsets[i] = i * length;
    return offsets;
}

}  // namespace

namespace {

// A paged decode kernel serves the request (at most kMaxDecodeQueries queries a sequence).
bool paged_decode_serves(const Layout& layout) {
    std::string why;
    return layout.max_seqlen_q <= kMaxDecodeQueries &&
           fas_paged::choose_kernel(layout.dtype, layout.dtype, layout.head_dim, layout.causal, layout.max_seqlen_q,
                                    layout.num_heads_q / layout.num_heads_k,
                                    fas_paged::pair_tiles(/*contiguous=*/true, 0), &why) != nullptr;
}

}  // namespace

Route choose_route(const Layout& layout, bool fa2_splits) {
    Route route;
    if (layout.varlen || layout.max_seqlen_q < 1 || layout.max_seqlen_k < 1) return route;
    if (layout.causal && layout.max_seqlen_k < layout.max_seqlen_q) return route;
    if (layout.out_row_stride != static_cast<int64_t>(layout.num_heads_q) * layout.head_dim) return route;
    // Every row offset must fit the plan's int32 offsets.
    if (static_cast<int64_t>(layout.batch_size) * std::max(layout.max_seqlen_q, layout.max_seqlen_k) > INT32_MAX) {
        return route;
    }
    if (check_current_device(&route.device) != FAS_SUCCESS || !route.device.is_sm90()) return route;
    if (paged_decode_serves(layout)) {
        route.on_plan = true;
        return route;
    }
    if (fas_sm90::find_kernel(layout.dtype, layout.dtype, layout.head_dim, layout.causal) == nullptr) return route;
    route.split = choose_key_split(layout, route.device);
    // FA2's split-KV kernel keeps what it splits only where SM90's tiles fill less than half of
    // the SMs and SM90 does not split the keys, or splits too little work to repay its fixed cost:
    // elsewhere SM90 is faster (H200: 94 against 177 us at 6 x 100 x 8k, 16/2; 77 against 130 at
    // 1 x 128 x 32k; docs/design/fa2-routing.md).
    const bool fa2_keeps =
        fa2_splits && route.split.few_tiles && (route.split.states() == 0 || !key_split_beats_fa2(layout));
    if (fa2_keeps) route.split = KeySplit{};
    route.on_plan = !fa2_keeps;
    return route;
}

size_t routed_scratch_bytes(const fas_fwd_args& args, const Layout& layout, const Route& route) {
    if (route.split.states() > 0) return key_split_scratch_bytes(layout, route.split, args.softmax_lse);
    if (!batch_lse_needs_reorder(args.softmax_lse, layout.max_seqlen_q)) return 0;
    return static_cast<size_t>(layout.batch_size) * layout.max_seqlen_q * layout.num_heads_q * sizeof(float);
}

fas_status run_on_plan(const fas_fwd_args& args, const Layout& layout, const Route& route, void* scratch,
                       bool* routed) {
    *routed = false;
    if (route.split.states() > 0) {
        *routed = true;
        return run_key_split(args, layout, route.split, route.device, scratch);
    }
    const std::vector<int32_t> cu_q = uniform_offsets(layout.batch_size, layout.max_seqlen_q);
    const std::vector<int32_t> cu_k = uniform_offsets(layout.batch_size, layout.max_seqlen_k);
    fas_plan_args plan_args;
    init_args_struct(&plan_args);
    plan_args.dtype = layout.dtype;
    plan_args.out_dtype = layout.dtype;
    plan_args.cu_seqlens_q = cu_q.data();
    plan_args.cu_seqlens_k = cu_k.data();
    plan_args.batch_size = layout.batch_size;
    plan_args.num_heads_q = layout.num_heads_q;
    plan_args.num_heads_k = layout.num_heads_k;
    plan_args.head_dim = layout.head_dim;
    plan_args.q_row_stride = layout.q_row_stride;
    plan_args.k_row_stride = layout.k_row_stride;
    plan_args.v_row_stride = layout.v_row_stride;
    plan_args.out_row_stride = layout.out_row_stride;
    plan_args.softmax_scale = layout.softmax_scale;
    plan_args.causal = layout.causal ? 1 : 0;
    plan_args.stream = args.stream;
    fas_plan* plan = nullptr;
    fas_status status = FAS_SUCCESS;
    {
        // Planning may allocate or wait on the host, which a global or thread-local capture (of
        // args.stream, or of another stream by this thread) refuses and is invalidated by unless
        // relaxed; none of it touches a captured stream. A captured run stays captured, and the
        // plan's release on a captured stream hands its memory to the graph (core/device_block.h).
        RelaxedCaptureScope relaxed;
        status = create_plan_without_fa2(&plan_args, &plan);
    }
    if (status != FAS_SUCCESS || plan == nullptr) return status;
    *routed = true;
    fas_plan_run_args run;
    init_args_struct(&run);
    run.q = args.q;
    run.k = args.k;
    run.v = args.v;
    run.out = args.out;
    // SM90 and paged plans write the LSE token-major: with one query per sequence that is fas_fwd's
    // batch layout already, else it goes through the scratch and is reordered after the run.
    const bool reorder = batch_lse_needs_reorder(args.softmax_lse, layout.max_seqlen_q);
    run.softmax_lse = reorder ? static_cast<float*>(scratch) : args.softmax_lse;
    run.stream = args.stream;
    status = run_plan(plan, &run);
    if (status == FAS_SUCCESS && reorder) {
        const cudaError_t error = reorder_lse_to_batch(run.softmax_lse, args.softmax_lse, layout.batch_size,
                                                       layout.max_seqlen_q, layout.num_heads_q, args.stream);
        if (error != cudaSuccess) status = fail_cuda(error, "the LSE's reorder into the batch layout");
    }
    // Released once the run is done on the device, whether or not it was enqueued.
    const fas_status retired = destroy_plan_async(plan, args.stream);
    return status != FAS_SUCCESS ? status : retired;
}

}  // namespace fas
