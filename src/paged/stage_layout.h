// Where the decode kernels' shared-memory tiles hold 16-byte chunk `chunk` of row `row` (byte
// offsets), and the rule that lets a thread's ldmatrix addresses be found once per kernel instead
// of at each load. Host-compilable: tests/test_stage_layout.py checks the rule on every layout.
//
// An x4 ldmatrix lane reads row x + R at chunk s + c: x its own row (of the warp's first block),
// c in {0, 1} its own chunk, s an even step and R a multiple of 16 (the block). In every layout
// here a chunk's bits and a row's are disjoint, and an even s changes none of c's, so
//     L(x + R, s + c) == (L(x, c) ^ L(0, s)) + L(R, 0).
// L(x, c) is the thread's part (kept in a register), L(0, s) and L(R, 0) are constants: one LOP3
// a step, no per-load row and swizzle arithmetic
// (docs/design/decode-e4m3.md, "Fragment addresses").
#ifndef FAS_PAGED_STAGE_LAYOUT_H
#define FAS_PAGED_STAGE_LAYOUT_H

#include <cstdint>

#if defined(__CUDACC__)
#define FAS_LAYOUT_FN __host__ __device__ __forceinline__ constexpr
#else
#define FAS_LAYOUT_FN inline constexpr
#endif

namespace fas_paged {
namespace decode {
namespace layout {

// Tiles of rows of HeadDim 16-bit elements (the cp.async shapes' stages, every Q tile): chunks
// XOR the row's low 3 bits, so that ldmatrix's 8 rows hit 8 distinct bank groups.
template <int HeadDim>
FAS_LAYOUT_FN uint32_t rows16(int row, int chunk) {
    return static_cast<uint32_t>(row * HeadDim * 2 + ((chunk ^ (row & 7)) << 4));
}

// Tiles of e4m3 rows (HeadDim bytes) of the cp.async shapes: chunks XOR the row's low 3 bits, or
// at head dim 64 (4 chunks, two rows per 128 bytes) bits 1-2.
template <int HeadDim>
FAS_LAYOUT_FN uint32_t rows8(int row, int chunk) {
    return static_cast<uint32_t>(row * HeadDim + ((HeadDim >= 128 ? chunk ^ (row & 7) : chunk ^ ((row >> 1) & 3)) << 4));
}

// The stream shape's stage tiles of Keys rows: the 128-byte segments of the rows segment-major
// ([segment][row][128 bytes], chunk c of row r at (c ^ (r & 7)) x 16), as tensor-map copies with
// SWIZZLE_128B write them; 64-byte rows (e4m3 at head dim 64) [row][64 bytes], SWIZZLE_64B.
template <int RowBytes, int Keys>
FAS_LAYOUT_FN uint32_t stream(int row, int chunk) {
    static_assert(RowBytes == 64 || RowBytes % 128 == 0, "rows of 64 or a multiple of 128 bytes");
    static_assert((Keys & (Keys - 1)) == 0, "segments a power of two apart (the rule above)");
    if constexpr (RowBytes >= 128) {
        return static_cast<uint32_t>((chunk / 8) * Keys * 128 + row * 128 + (((chunk % 8) ^ (row & 7)) << 4));
    } else {
        return static_cast<uint32_t>(row * 64 + ((chunk ^ ((row >> 1) & 3)) << 4));
    }
}

// The rule's right-hand side: `part` = L(x, c), this thread's part; chunk `step` (even) and the
// 16-row block at `rows` (a multiple of 16).
template <typename Layout>
FAS_LAYOUT_FN uint32_t at(const Layout& layout, uint32_t part, int rows, int step) {
    return (part ^ layout(0, step)) + layout(rows, 0);
}

}  // namespace layout
}  // namespace decode
}  // namespace fas_paged

#undef FAS_LAYOUT_FN

#endif  // FAS_PAGED_STAGE_LAYOUT_H
