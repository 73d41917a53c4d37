// The SM90 (FA3-class, FlashInfer-derived) prefill family as the API sees it, free of CUTLASS and
// FlashInfer types: the kernels this build holds (varlen K/V, and paged K/V for chunked prefill
// over a paged cache), whether one can serve a plan, and its plans (the work schedule, the
// launch, the LSE conversion).
#ifndef FAS_SM90_SM90_H
#define FAS_SM90_SM90_H

#include "flash_attn_standalone.h"

#include <cuda_runtime_api.h>

#include <memory>
#include <string>

#include "core/device.h"
#include "core/kv_cache.h"
#include "core/layout.h"
#include "sm90/ragged_args.h"
#include "sm90/schedule.h"

namespace fas_sm90 {

// What a kernel serves beyond plain attention over contiguous K and V. A plan looks for kernels of
// one kind only (plan.cpp), so each kind's kernels serve exactly the plans of that kind.
enum class Kind : unsigned char {
    kPlain,         // launch_ragged: varlen; 16-bit ones also take a left window, FP8 ones none
    kSoftcap,       // launch_ragged_softcap (16-bit), launch_ragged_fp8_softcap (FP8, window or not):
                    // scores capped; the other kinds take softcap 0 only
    kPacked,        // launch_ragged_packed: short sequences share query tiles (sm90/packed_args.h);
                    // built non-causal, it serves causal and windowed packed plans through its row table
    kPaged,         // launch_paged_ragged: K and V from a paged cache
    kPagedSoftcap,  // launch_paged_ragged_softcap: the same with a softcap
    kFp8Window,     // launch_ragged_fp8_window: FP8 plans with a left window and no softcap
};

constexpr bool reads_pages(Kind kind) { return kind == Kind::kPaged || kind == Kind::kPagedSoftcap; }

struct Kernel {
    fas_dtype dtype;      // of q, k, v
    fas_dtype out_dtype;  // of out: dtype, or fp16/bf16 for e4m3
    int head_dim;
    bool causal;
    Kind kind;
    const char* family;  // fas_kernel_info.family (its build family's info_family, kernel_registry.inc)
    RaggedLaunchFn launch;
};

// The SM90 kernels of this build, in registry order (registry.cpp).
int num_kernels();
const Kernel& kernel(int index);

// The kernel of `kind` that serves (dtype, out_dtype, head_dim, causal), or NULL: one of exactly
// head_dim, else, for varlen kinds, the narrowest built head dim above it (round-up: TMA
// zero-fills the missing columns, the epilogue writes only the real ones; FP8 kernels up to
// kFp8RoundUpMaxHeadDim, for multiples of 16). out_dtype < 0: any output dtype (capability
// queries). Packed kernels serve causal and non-causal plans.
bool rounds_up(fas_dtype dtype, Kind kind, int head_dim, int kernel_head_dim);
const Kernel* find_kernel(fas_dtype dtype, int out_dtype, int head_dim, bool causal, Kind kind = Kind::kPlain);

// Empty if an SM90 kernel of `kind` can serve (dtype, out_dtype, head_dim, causal) on this device,
// else why not.
std::string kernel_unavailable_reason(fas_dtype dtype, int out_dtype, int head_dim, bool causal,
                                      const fas::DeviceProps& device, Kind kind = Kind::kPlain);

// Query rows per work tile of a kernel (tiles.h): what fas_plan_info.query_tile_rows reports.
int query_tile_rows(const Kernel& kernel);

// A plan of the plan API on SM90: the schedule (device memory from a per-device cache) and the
// launch arguments; a run fills in the tensors.
struct Plan {
    Schedule* schedule = nullptr;
    const Kernel* kernel = nullptr;
    RaggedArgs args{};
    int first_q_row = 0;  // cu_seqlens_q[0]: the LSE rows before it are not written
    int total_q = 0;
    int num_heads_q = 0;
    int sm_count = 0;
    int total_pages = 0;  // paged KV: entries of the run's page_indices

    Plan() = default;
    Plan(const Plan&) = delete;
    Plan& operator=(const Plan&) = delete;
    ~Plan() { schedule_destroy(schedule); }
};

// Layout limits are checked by the caller (layout_unsupported_reason). Paged kernels read the
// cache's page stride (K's and V's are equal: paged_strides_unsupported_reason) and page count.
fas_status create_plan(const fas::Layout& layout, const Kernel* kernel, const PlanLayout& schedule_layout,
                       int first_q_row, const fas::KvCache& kv, const fas::DeviceProps& device,
                       std::unique_ptr<Plan>* out);

// Empty if the paged kernels can read caches with these strides (elements), else why not: their
// page gather computes one offset per key and uses it for K and V.
std::string paged_strides_unsupported_reason(const fas::Layout& layout, int64_t k_page_stride, int64_t v_page_stride);

// Tensors and device arrays of one run; descales are read by the FP8 kernels only,
// page_indices by the paged ones.
struct RunTensors {
    const void* q;
    const void* k;
    const void* v;
    void* out;
    float* softmax_lse;
    const float* q_descale;
    const float* k_descale;
    const float* v_descale;
    const int32_t* page_indices;
    const float* sinks;  // plans made with sinks (checked by the API), else NULL
};

// The LSE, if asked for, is converted to the natural logarithm the API promises.
fas_status run_plan(const Plan& plan, const RunTensors& tensors, cudaStream_t stream);

// Stream-ordered release of the plan's schedule (schedule_retire); the plan keeps none after.
fas_status retire_plan(Plan* plan, cudaStream_t stream);

}  // namespace fas_sm90

#endif  // FAS_SM90_SM90_H
