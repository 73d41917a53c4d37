// FP8 e4m3 K and V caches in the decode kernel (decode.cuh): q and out stay fp16/bf16. The
// stages hold the cache's bytes as they are (half the bytes of a 16-bit stage per key), and the
// mma fragments are read straight from them and widened in registers: no 16-bit copy of the
// stage, no extra barrier or shared memory.
//
// ldmatrix reads e4m3 rows as pairs of bytes (b16). Without .trans, lane (g, t) of an 8-key x
// 16-dim matrix gets key g's dims 4t..4t+3; the m16n8k16 B operand wants k = 2t, 2t+1 in its
// first register and 2t+8, 2t+9 in its second. So within every 16 dims, the e4m3 kernel's Q tile
// in shared memory holds the dims in the order the K fragments arrive: k = 2t+i holds dim 4t+i,
// k = 2t+8+i dim 4t+2+i (QStaging). A dot product does not care about the order of its terms.
// With .trans, lane (g, t) gets dims 2g and 2g+1 of keys 2t and 2t+1: one byte permute splits
// them into the B operands of two n8 output blocks, one holding the chunk's even dims and one its
// odd dims; the epilogue puts them back in order (store_partial).
#ifndef FAS_PAGED_FP8_KV_CUH
#define FAS_PAGED_FP8_KV_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <type_traits>

#include <flashinfer/mma.cuh>

#include "paged/merge.cuh"
#include "paged/stage_layout.h"

