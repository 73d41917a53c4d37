// The FA2 kernels of this build and their launch: the only code that includes FA2's headers.
// The build-generated kernel_registry.inc lists the instantiations; each is defined in its own
// kernel TU (kernels/fa2_fwd_*.cu): an explicit instantiation of our run_fwd (fwd_launch.cuh) per
// plain kernel, of our run_split (split_launch.cuh) per split-KV kernel.
#include "fa2/fa2.h"

#include <cutlass/numeric_types.h>

#include "fas_cuda_error.h"
#include "flash.h"
#include "namespace_config.h"

#include <cstddef>

// This build's FA2 kernels, declared as generated with their TUs (kernelgen.registry_text).
#define FAS_DECLARE_FA2
#include "kernel_registry.inc"

namespace fas_fa2 {

namespace {

using Flash_fwd_params = FLASH_NAMESPACE::Flash_fwd_params;
using LaunchFn = void (*)(Flash_fwd_params&, cudaStream_t);

struct Entry {
    Kernel kernel;
    LaunchFn launch;
};

// Ends with a sentinel (launch == nullptr) so that a build without FA2 kernels still has a
// valid array; the count excludes it.
#define FAS_FA2_FWD(ElementType, DtypeEnum, HeadDim, IsCausal, InfoFamily) \
    {{DtypeEnum, HeadDim, IsCausal, false, InfoFamily}, &fas_fa2::run_fwd<ElementType, HeadDim, IsCausal>},
#define FAS_FA2_FWD_SPLIT(ElementType, DtypeEnum, HeadDim, IsCausal, InfoFamily) \
    {{DtypeEnum, HeadDim, IsCausal, true, InfoFamily}, &fas_fa2::run_split<ElementType, HeadDim, IsCausal>},
const Entry kTable[] = {
#include "kernel_registry.inc"
    {{FAS_DTYPE_FP16, 0, false, false, nullptr}, nullptr},
};
constexpr int kNumKernels = static_cast<int>(sizeof(kTable) / sizeof(kTable[0])) - 1;

constexpr float kLog2e = 1.44269504088896340736f;

int round_up(int value, int multiple) { return (value + multiple - 1) / multiple * multiple; }

// Kernel is Entry's first member, so a Kernel of the table is its Entry.
static_assert(offsetof(Entry, kernel) == 0, "Kernel must be the first member of Entry");
LaunchFn launch_function(const Kernel* kernel) {
    const Entry* entry = reinterpret_cast<const Entry*>(kernel);
    return entry >= kTable && entry < kTable + kNumKernels ? entry->launch : nullptr;
}

Flash_fwd_params make_params(const fas::Layout& layout, const Tensors& tensors, const LaunchPlan& plan,
                             char* scratch) {
    Flash_fwd_params params = {};
    params.is_bf16 = layout.dtype == FAS_DTYPE_BF16;

    params.q_ptr = const_cast<void*>(tensors.q);
    params.k_ptr = const_cast<void*>(tensors.k);
    params.v_ptr = const_cast<void*>(tensors.v);
    params.o_ptr = tensors.out;
    params.q_row_stride = layout.q_row_stride;
    params.k_row_stride = layout.k_row_stride;
    params.v_row_stride = layout.v_row_stride;
    params.o_row_stride = layout.out_row_stride;
    params.q_head_stride = layout.head_dim;
    params.k_head_stride = layout.head_dim;
    params.v_head_stride = layout.head_dim;
    params.o_head_stride = layout.head_dim;
    if (!layout.varlen) {  // varlen kernels address rows through cu_seqlens instead
        params.q_batch_stride = layout.max_seqlen_q * layout.q_row_stride;
        params.k_batch_stride = layout.max_seqlen_k * layout.k_row_stride;
        params.v_batch_stride = layout.max_seqlen_k * layout.v_row_stride;
        params.o_batch_stride = layout.max_seqlen_q * layout.out_row_stride;
    }
    params.cu_seqlens_q = const_cast<int*>(tensors.cu_seqlens_q);
    params.cu_seqlens_k = const_cast<int*>(tensors.cu_seqlens_k);
    params.is_seqlens_k_cumulative = true;

    params.h = layout.num_heads_q;
    params.h_k = layout.num_heads_k;
    params.h_h_k_ratio = layout.num_heads_q / layout.num_heads_k;
    params.b = layout.batch_size;
    params.seqlen_q = layout.max_seqlen_q;
    params.seqlen_k = layout.max_seqlen_k;
    params.seqlen_q_rounded = round_up(layout.max_seqlen_q, 128);
    params.seqlen_k_rounded = round_up(layout.max_seqlen_k, 128);
    params.d = layout.head_dim;
    params.d_rounded = plan.kernel->head_dim;
    params.total_q = plan.lse_rows;

    params.softmax_lse_ptr = tensors.softmax_lse != nullptr ? static_cast<void*>(tensors.softmax_lse)
                                                            : static_cast<void*>(scratch + plan.lse_scratch_offset);
    params.unpadded_lse = plan.unpadded_lse;
    params.seqlenq_ngroups_swapped = false;

    // FA2's softcap: tanh(score * params.softcap) scaled by scale_softmax (the cap) in the softmax.
    const bool capped = layout.softcap > 0.f;
    params.scale_softmax = capped ? layout.softcap : layout.softmax_scale;
    params.scale_softmax_log2 = params.scale_softmax * kLog2e;
    params.softcap = capped ? layout.softmax_scale / layout.softcap : 0.f;
    // No dropout (p_dropout holds the keep probability) and no ALiBi (alibi_slopes_ptr stays
    // NULL): the kernels are compiled without either (families.py, FLASH_ATTN's defines).
    params.p_dropout = 1.f;
    params.p_dropout_in_uint8_t = 255;
    params.rp_dropout = 1.f;
    params.scale_softmax_rp_dropout = params.scale_softmax;

    // FA2 expresses causal as a window reaching all keys on the left and none on the right; other
    // windows take its local path (non-causal kernels), with "no limit" as the longest sequence.
    const bool local = fas::has_local_window(layout);
    params.is_causal = layout.causal && !local;
    const auto width = [&](int window) { return window < 0 ? layout.max_seqlen_k : window; };
    params.window_size_left = params.is_causal || local ? width(layout.window_left) : -1;
    params.window_size_right = params.is_causal ? 0 : local ? width(layout.window_right) : -1;

    params.num_splits = plan.num_splits;
    if (plan.num_splits > 1) {
        params.softmax_lseaccum_ptr = scratch + plan.lse_accum_offset;
        params.oaccum_ptr = scratch + plan.out_accum_offset;
    }
    return params;
}

}  // namespace

int num_kernels() { return kNumKernels; }

const Kernel& kernel(int index) { return kTable[index].kernel; }

cudaError_t launch(const fas::Layout& layout, const Tensors& tensors, const LaunchPlan& plan, char* scratch,
                   cudaStream_t stream, std::string* message) {
    const LaunchFn function = launch_function(plan.kernel);
    if (function == nullptr) {
        *message = "FA2 launch: the planned kernel is not in this build's registry (internal error)";
        return cudaErrorInvalidDeviceFunction;
    }
    Flash_fwd_params params = make_params(layout, tensors, plan, scratch);
    try {
        // FA2's launch code reports CUDA failures by throwing (the C10 stand-ins).
        function(params, stream);
    } catch (const fas_detail::cuda_error& error) {
        cudaGetLastError();
        *message = std::string("FA2's launch code (") + error.what() + ")";
        return error.code() != cudaSuccess ? error.code() : cudaErrorUnknown;
    }
    const cudaError_t error = cudaGetLastError();
    if (error != cudaSuccess) *message = "FA2 kernel launch";
    return error;
}

}  // namespace fas_fa2
