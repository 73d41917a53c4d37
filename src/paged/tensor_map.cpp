// Tensor maps of KV caches for the stream decode shape (tensor_map.h).
#include "paged/tensor_map.h"

#include <cuda_runtime_api.h>

#include <mutex>

#include "core/status.h"

namespace fas_paged {

namespace {

using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                 const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                 CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
using ReplaceAddress = CUresult (*)(CUtensorMap*, void*);

struct DriverCalls {
    EncodeTiled encode = nullptr;
    ReplaceAddress replace = nullptr;
};

void* entry_point(const char* name) {
    void* function = nullptr;
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
#if CUDART_VERSION >= 12050
    const cudaError_t error = cudaGetDriverEntryPointByVersion(name, &function, 12000, cudaEnableDefault, &found);
#else
    const cudaError_t error = cudaGetDriverEntryPoint(name, &function, cudaEnableDefault, &found);
#endif
    return error == cudaSuccess && found == cudaDriverEntryPointSuccess ? function : nullptr;
}

const DriverCalls& driver() {
    static DriverCalls calls;
    static std::once_flag once;
    std::call_once(once, [] {
        calls.encode = reinterpret_cast<EncodeTiled>(entry_point("cuTensorMapEncodeTiled"));
        calls.replace = reinterpret_cast<ReplaceAddress>(entry_point("cuTensorMapReplaceAddress"));
    });
    return calls;
}

}  // namespace

bool encode_cache_map(const CacheGeometry& g, CUtensorMap* map, std::string* why) {
    const DriverCalls& calls = driver();
    if (calls.encode == nullptr || calls.replace == nullptr) {
        *why = "the driver has no tensor-map calls (cuTensorMapEncodeTiled)";
        return false;
    }
    const int64_t row_bytes = static_cast<int64_t>(g.head_dim) * g.element_bytes;
    const int64_t segment_bytes = row_bytes >= 128 ? 128 : row_bytes;
    if (segment_bytes != 128 && segment_bytes != 64) {
        *why = fas::concat("a KV head's row is ", row_bytes, " bytes; the TMA copies take rows of 64 or n x 128");
        return false;
    }
    const int64_t segments = row_bytes / segment_bytes;  // per KV head
    const cuuint64_t dims[4] = {static_cast<cuuint64_t>(segment_bytes / g.element_bytes),
                                static_cast<cuuint64_t>(g.num_heads_k * segments), static_cast<cuuint64_t>(g.rows),
                                static_cast<cuuint64_t>(g.pages)};
    const cuuint64_t strides[3] = {static_cast<cuuint64_t>(segment_bytes),
                                   static_cast<cuuint64_t>(g.row_stride * g.element_bytes),
                                   static_cast<cuuint64_t>(g.page_stride * g.element_bytes)};
    const cuuint32_t box[4] = {static_cast<cuuint32_t>(dims[0]), 1, static_cast<cuuint32_t>(g.box_rows), 1};
    const cuuint32_t element_strides[4] = {1, 1, 1, 1};
    const CUresult result = calls.encode(
        map, g.element_bytes == 2 ? CU_TENSOR_MAP_DATA_TYPE_UINT16 : CU_TENSOR_MAP_DATA_TYPE_UINT8, 4,
        reinterpret_cast<void*>(uintptr_t{4096}), dims, strides, box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
        segment_bytes == 128 ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_64B, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
        CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (result != CUDA_SUCCESS) {
        *why = fas::concat("cuTensorMapEncodeTiled refused the cache geometry (error ", static_cast<int>(result),
                           "; row stride ", g.row_stride, ", page stride ", g.page_stride, " elements)");
        return false;
    }
    return true;
}

bool replace_address(CUtensorMap* map, const void* cache, std::string* why) {
    const CUresult result = driver().replace(map, const_cast<void*>(cache));
    if (result != CUDA_SUCCESS) {
        *why = fas::concat("cuTensorMapReplaceAddress failed (error ", static_cast<int>(result), ")");
        return false;
    }
    return true;
}

// Rows per TMA copy of the stream shape (paged.h), so that no copy crosses a page; 0 when the
// pages take none.
int stream_box_rows(bool contiguous, int page_size) {
    if (contiguous || page_size % kStreamBoxRows == 0) return kStreamBoxRows;
    return page_size % kMinStreamBox == 0 ? kMinStreamBox : 0;
}

// The stream shape's tensor maps of a plan's caches (addresses come with each run); false with
// *why when the TMA engine cannot address them.
bool stream_maps(const fas::Layout& layout, const Kernel* kernel, const PlanRequest& request, int box_rows,
                 LaunchArgs* a, std::string* why) {
    const bool flat = request.cu_seqlens_k != nullptr;
    const int64_t rows = flat ? request.cu_seqlens_k[request.batch_size] : request.page_size;
    CacheGeometry g{kernel->kv_dtype == FAS_DTYPE_E4M3 ? 1 : 2, layout.head_dim, layout.num_heads_k,
                    std::max<int64_t>(rows, 1), flat ? 1 : request.num_pages, layout.k_row_stride,
                    request.k_page_stride, box_rows};
    if (!encode_cache_map(g, &a->k_map, why)) return false;
    g.row_stride = layout.v_row_stride;
    g.page_stride = request.v_page_stride;
    if (!encode_cache_map(g, &a->v_map, why)) return false;
    a->tma_flat = flat;
    a->box_shift = __builtin_ctz(static_cast<unsigned>(box_rows));
    return true;
}

}  // namespace fas_paged