namespace fas_paged {

template <>
struct Element<FAS_DTYPE_E4M3> {
    using type = __nv_fp8_e4m3;
};

namespace decode {
namespace fp8 {

// Two e4m3 values, the low (High false) or high 16 bits of x, as an fp16 pair, exactly: every
// e4m3 value is an fp16 value (the kernel multiplies in fp16 for every q type). Converted from
// the register's half as it is: no shift ahead of the conversion on the chain from ldmatrix to mma.
template <bool High>
__device__ __forceinline__ uint32_t widen_half(uint32_t x) {
    uint32_t out;
    if constexpr (High) {
        asm("{\n .reg .b16 lo, hi;\n mov.b32 {lo, hi}, %1;\n cvt.rn.f16x2.e4m3x2 %0, hi;\n}" : "=r"(out) : "r"(x));
    } else {
        asm("{\n .reg .b16 lo, hi;\n mov.b32 {lo, hi}, %1;\n cvt.rn.f16x2.e4m3x2 %0, lo;\n}" : "=r"(out) : "r"(x));
    }
    return out;
}

// The B operands of the 16 keys `rows` rows past the warp's first for QK^T steps `step` and
// step + 1 (32 dims, in QStaging's order): [step][keys 0-7 low, high, keys 8-15 low, high].
// part: the thread's part of the address, offset(key0 + (m8 % 2) * 8 + lane % 8, m8 / 2) with m8
// = lane / 8 (stage_layout.h); offset(row, chunk): where the tile holds a row's 16-byte chunk.
template <int HeadDim, typename Offset>
__device__ __forceinline__ void k_fragments(const uint8_t* tile, uint32_t part, int rows, int step, uint32_t (&b)[2][4],
                                            const Offset& offset) {
    uint32_t r[4];  // keys 0-7 and 8-15 of chunk `step`, then of step + 1
    flashinfer::mma::ldmatrix_m8n8x4(r, const_cast<uint8_t*>(tile + layout::at(offset, part, rows, step)));
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        b[h][0] = widen_half<false>(r[2 * h]);
        b[h][1] = widen_half<true>(r[2 * h]);
        b[h][2] = widen_half<false>(r[2 * h + 1]);
        b[h][3] = widen_half<true>(r[2 * h + 1]);
    }
}

// The B operands of the 16 keys `rows` rows past the warp's first for the PV products of 16-dim
// chunks `chunk` and chunk + 1: per chunk, n8 blocks of its even dims then its odd dims ([keys
// 0-7, keys 8-15] each).
template <int HeadDim, typename Offset>
__device__ __forceinline__ void v_fragments(const uint8_t* tile, uint32_t part, int rows, int chunk, uint32_t (&b)[2][4],
                                            const Offset& offset) {
    uint32_t r[4];
    flashinfer::mma::ldmatrix_m8n8x4_trans(r, const_cast<uint8_t*>(tile + layout::at(offset, part, rows, chunk)));
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        // Bytes (key 2t: dim 2g, 2g+1; key 2t+1: dim 2g, 2g+1) -> (even dims of both, odd dims of both).
        const uint32_t low = __byte_perm(r[2 * h], 0, 0x3120), high = __byte_perm(r[2 * h + 1], 0, 0x3120);
        b[h][0] = widen_half<false>(low);
        b[h][1] = widen_half<false>(high);
        b[h][2] = widen_half<true>(low);
        b[h][3] = widen_half<true>(high);
    }
}

// s += Q K^T over the Blocks 16-key blocks of a warp (s as in decode.cuh: [block][keys 0-7,
// 8-15][accumulator]); q_step(step, frag) gives Q's A operand of a step; part: k_fragments'.
template <int HeadDim, int Blocks, typename QStep, typename Offset>
__device__ __forceinline__ void scores(float (&s)[Blocks][2][4], const uint8_t* k_tile, uint32_t part,
                                       const QStep& q_step, const Offset& offset) {
#pragma unroll
    for (int step = 0; step < HeadDim / 16; step += 2) {  // one ldmatrix of K per 2 steps
        uint32_t q_two[2][4];
        q_step(step, q_two[0]);
        q_step(step + 1, q_two[1]);
#pragma unroll
        for (int b = 0; b < Blocks; ++b) {
            uint32_t k_frag[2][4];
            k_fragments<HeadDim>(k_tile, part, b * 16, step, k_frag, offset);
            flashinfer::mma::mma_sync_m16n16k16_row_col_f16f16f32<half>(&s[b][0][0], q_two[0], k_frag[0]);
            flashinfer::mma::mma_sync_m16n16k16_row_col_f16f16f32<half>(&s[b][0][0], q_two[1], k_frag[1]);
        }
    }
}

// o += P V over the 16 keys `rows` rows past the warp's first of a stage (part: k_fragments');
// o's n8 block 2c holds the even dims of 16-dim chunk c, block 2c + 1 its odd dims (store_partial
// puts them in order).
template <int HeadDim, typename Offset>
__device__ __forceinline__ void accumulate(float (&o)[HeadDim / 8][4], uint32_t (&p_frag)[4], const uint8_t* v_tile,
                                           uint32_t part, int rows, const Offset& offset) {
#pragma unroll
    for (int chunk = 0; chunk < HeadDim / 16; chunk += 2) {
        uint32_t v_frag[2][4];
        v_fragments<HeadDim>(v_tile, part, rows, chunk, v_frag, offset);
        flashinfer::mma::mma_sync_m16n16k16_row_col_f16f16f32<half>(&o[2 * chunk][0], p_frag, v_frag[0]);
        flashinfer::mma::mma_sync_m16n16k16_row_col_f16f16f32<half>(&o[2 * chunk + 2][0], p_frag, v_frag[1]);
    }
}

// Rows g and g + 8 of a warp's O (fp32, HeadDim per row from `row_g`) in dim order: columns 2t
// and 2t + 1 of blocks 2c and 2c + 1 are dims 16c + 4t .. + 3.
template <int HeadDim>
__device__ __forceinline__ void store_partial(float* row_g, const float (&o)[HeadDim / 8][4], int t) {
#pragma unroll
    for (int chunk = 0; chunk < HeadDim / 16; ++chunk) {
#pragma unroll
        for (int j = 0; j < 2; ++j) {
            const float(&even)[4] = o[2 * chunk];
            const float(&odd)[4] = o[2 * chunk + 1];
            *reinterpret_cast<float4*>(row_g + 8 * j * HeadDim + chunk * 16 + 4 * t) =
                make_float4(even[2 * j], odd[2 * j], even[2 * j + 1], odd[2 * j + 1]);
        }
    }
}

// The e4m3 kernel's Q tile goes through registers (the permutation is finer than a cp.async):
// each thread loads whole 16-dim spans of q rows, then, once the first stages are issued (so that
// the loads' latency overlaps theirs), stores them as fp16 with dim pairs 0, 2, 4, 6 in the span's
// first chunk and 1, 3, 5, 7 in its second (the order k_fragments delivers K in). bf16 q is
// multiplied by a power of two that puts the tile's largest |q| just under 2^15 (exact: only the
// mantissa's rounding to fp16's 11 bits, finer than bf16's 8, and values 2^29 below the largest
// going subnormal). e4m3 q (QFp8: an FP8 plan) is dequantized by its head's q_descale and
// rescaled the same way (exact for power-of-two descales, else rounded to fp16). Unused when !Used.
template <typename T, int HeadDim, int Threads, bool Used, bool QFp8>
struct QStaging {
    static constexpr int kSpansPerRow = HeadDim / 16;
    static constexpr int kSpans = Used ? (16 * kSpansPerRow + Threads - 1) / Threads : 0;  // per thread
    static constexpr bool kRescale = !std::is_same_v<T, half>;
    // A span's 16-bit q: words[n][0..1]; its e4m3 q: words[n][0] and the head's descale (float
    // bits) in words[n][1].x.
    uint4 words[kSpans > 0 ? kSpans : 1][2];

