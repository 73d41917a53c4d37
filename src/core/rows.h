// Copies of a tensor's rows, packed: fas_fwd's key split (api/fwd_split.h) gives each chunk of a
// sequence its own copy of the sequence's query rows, since the SM90 kernels read q and write out
// at the same row offset.
#ifndef FAS_CORE_ROWS_H
#define FAS_CORE_ROWS_H

#include <cuda_runtime_api.h>

#include <cstdint>

namespace fas {

// Enqueues `copies` copies of `rows` rows of row_bytes bytes from src (rows src_stride_bytes
// apart) into dst: copy c's row r at dst + (c * rows + r) * row_bytes. src, dst, row_bytes and
// src_stride_bytes are multiples of 16 bytes (the caller checks).
cudaError_t replicate_rows(const void* src, int64_t src_stride_bytes, int64_t rows, int64_t row_bytes, int copies,
                           void* dst, int sm_count, cudaStream_t stream);

}  // namespace fas

#endif  // FAS_CORE_ROWS_H
