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

}  // namespace

fas_status run_forward(const fas_fwd_args* user_args) {
    Call call{};
    fas_status status = validate(user_args, &call);
    if (status != FAS_SUCCESS) return status;
    status = check_no_pending_cuda_error();
    if (status != FAS_SUCCESS) return status;
    if (routes_to_plan(call.args, call.layout)) {
        bool routed = false;
        status = run_on_plan(call.args, call.layout, &routed);
        if (status != FAS_SUCCESS || routed) return status;
    }
    status = plan_fa2(&call);
    if (status != FAS_SUCCESS) return status;

    const fas_fwd_args& args = call.args;
    const fas_fa2::LaunchPlan& plan = call.plan;
    StreamScratch allocated(args.stream);
    char* scratch = nullptr;
    if (plan.scratch_bytes > 0) {
        if (args.workspace != nullptr && args.workspace_bytes >= plan.scratch_bytes) {
            scratch = static_cast<char*>(args.workspace);
        } else {
            const cudaError_t error = allocated.allocate(plan.scratch_bytes);
            if (error != cudaSuccess) {
                return fail_cuda(error, concat("cudaMallocAsync of ", plan.scratch_bytes, " bytes of scratch (pass a "
                                               "workspace of fas_fwd_workspace_size() bytes to avoid it)"));
            }
            scratch = allocated.get();
        }
    }
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
    if (routes_to_plan(call.args, call.layout)) {  // the plan's memory is the library's own
        *bytes = 0;
        return FAS_SUCCESS;
    }
    status = plan_fa2(&call);
    if (status == FAS_SUCCESS) *bytes = call.plan.scratch_bytes;
    return status;
}

}  // namespace fas
