// FA2 host planning: which kernel serves a call, the split-KV count, the scratch layout, and
// the plan API's FA2 plans (device offsets and an LSE scratch of their own).
#include <algorithm>
#include <climits>
#include <cmath>
#include <vector>

#include "core/status.h"
#include "fa2/fa2.h"
#include "fa2/plan.h"

namespace fas_fa2 {

using fas::concat;
using fas::fail;
using fas::fail_cuda;

namespace {

constexpr int kMaxSplits = 128;    // largest split count FA2's combine kernel handles
constexpr size_t kWorkspaceAlignment = 256;

size_t align_up(size_t value, size_t alignment) { return (value + alignment - 1) / alignment * alignment; }

// Head dims that serve a request must match exactly when the build compiled FA2 without the
// uneven-K code path (then the kernel cannot mask the extra head-dim columns).
bool kernel_serves_head_dim(int kernel_head_dim, int head_dim) {
#if defined(FLASHATTENTION_DISABLE_UNEVEN_K)
    return kernel_head_dim == head_dim;
#else
    return kernel_head_dim >= head_dim;
#endif
}

const Kernel* find_split_kernel(fas_dtype dtype, int kernel_head_dim, bool causal) {
    for (int i = 0; i < num_kernels(); ++i) {
        const Kernel& entry = kernel(i);
        if (entry.split_kv && entry.dtype == dtype && entry.causal == causal && entry.head_dim == kernel_head_dim) {
            return &entry;
        }
    }
    return nullptr;
}

// Split count for the split-KV kernel, chosen for SM occupancy: with few (batch, head, m-block)
// tiles the GPU idles, so the key range is divided among more CTAs. Takes the smallest count
// whose wave efficiency is within 85% of the best, since every split costs extra accumulator
// traffic and a combine pass.
int choose_num_splits(int64_t tiles, int ctas_per_wave, int num_n_blocks) {
    if (static_cast<double>(tiles) >= 0.8 * ctas_per_wave) return 1;
    const int max_splits = std::min({kMaxSplits, ctas_per_wave, num_n_blocks});
    const auto blocks_per_split = [&](int splits) { return (num_n_blocks + splits - 1) / splits; };
    // A count that leaves blocks_per_split unchanged from count - 1 only adds empty splits.
    const auto is_distinct = [&](int splits) {
        return splits == 1 || blocks_per_split(splits) != blocks_per_split(splits - 1);
    };
    const auto efficiency = [&](int splits) {
        const double waves = static_cast<double>(tiles) * splits / ctas_per_wave;
        return waves / std::ceil(waves);
    };
    double best_efficiency = 0.0;
    for (int splits = 1; splits <= max_splits; ++splits) {
        if (is_distinct(splits)) best_efficiency = std::max(best_efficiency, efficiency(splits));
    }
    for (int splits = 1; splits <= max_splits; ++splits) {
        if (is_distinct(splits) && efficiency(splits) >= 0.85 * best_efficiency) return splits;
    }
    return 1;
}

}  // namespace

const Kernel* find_plain_kernel(fas_dtype dtype, int head_dim, bool causal) {
    const Kernel* best = nullptr;
    for (int i = 0; i < num_kernels(); ++i) {
        const Kernel& entry = kernel(i);
        if (entry.split_kv || entry.dtype != dtype || entry.causal != causal ||
            !kernel_serves_head_dim(entry.head_dim, head_dim)) {
            continue;
        }
        if (best == nullptr || entry.head_dim < best->head_dim) best = &entry;
    }
    return best;
}

std::string built_head_dims(fas_dtype dtype, bool causal) {
    std::string list;
    for (int i = 0; i < num_kernels(); ++i) {
        const Kernel& entry = kernel(i);
        if (entry.split_kv || entry.dtype != dtype || entry.causal != causal) continue;
        list += concat(list.empty() ? "" : ", ", entry.head_dim);
    }
    return list.empty() ? "none" : list;
}

fas_status select_plain_kernel(fas_dtype dtype, int head_dim, bool causal, const Kernel** selected) {
    *selected = find_plain_kernel(dtype, head_dim, causal);
    if (*selected == nullptr) {
        const char* mask = causal ? " causal" : " non-causal";
        return fail(FAS_ERROR_NOT_BUILT,
                    concat("no ", fas::dtype_name(dtype), mask, " kernel for head_dim ", head_dim, ": this build has ",
                           fas::dtype_name(dtype), mask, " head dims ", built_head_dims(dtype, causal),
                           "; rebuild the library with a kernel of head dim >= ", head_dim,
                           " for this dtype and variant, or pad head_dim to a built one"));
    }
    return FAS_SUCCESS;
}

void plan_launch(const fas::Layout& layout, bool lse_given, const Kernel* plain_kernel, int sm_count,
                 LaunchPlan* plan) {
    plan->kernel = plain_kernel;
    plan->num_splits = 1;
    const Kernel* split_kernel =
        layout.varlen ? nullptr : find_split_kernel(layout.dtype, plain_kernel->head_dim, plain_kernel->causal);
    const int64_t batch_heads = static_cast<int64_t>(layout.batch_size) * layout.num_heads_q;
    // The split kernel puts batch * heads on grid z, and is compiled without windows or softcap
    // (split_launch.cuh: fas_fwd, its only caller, sets neither; plans never split).
    const bool masks = fas::has_local_window(layout) || layout.softcap > 0.f;
    if (split_kernel != nullptr && batch_heads <= fas::kMaxGridDimYZ && !masks) {
        const int block_n = split_block_n(split_kernel->head_dim);
        const int num_n_blocks = (layout.max_seqlen_k + block_n - 1) / block_n;
        const int num_m_blocks = (layout.max_seqlen_q + kSplitBlockM - 1) / kSplitBlockM;
        // Two 128-thread CTAs fit on an SM.
        const int splits = choose_num_splits(batch_heads * num_m_blocks, 2 * sm_count, num_n_blocks);
        if (splits > 1) {
            plan->kernel = split_kernel;
            plan->num_splits = splits;
        }
    }

    // A caller's varlen LSE is [heads, total_q], indexed by the absolute row of q. An LSE the
    // caller did not ask for goes into scratch in the padded [batch, heads, max_seqlen_q]
    // layout, whose rows the kernel indexes from each sequence's start: its size then does not
    // depend on where the (device-side) offsets begin.
    plan->unpadded_lse = layout.varlen && lse_given;
    plan->lse_rows = plan->unpadded_lse ? layout.total_q : layout.batch_size * layout.max_seqlen_q;
    size_t bytes = 0;
    const auto reserve = [&](size_t size) {
        const size_t offset = bytes;
        bytes = align_up(bytes + size, kWorkspaceAlignment);
        return offset;
    };
    plan->lse_scratch_offset = SIZE_MAX;
    plan->lse_accum_offset = SIZE_MAX;
    plan->out_accum_offset = SIZE_MAX;
    if (!lse_given) {
        plan->lse_scratch_offset = reserve(sizeof(float) * layout.num_heads_q * static_cast<size_t>(plan->lse_rows));
    }
    if (plan->num_splits > 1) {
        const size_t accum_rows = static_cast<size_t>(plan->num_splits) * batch_heads * layout.max_seqlen_q;
        plan->lse_accum_offset = reserve(sizeof(float) * accum_rows);
        plan->out_accum_offset = reserve(sizeof(float) * accum_rows * plan->kernel->head_dim);
    }
    plan->scratch_bytes = bytes;
}

Plan::~Plan() {
    if (cu_seqlens_device != nullptr) cudaFree(cu_seqlens_device);
    if (lse_scratch != nullptr) cudaFree(lse_scratch);
}

fas_status create_plan(const fas::Layout& layout, const Kernel* kernel, const int32_t* cu_seqlens_q,
                       const int32_t* cu_seqlens_k, cudaStream_t stream, std::unique_ptr<Plan>* out) {
    std::unique_ptr<Plan> plan(new Plan());
    plan->layout = layout;
    const int batch_size = layout.batch_size;
    const size_t offsets_bytes = 2 * sizeof(int32_t) * static_cast<size_t>(batch_size + 1);
    const size_t lse_bytes = sizeof(float) * static_cast<size_t>(layout.num_heads_q) * layout.total_q;
    cudaError_t error = cudaMalloc(reinterpret_cast<void**>(&plan->cu_seqlens_device), offsets_bytes);
    if (error != cudaSuccess) return fail_cuda(error, concat("cudaMalloc of the plan's offsets (", offsets_bytes, " bytes)"));
    error = cudaMalloc(reinterpret_cast<void**>(&plan->lse_scratch), lse_bytes);
    if (error != cudaSuccess) return fail_cuda(error, concat("cudaMalloc of the plan's LSE scratch (", lse_bytes, " bytes)"));
    std::vector<int32_t> offsets(cu_seqlens_q, cu_seqlens_q + batch_size + 1);
    offsets.insert(offsets.end(), cu_seqlens_k, cu_seqlens_k + batch_size + 1);
    error = cudaMemcpyAsync(plan->cu_seqlens_device, offsets.data(), offsets_bytes, cudaMemcpyHostToDevice, stream);
    if (error != cudaSuccess) return fail_cuda(error, "cudaMemcpyAsync of the plan's offsets");
    error = cudaStreamSynchronize(stream);
    if (error != cudaSuccess) return fail_cuda(error, "cudaStreamSynchronize after the plan's upload");
    plan->device_bytes = offsets_bytes + lse_bytes;
    // The LSE is [heads, total_q] by absolute row, in the caller's buffer or the plan's scratch.
    LaunchPlan& launch = plan->launch;
    launch.kernel = kernel;
    launch.num_splits = 1;
    launch.lse_rows = layout.total_q;
    launch.unpadded_lse = true;
    launch.lse_scratch_offset = 0;
    launch.lse_accum_offset = SIZE_MAX;
    launch.out_accum_offset = SIZE_MAX;
    launch.scratch_bytes = lse_bytes;
    *out = std::move(plan);
    return FAS_SUCCESS;
}

fas_status run_plan(const Plan& plan, const void* q, const void* k, const void* v, void* out, float* softmax_lse,
                    cudaStream_t stream) {
    const int32_t* offsets = plan.cu_seqlens_device;
    const Tensors tensors{q, k, v, out, softmax_lse, offsets, offsets + plan.layout.batch_size + 1};
    std::string message;
    const cudaError_t error = launch(plan.layout, tensors, plan.launch, reinterpret_cast<char*>(plan.lse_scratch),
                                     stream, &message);
    return error == cudaSuccess ? FAS_SUCCESS : fail_cuda(error, message);
}

}  // namespace fas_fa2
