// fas_fwd: validates its arguments into a Layout; hands batch-layout requests to a plan (the
// SM90 or paged family: fwd_route.h); else plans the FA2 launch (kernel, split count, scratch)
// and enqueues it, with the scratch from the caller's workspace or cudaMallocAsync.
#include "api/fwd.h"

#include <cstring>

#include "api/fwd_route.h"
#include "core/device.h"
#include "core/layout.h"
#include "core/status.h"
#include "fa2/fa2.h"

namespace fas {

namespace {

struct Call {
    fas_fwd_args args;  // the caller's struct, copied
    Layout layout;
    fas_fa2::LaunchPlan plan;
    Route route;
};

fas_status validate(const fas_fwd_args* user_args, Call* call) {
    if (const fas_status status = check_args_struct(user_args, "fas_fwd_args", "fas_fwd_args_init() or FAS_FWD_ARGS_INIT");
        status != FAS_SUCCESS) {
        return status;
    }
    std::memcpy(&call->args, user_args, sizeof(fas_fwd_args));
    const fas_fwd_args& args = call->args;
    if (!is_16bit_dtype(args.dtype)) return fail_bad_dtype(args.dtype);
    if ((args.cu_seqlens_q == nullptr) != (args.cu_seqlens_k == nullptr)) {
        return fail(FAS_ERROR_INVALID_ARGUMENT,
                    concat("only ", args.cu_seqlens_q != nullptr ? "cu_seqlens_q" : "cu_seqlens_k",
                           " is set; set both cu_seqlens_q and cu_seqlens_k for the varlen layout, or neither for "
                           "the batch layout"));
    }
    const bool varlen = args.cu_seqlens_q != nullptr;
    if (varlen && (!is_aligned(args.cu_seqlens_q, sizeof(int32_t)) || !is_aligned(args.cu_seqlens_k, sizeof(int32_t)))) {
        return fail(FAS_ERROR_INVALID_ARGUMENT, "cu_seqlens_q / cu_seqlens_k must be 4-byte aligned int32 device arrays");
    }
    if (varlen && (args.total_q < 0 || (args.softmax_lse != nullptr && args.total_q == 0))) {
        return fail(FAS_ERROR_INVALID_ARGUMENT,
                    concat("total_q is ", args.total_q, "; in the varlen layout set it to the number of rows of q "
                           "(cu_seqlens_q[batch_size]) when softmax_lse is given: it is the head stride of the "
                           "[num_heads_q, total_q] LSE"));
    }
    Layout& layout = call->layout;
    layout.dtype = args.dtype;
    layout.out_dtype = args.dtype;
    layout.varlen = varlen;
    copy_shared_fields(args, &layout);
    layout.max_seqlen_q = args.max_seqlen_q;
    layout.max_seqlen_k = args.max_seqlen_k;
    layout.total_q = varlen ? args.total_q : 0;
    if (const fas_status status = resolve_layout(&layout); status != FAS_SUCCESS) return status;
    if (const fas_status status = check_tensors(layout, args.q, args.k, args.v, args.out, args.softmax_lse);
        status != FAS_SUCCESS) {
        return status;
    }
    if (args.workspace != nullptr && !is_aligned(args.workspace, 16)) {
        return fail(FAS_ERROR_INVALID_ARGUMENT, "workspace is not 16-byte aligned; pass memory from cudaMalloc");
    }
    return FAS_SUCCESS;
}

// The FA2 launch of a validated call.
fas_status plan_fa2(Call* call) {
    const Layout& layout = call->layout;
    const fas_fa2::Kernel* plain_kernel = nullptr;
    fas_status status = fas_fa2::select_plain_kernel(layout.dtype, layout.head_dim, layout.causal, &plain_kernel);
    if (status != FAS_SUCCESS) return status;
    DeviceProps device{};
    status = check_current_device(&device);
    if (status != FAS_SUCCESS) return status;
    fas_fa2::plan_launch(layout, call->args.softmax_lse != nullptr, plain_kernel, device.sm_count, &call->plan);
    return FAS_SUCCESS;
}

// Plans the FA2 launch of a validated call and its route; true where it runs on a plan instead
// (fwd_route.h). A call no FA2 kernel serves may still run on a plan; its FA2 status is returned
// otherwise.
bool takes_plan(Call* call, fas_status* fa2_status) {
    *fa2_status = plan_fa2(call);
    call->route = choose_route(call->layout, *fa2_status == FAS_SUCCESS && call->plan.num_splits > 1);
    return call->route.on_plan;
}

// Device scratch from cudaMallocAsync, released on the stream when the launch fails; on success
// release() enqueues the free after the kernels and reports its status.
class StreamScratch {
public:
    explicit StreamScratch(cudaStream_t stream) : stream_(stream) {}
    StreamScratch(const StreamScratch&) = delete;
    StreamScratch& operator=(const StreamScratch&) = delete;
    ~StreamScratch() {
        if (pointer_ != nullptr && cudaFreeAsync(pointer_, stream_) != cudaSuccess) cudaGetLastError();
    }

