// Validation of a call's layout and of the tensors of each run.
#include "core/layout.h"

#include <cuda_runtime_api.h>

#include <climits>
#include <cmath>

#include "core/status.h"

namespace fas {

bool is_aligned(const void* pointer, size_t alignment) {
    return reinterpret_cast<uintptr_t>(pointer) % alignment == 0;
}

const char* dtype_name(fas_dtype dtype) {
    return dtype == FAS_DTYPE_BF16 ? "bf16" : dtype == FAS_DTYPE_E4M3 ? "e4m3" : "fp16";
}

bool is_16bit_dtype(int dtype) { return dtype == FAS_DTYPE_FP16 || dtype == FAS_DTYPE_BF16; }

fas_status fail_bad_dtype(int dtype) {
    if (dtype == FAS_DTYPE_E4M3) {
        return fail(FAS_ERROR_INVALID_ARGUMENT,
                    "dtype FAS_DTYPE_E4M3 runs only through the plan API (fas_plan_create with "
                    "fas_plan_args.out_dtype), on the SM90 family; fas_fwd takes FAS_DTYPE_FP16 or FAS_DTYPE_BF16");
    }
    return fail(FAS_ERROR_INVALID_ARGUMENT,
                concat("dtype ", dtype, " is not a fas_dtype; use FAS_DTYPE_FP16, FAS_DTYPE_BF16 or (plans) FAS_DTYPE_E4M3"));
}

fas_status validate_head_dim(int head_dim) {
    if (head_dim < 8 || head_dim > kMaxHeadDim || head_dim % 8 != 0) {
        return fail(FAS_ERROR_INVALID_ARGUMENT,
                    concat("head_dim ", head_dim, " is not supported: FA2 needs a multiple of 8 in [8, ",
                           kMaxHeadDim, "]; pad the head dimension with zeros up to a multiple of 8"));
    }
    return FAS_SUCCESS;
}

fas_status resolve_layout(Layout* layout) {
    Layout& l = *layout;
    if (l.batch_size <= 0 || l.batch_size > kMaxGridDimYZ) {
        return fail(FAS_ERROR_INVALID_ARGUMENT,
                    concat("batch_size ", l.batch_size, " is out of range; it must be in [1, ", kMaxGridDimYZ,
                           "] (CUDA grid limit); split larger batches into several calls"));
    }
    if (l.max_seqlen_q <= 0 || l.max_seqlen_k <= 0) {
        return fail(FAS_ERROR_INVALID_ARGUMENT,
                    concat("max_seqlen_q (", l.max_seqlen_q, ") and max_seqlen_k (", l.max_seqlen_k,
                           ") must be > 0", l.varlen ? " (upper bounds of the sequence lengths)" : ""));
    }
    if (l.num_heads_q <= 0 || l.num_heads_k <= 0 || l.num_heads_q > kMaxGridDimYZ) {
        return fail(FAS_ERROR_INVALID_ARGUMENT,
                    concat("num_heads_q (", l.num_heads_q, ") and num_heads_k (", l.num_heads_k,
                           ") must be > 0 and num_heads_q <= ", kMaxGridDimYZ));
    }
    if (l.num_heads_q % l.num_heads_k != 0) {
        return fail(FAS_ERROR_INVALID_ARGUMENT,
                    concat("num_heads_q (", l.num_heads_q, ") must be a multiple of num_heads_k (", l.num_heads_k,
                           ") for GQA/MQA"));
    }
    if (const fas_status status = validate_head_dim(l.head_dim); status != FAS_SUCCESS) return status;

    const struct {
        int64_t* stride;
        int num_heads;
        const char* name;
    } strides[] = {
        {&l.q_row_stride, l.num_heads_q, "q_row_stride"},
        {&l.k_row_stride, l.num_heads_k, "k_row_stride"},
        {&l.v_row_stride, l.num_heads_k, "v_row_stride"},
        {&l.out_row_stride, l.num_heads_q, "out_row_stride"},
    };
    for (const auto& entry : strides) {
        const fas_status status =
            resolve_row_stride(entry.stride, static_cast<int64_t>(entry.num_heads) * l.head_dim, entry.name);
        if (status != FAS_SUCCESS) return status;
    }

    if (!std::isfinite(l.softmax_scale) || l.softmax_scale < 0.f) {
        return fail(FAS_ERROR_INVALID_ARGUMENT,
                    concat("softmax_scale ", l.softmax_scale, " is invalid; pass a finite value > 0, or 0 for "
                           "1/sqrt(head_dim)"));
    }
    if (l.softmax_scale == 0.f) l.softmax_scale = 1.f / std::sqrt(static_cast<float>(l.head_dim));

    // FA2 indexes the LSE and sizes the combine grid with 32-bit ints.
    const int64_t padded_q_rows = static_cast<int64_t>(l.batch_size) * l.max_seqlen_q;
    if (padded_q_rows * l.num_heads_q > INT_MAX) {
        return fail(FAS_ERROR_INVALID_ARGUMENT,
                    concat("batch_size * max_seqlen_q * num_heads_q = ", padded_q_rows * l.num_heads_q,
                           " exceeds the 32-bit indexing of FA2 (", INT_MAX, "); split the call"));
    }
    if (l.varlen && static_cast<int64_t>(l.total_q) * l.num_heads_q > INT_MAX) {
        return fail(FAS_ERROR_INVALID_ARGUMENT,
                    concat("total_q * num_heads_q = ", static_cast<int64_t>(l.total_q) * l.num_heads_q,
                           " exceeds the 32-bit indexing of FA2's LSE (", INT_MAX, "); split the call"));
    }
    return FAS_SUCCESS;
}

fas_status resolve_row_stride(int64_t* stride, int64_t row_elements, const char* name) {
    if (*stride == 0) *stride = row_elements;
    if (*stride < row_elements || *stride % 8 != 0) {
        return fail(FAS_ERROR_INVALID_ARGUMENT,
                    concat(name, " is ", *stride, " elements; it must be 0 (contiguous) or a multiple "
                           "of 8 that is >= num_heads * head_dim = ", row_elements));
    }
    return FAS_SUCCESS;
}

size_t element_bytes(fas_dtype dtype) { return dtype == FAS_DTYPE_E4M3 ? 1 : 2; }

Extent tensor_extent(const void* base, int64_t rows, int64_t stride, int64_t width, size_t element, const char* name) {
    const uintptr_t begin = reinterpret_cast<uintptr_t>(base);
    const uintptr_t bytes = static_cast<uintptr_t>(((rows - 1) * stride + width) * static_cast<int64_t>(element));
    return {begin, begin + bytes, static_cast<uintptr_t>(stride * element), static_cast<uintptr_t>(width * element), name};
}

bool overlaps(const Extent& a, const Extent& b) {
    if (a.begin >= b.end || b.begin >= a.end) return false;
    if (a.stride != b.stride || a.stride == 0) return true;
    const Extent& first = a.begin <= b.begin ? a : b;
    const Extent& second = a.begin <= b.begin ? b : a;
    const uintptr_t offset = (second.begin - first.begin) % first.stride;
    return !(offset >= first.width && offset + second.width <= first.stride);
}

fas_status check_tensors(const Layout& layout, const void* q, const void* k, const void* v, const void* out,
                         const float* softmax_lse) noexcept {
    const struct {
        const void* pointer;
        const char* name;
    } tensors[] = {{q, "q"}, {k, "k"}, {v, "v"}, {out, "out"}};
    for (const auto& tensor : tensors) {
        if (tensor.pointer == nullptr) {
            return fail(FAS_ERROR_INVALID_ARGUMENT, concat(tensor.name, " is NULL; pass a device pointer"));
        }
        if (!is_aligned(tensor.pointer, 16)) {
            return fail(FAS_ERROR_INVALID_ARGUMENT,
                        concat(tensor.name, " (", tensor.pointer, ") is not 16-byte aligned; the kernels load rows "
                               "with 16-byte accesses, so pass an aligned pointer (cudaMalloc returns 256-byte "
                               "aligned memory; offsets must be multiples of 8 elements)"));
        }
    }
    if (softmax_lse != nullptr && !is_aligned(softmax_lse, sizeof(float))) {
        return fail(FAS_ERROR_INVALID_ARGUMENT, "softmax_lse is not 4-byte aligned; pass a float-aligned device pointer");
    }
    // Rows the kernels address from each base pointer: varlen fas_fwd cannot see the device
    // offsets, so it checks the rows it knows of (total_q, else the longest sequence).
    const int64_t q_rows = !layout.varlen ? static_cast<int64_t>(layout.batch_size) * layout.max_seqlen_q
                           : layout.total_q > 0 ? layout.total_q : layout.max_seqlen_q;
    const int64_t k_rows = !layout.varlen ? static_cast<int64_t>(layout.batch_size) * layout.max_seqlen_k
                           : layout.total_k > 0 ? layout.total_k : layout.max_seqlen_k;
    const int64_t q_width = static_cast<int64_t>(layout.num_heads_q) * layout.head_dim;
    const int64_t k_width = static_cast<int64_t>(layout.num_heads_k) * layout.head_dim;
    const size_t in_bytes = element_bytes(layout.dtype);
    const Extent out_extent =
        tensor_extent(out, q_rows, layout.out_row_stride, q_width, element_bytes(layout.out_dtype), "out");
    // A paged cache is one span (pages may be strided apart and interleave with the other cache).
    const auto kv_extent = [&](const void* base, int64_t span, int64_t stride, const char* name) {
        const size_t bytes = layout.kv_dtype == FAS_DTYPE_E4M3 ? 1 : in_bytes;
        return span > 0 ? tensor_extent(base, 1, span, span, bytes, name)
                        : tensor_extent(base, k_rows, stride, k_width, bytes, name);
    };
    const Extent inputs[] = {
        tensor_extent(q, q_rows, layout.q_row_stride, q_width, in_bytes, "q"),
        kv_extent(k, layout.k_span_elements, layout.k_row_stride, "k"),
        kv_extent(v, layout.v_span_elements, layout.v_row_stride, "v"),
    };
    for (const Extent& input : inputs) {
        if (overlaps(out_extent, input)) {
            return fail(FAS_ERROR_INVALID_ARGUMENT,
                        concat("out (bytes ", reinterpret_cast<const void*>(out_extent.begin), " + ",
                               out_extent.end - out_extent.begin, ") overlaps ", input.name, " (bytes ",
                               reinterpret_cast<const void*>(input.begin), " + ", input.end - input.begin,
                               "); the kernels read ", input.name, " while they write out, so pass an out buffer "
                               "that shares no memory with q, k and v"));
        }
    }
    return FAS_SUCCESS;
}

fas_status check_host_array(const int32_t* values, const char* name, const char* contents) {
    if (values == nullptr) {
        return fail(FAS_ERROR_INVALID_ARGUMENT, concat(name, " is NULL; pass a HOST array of ", contents));
    }
    if (!is_aligned(values, sizeof(int32_t))) {
        return fail(FAS_ERROR_INVALID_ARGUMENT, concat(name, " is not 4-byte aligned"));
    }
    cudaPointerAttributes attributes{};
    if (cudaPointerGetAttributes(&attributes, values) == cudaSuccess) {
        if (attributes.type == cudaMemoryTypeDevice) {
            return fail(FAS_ERROR_INVALID_ARGUMENT,
                        concat(name, " is a device pointer; fas_plan_create reads it on the host: pass a host copy "
                                     "(the plan keeps its own device copy of what it needs)"));
        }
    } else {
        cudaGetLastError();  // an unknown pointer is taken as host memory
    }
    return FAS_SUCCESS;
}

fas_status check_host_offsets(const int32_t* offsets, int batch_size, const char* name) {
    if (const fas_status status = check_host_array(offsets, name, "batch_size+1 int32 offsets"); status != FAS_SUCCESS) {
        return status;
    }
    if (offsets[0] < 0) {
        return fail(FAS_ERROR_INVALID_ARGUMENT, concat(name, "[0] is ", offsets[0], "; offsets must be >= 0"));
    }
    for (int i = 0; i < batch_size; ++i) {
        if (offsets[i + 1] < offsets[i]) {
            return fail(FAS_ERROR_INVALID_ARGUMENT,
                        concat(name, " decreases at index ", i + 1, " (", offsets[i], " then ", offsets[i + 1],
                               "); offsets must be non-decreasing cumulative sequence lengths"));
        }
    }
    return FAS_SUCCESS;
}

fas_status check_device_pointer(const void* pointer, size_t alignment, const char* name, const char* what) {
    if (pointer == nullptr) return fail(FAS_ERROR_INVALID_ARGUMENT, concat(name, " is NULL; pass the DEVICE ", what));
    if (!is_aligned(pointer, alignment)) {
        return fail(FAS_ERROR_INVALID_ARGUMENT, concat(name, " is not ", alignment, "-byte aligned"));
    }
    cudaPointerAttributes attributes{};
    if (cudaPointerGetAttributes(&attributes, pointer) != cudaSuccess) {
        cudaGetLastError();
        return FAS_SUCCESS;  // not known to the runtime: left to the launch
    }
    if (attributes.type == cudaMemoryTypeHost || attributes.type == cudaMemoryTypeUnregistered) {
        return fail(FAS_ERROR_INVALID_ARGUMENT, concat(name, " is host memory; pass the DEVICE ", what));
    }
    return FAS_SUCCESS;
}

}  // namespace fas
