// SM90 plans (varlen or paged K/V): the schedule and launch arguments made once per batch layout,
// the launch per run, and the conversion of the kernel's log2 LSE to the natural logarithm of the API (core/lse.h).
#include <algorithm>

#include "core/kv_cache.h"
#include "core/lse.h"
#include "core/status.h"
#include "sm90/sm90.h"

namespace fas_sm90 {

using fas::concat;
using fas::fail;
using fas::fail_cuda;

fas_status create_plan(const fas::Layout& layout, const Kernel* kernel, const PlanLayout& schedule_layout,
                       int first_q_row, const fas::KvCache& kv, const fas::DeviceProps& device,
                       std::unique_ptr<Plan>* out) {
    std::unique_ptr<Plan> plan(new Plan());
    // Layout limits were checked by the caller: what can fail here is CUDA itself (allocation,
    // the upload).
    std::string message;
    const cudaError_t error = schedule_create(schedule_layout, &plan->schedule, &message);
    if (error != cudaSuccess) return fail_cuda(error, message);
    plan->kernel = kernel;
    plan->first_q_row = first_q_row;
    plan->total_q = layout.total_q;
    plan->num_heads_q = layout.num_heads_q;
    plan->sm_count = device.sm_count;
    RaggedArgs& ragged = plan->args;
    ragged.q_row_stride = layout.q_row_stride;
    ragged.k_row_stride = layout.k_row_stride;
    ragged.v_row_stride = layout.v_row_stride;
    ragged.out_row_stride = layout.out_row_stride;
    ragged.nnz_qo = layout.total_q;
    ragged.nnz_kv = layout.total_k;
    ragged.num_qo_heads = layout.num_heads_q;
    ragged.num_kv_heads = layout.num_heads_k;
    ragged.head_dim = layout.head_dim;
    ragged.window_left = layout.window_left;
    ragged.window_right = schedule_layout.packed ? 0 : schedule_layout.window_right;
    ragged.softcap = layout.softcap;
    ragged.softmax_scale = layout.softmax_scale;
    ragged.device = device.index;
    if (reads_pages(kernel->kind)) {
        ragged.page_stride = kv.k_page_stride;
        ragged.page_size = kv.page_size;
        plan->total_pages = static_cast<int>(kv.total_pages);  // at most INT32_MAX (read_kv_cache)
    }
    schedule_fill_args(plan->schedule, &ragged);
    *out = std::move(plan);
    return FAS_SUCCESS;
}

std::string paged_strides_unsupported_reason(const fas::Layout& layout, int64_t k_page_stride, int64_t v_page_stride) {
    if (layout.k_row_stride == layout.v_row_stride && k_page_stride == v_page_stride) return std::string();
    return concat("the SM90 paged kernels need K and V with equal strides (row ", layout.k_row_stride, " vs ",
                  layout.v_row_stride, ", page ", k_page_stride, " vs ", v_page_stride, ")");
}

fas_status run_plan(const Plan& plan, const RunTensors& t, cudaStream_t stream) {
    for (const float* descale : {t.q_descale, t.k_descale, t.v_descale}) {
        if (!fas::is_aligned(descale, sizeof(float))) {
            return fail(FAS_ERROR_INVALID_ARGUMENT, "q_descale / k_descale / v_descale must be 4-byte aligned");
        }
    }
    RaggedArgs ragged = plan.args;
    if (reads_pages(plan.kernel->kind)) {
        if (const fas_status status = fas::check_page_indices(t.page_indices, plan.total_pages); status != FAS_SUCCESS) {
            return status;
        }
        ragged.page_indices = t.page_indices;
    }
    ragged.q = t.q;
    ragged.k = t.k;
    ragged.v = t.v;
    ragged.out = t.out;
    ragged.lse = t.softmax_lse;
    ragged.q_descale = t.q_descale;
    ragged.k_descale = t.k_descale;
    ragged.v_descale = t.v_descale;
    ragged.sinks = t.sinks;
    cudaError_t error = schedule_prepare_run(plan.schedule, stream);
    if (error != cudaSuccess) return fail_cuda(error, "waiting for the SM90 schedule upload (cudaStreamWaitEvent)");
    error = plan.kernel->launch(ragged, stream);
    if (error == cudaSuccess) error = cudaGetLastError();
    if (error != cudaSuccess) return fail_cuda(error, "SM90 kernel launch");
    if (t.softmax_lse == nullptr) return FAS_SUCCESS;
    // The kernel writes log2(sum exp); the API promises the natural logarithm.
    const int64_t first = static_cast<int64_t>(plan.first_q_row) * plan.num_heads_q;
    const int64_t count = static_cast<int64_t>(plan.total_q) * plan.num_heads_q - first;
    error = fas::convert_lse_log2_to_ln(t.softmax_lse + first, count, plan.sm_count, stream);
    if (error != cudaSuccess) return fail_cuda(error, "LSE conversion kernel launch");
    return FAS_SUCCESS;
}

fas_status retire_plan(Plan* plan, cudaStream_t stream) {
    const cudaError_t error = schedule_retire(plan->schedule, stream);
    if (error != cudaSuccess) return fail_cuda(error, "ordering the SM90 schedule's release after the stream's work");
    plan->schedule = nullptr;  // retired: the stream hands it back to the cache
    return FAS_SUCCESS;
}

}  // namespace fas_sm90