    // row_of(row, &valid, &head): the tile row's first element in q, its query head, valid false
    // for rows past the queries. q_descale: [num_heads_q] or NULL (= 1), e4m3 q only.
    template <typename RowOf>
    __device__ __forceinline__ void load(int tid, const void* q, const float* q_descale, const RowOf& row_of) {
#pragma unroll
        for (int n = 0; n < kSpans; ++n) {
            const int i = tid + n * Threads;
            bool valid = false;
            if (i < 16 * kSpansPerRow) {
                int head = 0;
                const int64_t at = row_of(i / kSpansPerRow, &valid, &head) + i % kSpansPerRow * 16;
                if constexpr (QFp8) {
                    if (valid) {
                        words[n][0] = *reinterpret_cast<const uint4*>(static_cast<const uint8_t*>(q) + at);
                        words[n][1].x = __float_as_uint(q_descale != nullptr ? q_descale[head] : 1.f);
                    }
                } else if (valid) {
                    const uint4* src = reinterpret_cast<const uint4*>(static_cast<const T*>(q) + at);
                    words[n][0] = src[0], words[n][1] = src[1];
                }
            }
            if (!valid) words[n][0] = words[n][1] = make_uint4(0, 0, 0, 0);
        }
    }

    // The same from the stream kernel's item slot (decode_handoff.cuh): raw, the tile's 16 rows
    // of q (zeros past the queries); q_descale, their heads' descales (e4m3 q; NULL: 1).
    __device__ __forceinline__ void load_slot(int tid, const uint8_t* raw, const float* q_descale) {
        constexpr int kRowBytes = HeadDim * (QFp8 ? 1 : static_cast<int>(sizeof(T)));
#pragma unroll
        for (int n = 0; n < kSpans; ++n) {
            const int i = tid + n * Threads;
            if (i < 16 * kSpansPerRow) {
                const uint4* src = reinterpret_cast<const uint4*>(raw + (i / kSpansPerRow) * kRowBytes +
                                                                  (i % kSpansPerRow) * (kRowBytes / kSpansPerRow));
                words[n][0] = src[0];
                if constexpr (QFp8) {
                    words[n][1].x = __float_as_uint(q_descale != nullptr ? q_descale[i / kSpansPerRow] : 1.f);
                } else {
                    words[n][1] = src[1];
                }
            } else {
                words[n][0] = words[n][1] = make_uint4(0, 0, 0, 0);
            }
        }
    }

