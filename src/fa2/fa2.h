// The FlashAttention-2 family as the API sees it, free of FA2 and CUTLASS types: the kernels
// this build holds, how a call is planned onto them (kernel, split count, scratch) and the
// launch. Only launch.cu includes FA2's headers.
#ifndef FAS_FA2_FA2_H
#define FAS_FA2_FA2_H

#include "flash_attn_standalone.h"

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/layout.h"

namespace fas_fa2 {

// The split-KV kernel's tiles (split_launch.cuh launches it, plan.cpp counts its key blocks):
// 64 query rows per CTA, and keys per block by head dim, as FA2 tiles it.
constexpr int kSplitBlockM = 64;
constexpr int split_block_n(int head_dim) { return head_dim <= 64 ? 256 : head_dim <= 128 ? 128 : 64; }

struct Kernel {
    fas_dtype dtype;
    int head_dim;
    bool causal;
    bool split_kv;
    const char* family;  // fas_kernel_info.family (its build family's info_family, kernel_registry.inc)
};

// The FA2 kernels of this build, in registry order (launch.cu).
int num_kernels();
const Kernel& kernel(int index);

// The smallest plain kernel that serves head_dim (it masks extra columns), or NULL.
const Kernel* find_plain_kernel(fas_dtype dtype, int head_dim, bool causal);
// Built head dims of the plain kernels, for messages ("none" when there are none).
std::string built_head_dims(fas_dtype dtype, bool causal);
// find_plain_kernel, or FAS_ERROR_NOT_BUILT with a message naming what is built.
fas_status select_plain_kernel(fas_dtype dtype, int head_dim, bool causal, const Kernel** kernel);

struct LaunchPlan {
    const Kernel* kernel;  // the kernel that runs: plain, or split-KV when num_splits > 1
    int num_splits;
    int lse_rows;          // head stride of an unpadded (varlen) LSE
    bool unpadded_lse;     // LSE indexed by absolute row [heads, lse_rows], else [batch, heads, max_seqlen_q]
    // Byte offsets into the scratch block; SIZE_MAX = not needed.
    size_t lse_scratch_offset;
    size_t lse_accum_offset;
    size_t out_accum_offset;
    size_t scratch_bytes;
};

// fas_fwd's plan: the split-KV kernel when the batch layout leaves the GPU idle, and the
// scratch: the LSE when the caller asks for none (lse_given false), the split accumulators.
void plan_launch(const fas::Layout& layout, bool lse_given, const Kernel* plain_kernel, int sm_count,
                 LaunchPlan* plan);

// The tensors of one run, in the layout's shapes.
struct Tensors {
    const void* q;
    const void* k;
    const void* v;
    void* out;
    float* softmax_lse;  // NULL: the kernel writes the LSE into the scratch
    const int32_t* cu_seqlens_q;  // device; NULL in the batch layout
    const int32_t* cu_seqlens_k;
};

// Enqueues the planned kernel(s) on stream. On failure returns the CUDA error and sets *message.
cudaError_t launch(const fas::Layout& layout, const Tensors& tensors, const LaunchPlan& plan, char* scratch,
                   cudaStream_t stream, std::string* message);

}  // namespace fas_fa2

#endif  // FAS_FA2_FA2_H
