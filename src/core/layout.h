// The shape of one attention call, validated once: what fas_fwd and plans have in common.
// fas_fwd fills it from fas_fwd_args, a plan from fas_plan_args plus its host offsets; both
// then check the tensors of a run against it (pointers, alignment, out not aliasing inputs).
#ifndef FAS_CORE_LAYOUT_H
#define FAS_CORE_LAYOUT_H

#include "flash_attn_standalone.h"

#include <cstddef>
#include <cstdint>

namespace fas {

constexpr int kMaxHeadDim = 256;
constexpr int kMaxGridDimYZ = 65535;  // CUDA limit; FA2 puts batch and heads on grid y/z

struct Layout {
    fas_dtype dtype = FAS_DTYPE_FP16;      // of q, k, v
    fas_dtype out_dtype = FAS_DTYPE_FP16;  // of out: dtype, or fp16/bf16 for e4m3 inputs
    fas_dtype kv_dtype = FAS_DTYPE_FP16;   // of k and v when a plan sets it (an e4m3 KV cache), else dtype's size
    bool paged = false;                    // plans: a paged KV cache (FAS_KV_PAGED)
    bool varlen = false;
    int batch_size = 0;
    int max_seqlen_q = 0;  // batch layout: the length; varlen: an upper bound per sequence
    int max_seqlen_k = 0;
    int num_heads_q = 0;
    int num_heads_k = 0;
    int head_dim = 0;
    // Elements between rows; 0 before resolve_layout = contiguous.
    int64_t q_row_stride = 0;
    int64_t k_row_stride = 0;
    int64_t v_row_stride = 0;
    int64_t out_row_stride = 0;
    float softmax_scale = 0.f;  // 0 before resolve_layout = 1/sqrt(head_dim)
    bool causal = false;        // plans: also true for a window whose right side is 0
    // Plans' local window (FlashAttention's window_size), -1 = no limit on that side; both -1
    // without a window. Never above max_seqlen_k (a wider window sees the same keys).
    int window_left = -1;
    int window_right = -1;
    float softcap = 0.f;  // plans: > 0 caps the scores (softcap * tanh(score / softcap))
    bool sinks = false;   // plans: runs pass a sink logit per query head (fas_plan_run_args.sinks)
    // Varlen: rows of q/out and of k/v addressed from the base pointers, 0 = unknown (fas_fwd
    // sees the offsets only on the device). Plans know both from their host offsets.
    int total_q = 0;
    int total_k = 0;
    // Paged KV caches: elements each cache spans from its base pointer (0 = rows as above).
    int64_t k_span_elements = 0;
    int64_t v_span_elements = 0;
};

// A plan over a paged FP8 (e4m3) KV cache, under 16-bit or e4m3 q: the paged family's (an SM90 FP8
// plan over contiguous e4m3 K and V is not one).
inline bool has_fp8_kv_cache(const Layout& layout) { return layout.kv_dtype == FAS_DTYPE_E4M3 && layout.paged; }

// A window that masks keys causal alone would not (a left limit, or a right one beyond the
// diagonal): FA2 runs it through its local path, in its non-causal kernels.
inline bool has_local_window(const Layout& layout) { return layout.window_left >= 0 || layout.window_right > 0; }

// The fields fas_fwd_args and fas_plan_args share, copied as the caller set them.
template <typename Args>
void copy_shared_fields(const Args& args, Layout* layout) {
    layout->batch_size = args.batch_size;
    layout->num_heads_q = args.num_heads_q;
    layout->num_heads_k = args.num_heads_k;
    layout->head_dim = args.head_dim;
    layout->q_row_stride = args.q_row_stride;
    layout->k_row_stride = args.k_row_stride;
    layout->v_row_stride = args.v_row_stride;
    layout->out_row_stride = args.out_row_stride;
    layout->softmax_scale = args.softmax_scale;
    layout->causal = args.causal != 0;
}

bool is_aligned(const void* pointer, size_t alignment);
const char* dtype_name(fas_dtype dtype);
// The 16-bit dtypes: fas_fwd and FA2 take only these, and they are the FP8 output dtypes.
bool is_16bit_dtype(int dtype);
fas_status fail_bad_dtype(int dtype);
fas_status validate_head_dim(int head_dim);

// A row stride in elements: 0 becomes row_elements (contiguous); else a multiple of 8, at least
// one row.
fas_status resolve_row_stride(int64_t* stride, int64_t row_elements, const char* name);

size_t element_bytes(fas_dtype dtype);

// Bytes a tensor's rows span from its base pointer: rows of `width` elements, `stride` apart.
struct Extent {
    uintptr_t begin;
    uintptr_t end;
    uintptr_t stride;  // bytes between rows
    uintptr_t width;   // bytes of one row
    const char* name;
};

Extent tensor_extent(const void* base, int64_t rows, int64_t stride, int64_t width, size_t element, const char* name);

// True when the two tensors share a byte. Rows with one stride that interleave without
// touching (q and out as the two halves of each row of one buffer) share none.
bool overlaps(const Extent& a, const Extent& b);

// Checks every field of *layout (its out_dtype is the one whose rules apply) and fills in the
// default row strides and softmax scale.
fas_status resolve_layout(Layout* layout);

// q, k, v and out of one run: set, 16-byte aligned (both families load rows with 16-byte
// accesses, TMA for SM90), the optional LSE float-aligned, and out sharing no byte with q, k
// or v within the rows the layout addresses (see tensor_extent in layout.cpp).
fas_status check_tensors(const Layout& layout, const void* q, const void* k, const void* v, const void* out,
                         const float* softmax_lse) noexcept;

// A host int32 array a plan reads at creation: present, 4-byte aligned, not device memory.
// `contents` says what it holds, for the message ("batch_size int32 key counts").
fas_status check_host_array(const int32_t* values, const char* name, const char* contents);

// A device array an op reads or writes: present, `alignment`-byte aligned, and not host memory
// where the runtime knows it (unknown pointers are left to the launch). `what` says what it
// holds, for the message ("paged cache").
fas_status check_device_pointer(const void* pointer, size_t alignment, const char* name, const char* what);

// Host offsets of a plan: present, on the host, non-negative and non-decreasing.
fas_status check_host_offsets(const int32_t* offsets, int batch_size, const char* name);

}  // namespace fas

#endif  // FAS_CORE_LAYOUT_H