    // The CTA's q scale (1 for fp16 q): every thread calls it; `scratch` holds one float per warp
    // (shared memory nothing else uses meanwhile); one barrier of the Threads, `sync` (none for
    // fp16 q, which is not rescaled: it returns 1 at once).
    template <typename Sync>
    __device__ __forceinline__ float scale(int warp, int lane, float* scratch, const Sync& sync) const {
        if constexpr (!kRescale && !QFp8) return 1.f;
        uint32_t top = 0;  // largest |q| as float bits (non-negative floats order as unsigned integers)
#pragma unroll
        for (int n = 0; n < kSpans; ++n) {
            if constexpr (QFp8) {  // e4m3 magnitudes order as unsigned bytes too
                const uint4 w = words[n][0];
                const uint32_t m = __vmaxu4(__vmaxu4(w.x & 0x7f7f7f7fu, w.y & 0x7f7f7f7fu),
                                            __vmaxu4(w.z & 0x7f7f7f7fu, w.w & 0x7f7f7f7fu));
                const uint32_t byte = max(max(m & 0xffu, (m >> 8) & 0xffu), max((m >> 16) & 0xffu, m >> 24));
                const float largest = __half2float(__half(__nv_cvt_fp8_to_halfraw(
                                          static_cast<__nv_fp8_storage_t>(byte), __NV_E4M3))) *
                                      fabsf(__uint_as_float(words[n][1].x));
                top = max(top, __float_as_uint(largest));
            } else {
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    for (uint32_t word : {words[n][h].x, words[n][h].y, words[n][h].z, words[n][h].w}) {
                        top = max(top, max(word & 0x7fffu, (word >> 16) & 0x7fffu) << 16);  // bf16 -> float bits
                    }
                }
            }
        }
#pragma unroll
        for (int offset = 16; offset > 0; offset /= 2) top = max(top, __shfl_xor_sync(0xffffffff, top, offset));
        if (lane == 0) scratch[warp] = __uint_as_float(top);
        sync();
        float largest = 0.f;
        for (int w = 0; w < Threads / 32; ++w) largest = fmaxf(largest, scratch[w]);
        if (!(largest > 0.f) || isinf(largest)) return 1.f;  // all zero (or non-finite: propagates as is)
        int exponent = 0;
        frexpf(largest, &exponent);  // largest < 2^exponent
        return ldexpf(1.f, 15 - exponent);
    }

    // A pair of T as an fp16 pair, times q_scale.
    __device__ __forceinline__ static uint32_t to_half2(uint32_t pair, float q_scale) {
        if constexpr (!kRescale) return pair;
        const float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&pair));
        const __half2 h = __floats2half2_rn(f.x * q_scale, f.y * q_scale);
        return *reinterpret_cast<const uint32_t*>(&h);
    }

    // A pair of e4m3 values (the low or High 16 bits of x) as an fp16 pair, times factor.
    template <bool High>
    __device__ __forceinline__ static uint32_t e4m3_to_half2(uint32_t x, float factor) {
        const uint32_t exact = widen_half<High>(x);
        const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&exact));
        const __half2 h = __floats2half2_rn(f.x * factor, f.y * factor);
        return *reinterpret_cast<const uint32_t*>(&h);
    }

    // offset(row, chunk): the 16-bit tile's byte offset of a 16-byte chunk.
    template <typename Offset>
    __device__ __forceinline__ void store(uint8_t* q_smem, int tid, float q_scale, const Offset& offset) const {
#pragma unroll
        for (int n = 0; n < kSpans; ++n) {
            const int i = tid + n * Threads, row = i / kSpansPerRow, span = i % kSpansPerRow;
            if (i >= 16 * kSpansPerRow) continue;
            uint4 in[2];  // dim pairs 0-3, 4-7 as fp16
            if constexpr (QFp8) {
                const uint4 w = words[n][0];
                const float factor = __uint_as_float(words[n][1].x) * q_scale;
                in[0] = make_uint4(e4m3_to_half2<false>(w.x, factor), e4m3_to_half2<true>(w.x, factor),
                                   e4m3_to_half2<false>(w.y, factor), e4m3_to_half2<true>(w.y, factor));
                in[1] = make_uint4(e4m3_to_half2<false>(w.z, factor), e4m3_to_half2<true>(w.z, factor),
                                   e4m3_to_half2<false>(w.w, factor), e4m3_to_half2<true>(w.w, factor));
            } else {
                in[0] = words[n][0], in[1] = words[n][1];
                for (uint4& w : in) {
                    w = make_uint4(to_half2(w.x, q_scale), to_half2(w.y, q_scale), to_half2(w.z, q_scale),
                                   to_half2(w.w, q_scale));
                }
            }
            uint4* const out = reinterpret_cast<uint4*>(q_smem);
            out[offset(row, 2 * span) / 16] = make_uint4(in[0].x, in[0].z, in[1].x, in[1].z);
            out[offset(row, 2 * span + 1) / 16] = make_uint4(in[0].y, in[0].w, in[1].y, in[1].w);
        }
    }
};

}  // namespace fp8
}  // namespace decode
}  // namespace fas_paged

#endif  // FAS_PAGED_FP8_KV_CUH
