// The stream decode shape's view of a KV cache (decode_tma.cuh): a TMA tensor map per cache,
// encoded once per plan with a stand-in address (so that a cache geometry the TMA engine cannot
// describe sends the plan to the cp.async shapes instead of failing a run) and given each run's
// cache address by cuTensorMapReplaceAddress. The driver's entry points come through cudart
// (cudaGetDriverEntryPoint): the library links no libcuda.
//
// Dimensions, innermost first, strides growing outward as the driver asks:
//   0: elements of one 128-byte segment of a row (64 bytes for e4m3 rows of 64)
//   1: segments across the row (num_heads_k x segments per head), a segment apart
//   2: rows of a page (the cache's row stride), or every row of the cache when flat
//   3: pages (page stride), 1 when flat
// A box is (segment, 1, box rows, 1): one segment of box rows, [row][segment bytes] in shared
// memory, swizzled as decode_tma.cuh reads it.
#ifndef FAS_PAGED_TENSOR_MAP_H
#define FAS_PAGED_TENSOR_MAP_H

#include <cuda.h>

#include <cstdint>
#include <string>

#include "paged/paged.h"

namespace fas_paged {

struct CacheGeometry {
    int element_bytes;  // 2 (fp16/bf16) or 1 (e4m3)
    int head_dim;
    int num_heads_k;
    int64_t rows;        // rows of a page, or of the whole cache when flat
    int64_t pages;       // 1 when flat
    int64_t row_stride;  // elements
    int64_t page_stride;
    int box_rows;
};

// Encodes `map` for caches of this geometry (any 16-byte aligned address until replace_address);
// false with *why set when the TMA engine cannot address it.
bool encode_cache_map(const CacheGeometry& geometry, CUtensorMap* map, std::string* why);
// The plan's map with a run's cache address.
bool replace_address(CUtensorMap* map, const void* cache, std::string* why);

// Rows per TMA copy of the stream shape (paged.h), so that no copy crosses a page; 0 when the
// pages take none.
int stream_box_rows(bool contiguous, int page_size);
// The stream shape's tensor maps of a plan's caches (addresses come with each run) into *a; false
// with *why when the TMA engine cannot address them.
bool stream_maps(const fas::Layout& layout, const Kernel* kernel, const PlanRequest& request, int box_rows,
                 LaunchArgs* a, std::string* why);

}  // namespace fas_paged

#endif  // FAS_PAGED_TENSOR_MAP_H