    cudaError_t allocate(size_t bytes) { return cudaMallocAsync(&pointer_, bytes, stream_); }

    cudaError_t release() {
        void* const pointer = pointer_;
        pointer_ = nullptr;
        return pointer != nullptr ? cudaFreeAsync(pointer, stream_) : cudaSuccess;
    }

    char* get() const { return static_cast<char*>(pointer_); }

private:
    cudaStream_t stream_;
    void* pointer_ = nullptr;
};

// `bytes` of scratch for the call: the caller's workspace when it is large enough, else from
// cudaMallocAsync on the call's stream (held by *allocated).
fas_status take_scratch(const fas_fwd_args& args, size_t bytes, StreamScratch* allocated, char** scratch) {
    *scratch = nullptr;
    if (bytes == 0) return FAS_SUCCESS;
    if (args.workspace != nullptr && args.workspace_bytes >= bytes) {
        *scratch = static_cast<char*>(args.workspace);
        return FAS_SUCCESS;
    }
    const cudaError_t error = allocated->allocate(bytes);
    if (error != cudaSuccess) {
        return fail_cuda(error, concat("cudaMallocAsync of ", bytes, " bytes of scratch (pass a workspace of "
                                       "fas_fwd_workspace_size() bytes to avoid it)"));
    }
    *scratch = allocated->get();
    return FAS_SUCCESS;
}

// A request routed on_plan (choose_route), on a plan; *routed = false where it stays on FA2 after all.
fas_status forward_on_plan(const Call& call, bool* routed) {
    StreamScratch allocated(call.args.stream);
    char* scratch = nullptr;
    fas_status status =
        take_scratch(call.args, routed_scratch_bytes(call.args, call.layout, call.route), &allocated, &scratch);
    if (status != FAS_SUCCESS) return status;
    status = run_on_plan(call.args, call.layout, call.route, scratch, routed);
    if (status != FAS_SUCCESS || !*routed) return status;
    const cudaError_t free_error = allocated.release();
    return free_error == cudaSuccess ? FAS_SUCCESS : fail_cuda(free_error, "cudaFreeAsync of the scratch");
}

}  // namespace

fas_status run_forward(const fas_fwd_args* user_args) {
    Call call{};
    fas_status status = validate(user_args, &call);
    if (status != FAS_SUCCESS) return status;
    status = check_no_pending_cuda_error();
    if (status != FAS_SUCCESS) return status;
    fas_status fa2_status = FAS_SUCCESS;
    if (takes_plan(&call, &fa2_status)) {
        bool routed = false;
        status = forward_on_plan(call, &routed);
        if (status != FAS_SUCCESS || routed) return status;
    }
    if (fa2_status != FAS_SUCCESS) return fa2_status;

    const fas_fwd_args& args = call.args;
    const fas_fa2::LaunchPlan& plan = call.plan;
    StreamScratch allocated(args.stream);
    char* scratch = nullptr;
    status = take_scratch(args, plan.scratch_bytes, &allocated, &scratch);
    if (status != FAS_SUCCESS) return status;
    const fas_fa2::Tensors tensors{args.q, args.k, args.v, args.out, args.softmax_lse, args.cu_seqlens_q,
                                   args.cu_seqlens_k};
    std::string message;
    const cudaError_t launch_error = fas_fa2::launch(call.layout, tensors, plan, scratch, args.stream, &message);
    if (launch_error != cudaSuccess) return fail_cuda(launch_error, message);
    const cudaError_t free_error = allocated.release();
    if (free_error != cudaSuccess) return fail_cuda(free_error, "cudaFreeAsync of the scratch");
    return FAS_SUCCESS;
}

fas_status forward_workspace_size(const fas_fwd_args* args, size_t* bytes) {
    if (bytes == nullptr) return fail(FAS_ERROR_INVALID_ARGUMENT, "bytes is NULL; pass a size_t to receive the size");
    Call call{};
    fas_status status = validate(args, &call);
    if (status != FAS_SUCCESS) return status;
    fas_status fa2_status = FAS_SUCCESS;
    if (takes_plan(&call, &fa2_status)) {  // the plan's own memory is the library's
        *bytes = routed_scratch_bytes(call.args, call.layout, call.route);
        return FAS_SUCCESS;
    }
    if (fa2_status == FAS_SUCCESS) *bytes = call.plan.scratch_bytes;
    return fa2_status;
}

}  // namespace fas
