// What a decode warp computes, shared by the decode kernels (decode.cuh: every warp loads and
// computes; decode_stream.cuh: producer warps load, consumer warps compute): one stage's scores,
// masks, online softmax and P V for the warp's own keys, and the end of a tile, where the warps'
// softmax states are combined through shared memory and written to out (or to the split plan's
// fp32 partials). The kernels differ in how a stage reaches shared memory and where each 16-byte
// chunk of a cache row lands there: the `Offset` functor (row, chunk) -> byte offset in a tile.
#ifndef FAS_PAGED_DECODE_MATH_CUH
#define FAS_PAGED_DECODE_MATH_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include <flashinfer/math.cuh>
#include <flashinfer/mma.cuh>

#include "paged/fp8_kv.cuh"
#include "paged/merge.cuh"
#include "paged/stage_layout.h"

namespace fas_paged {
namespace decode {

// Two floats rounded to one 32-bit register of T pair (an mma operand, or two output elements).
template <typename T>
__device__ __forceinline__ uint32_t pack(float x, float y) {
    if constexpr (std::is_same_v<T, half>) {
        const __half2 h = __floats2half2_rn(x, y);
        return *reinterpret_cast<const uint32_t*>(&h);
    } else {
        const __nv_bfloat162 h = __floats2bfloat162_rn(x, y);
        return *reinterpret_cast<const uint32_t*>(&h);
    }
}

// The keys each of a thread's two rows (g, g + 8 of the tile) may see: up to last_key
// (bottom-right causal, else the chunk's last key), from first_key on (a left window, and the
// chunk's first key where a stage starts before it). tile_*: the bounds every row obeys, so that
// a stage of keys inside them skips the per-key test.
struct KeyBounds {
    int last_key[2], first_key[2];
    int tile_last_key, tile_first_key;
};

template <bool Causal>
__device__ __forceinline__ KeyBounds key_bounds(int row0, int g, int group, int kv_len, int qo_len, int kv_begin,
                                                int kv_end, int window_left) {
    KeyBounds b;
    const bool window = window_left >= 0;
#pragma unroll
    for (int j = 0; j < 2; ++j) {
        const int token = (row0 + g + 8 * j) / group;
        b.last_key[j] = Causal ? min(kv_end - 1, token + kv_len - qo_len) : kv_end - 1;
        b.first_key[j] = max(kv_begin, window ? token + kv_len - qo_len - window_left : 0);
    }
    b.tile_last_key = Causal ? min(kv_end - 1, row0 / group + kv_len - qo_len) : kv_end - 1;
    b.tile_first_key = max(kv_begin, window ? (row0 + 15) / group + kv_len - qo_len - window_left : 0);
    return b;
}

constexpr float kLog2e = 1.4426950408889634f;  // natural-log units -> the kernel's log2 domain

// Score scaling: raw q.k products -> the exp2 domain, with the logits softcap (cap * tanh(s / cap))
// applied in between when on. k_scale (e4m3 caches' K descale) and q_scale (the e4m3 kernel's q
// rescale) fold into the raw-product factor.
struct ScoreScale {
    bool capped;
    float pre_tanh, scale_log2;
    __device__ __forceinline__ ScoreScale(float softmax_scale, float softcap, float k_scale, float q_scale) {
        capped = softcap > 0.f;
        const float qk_scale = k_scale / q_scale;
        pre_tanh = capped ? softmax_scale / softcap * qk_scale : 0.f;
        scale_log2 = (capped ? softcap : softmax_scale * qk_scale) * kLog2e;
    }
};

// A warp's running softmax over its 16 rows: O (fp32 mma accumulators: n8 blocks of the head
// dim; e4m3 caches: even and odd dims per 16, see fp8_kv.cuh), row max (log2 domain) and sum.
template <int HeadDim>
struct WarpState {
    float o[HeadDim / 8][4];
    float m[2], l[2];
    __device__ __forceinline__ void init() {
#pragma unroll
        for (int d = 0; d < HeadDim / 8; ++d) o[d][0] = o[d][1] = o[d][2] = o[d][3] = 0.f;
        m[0] = m[1] = -INFINITY;
        l[0] = l[1] = 0.f;
    }
};

// A warp whose 16-row tile holds queries only in rows 0-7 (one token at GQA 8, the common decode
// row) skips the softmax of rows 8-15 and feeds zeros for them to P V: half the exponentials, the
// row max's shuffles and O's rescale of a stage. Their O, max and sum are never read: no query
// lives there. e4m3 caches 1-3% faster on an H200, 16-bit ones unchanged (docs/design/
// decode-e4m3.md, "Padded rows"); FAS_DECODE_SKIP_PAD_ROWS=0 builds the old loop for comparison.
#ifndef FAS_DECODE_SKIP_PAD_ROWS
#define FAS_DECODE_SKIP_PAD_ROWS 1
#endif

// One stage of a warp: its Blocks x 16 keys from tile row key0 on (global key stage_key) of the K
// and V tiles, against Q (q_step(step, frag): the A operand of 16 dims). T: q and out; KV: the
// caches' element (T or e4m3: then the mma runs in fp16).
// QkUnroll: steps of 16 dims unrolled in the scores' loop (all where q_step reads registers;
// fewer keep fewer fragment loads in flight, for warps capped at fewer registers). upper: whether
// rows 8-15 of the tile hold a query (read only with FAS_DECODE_SKIP_PAD_ROWS).
template <typename T, typename KV, int HeadDim, int Blocks, int QkUnroll = HeadDim / 16, typename Offset, typename QStep>
__device__ __forceinline__ void warp_stage(WarpState<HeadDim>& st, const uint8_t* k_tile, const uint8_t* v_tile,
                                           int key0, int stage_key, const KeyBounds& bounds, const ScoreScale& sc,
                                           const Offset& offset, const QStep& q_step, int lane, bool upper = true) {
    const bool rows_8_15 = !FAS_DECODE_SKIP_PAD_ROWS || upper;  // warp-uniform
    constexpr bool kFp8 = sizeof(KV) == 1;
    using M = std::conditional_t<kFp8, half, T>;
    namespace mma = flashinfer::mma;
    const int t = lane % 4, m8 = lane / 8;
    // This thread's part of its fragment addresses (stage_layout.h): V's rows as the transposing
    // load reads them (e4m3 K's too: fp8_kv.cuh), 16-bit K's paired as the mma's B operand wants.
    const uint32_t v_part = offset(key0 + (m8 % 2) * 8 + lane % 8, m8 / 2);
    float s[Blocks][2][4] = {};  // [16-key block][keys 0-7, 8-15][mma accumulator]
    if constexpr (kFp8) {
        fp8::scores<HeadDim>(s, k_tile, v_part, q_step, offset);
    } else {
        const uint32_t k_part = offset(key0 + (m8 / 2) * 8 + lane % 8, m8 % 2);
#pragma unroll QkUnroll
        for (int step = 0; step < HeadDim / 16; ++step) {
            uint32_t q_frag[4];
            q_step(step, q_frag);
#pragma unroll
            for (int b = 0; b < Blocks; ++b) {
                uint32_t k_frag[4];
                mma::ldmatrix_m8n8x4(k_frag, reinterpret_cast<T*>(const_cast<uint8_t*>(k_tile) +
                                                                   layout::at(offset, k_part, b * 16, 2 * step)));
                mma::mma_sync_m16n16k16_row_col_f16f16f32<T>(&s[b][0][0], q_frag, k_frag);  // keys 0-7 and 8-15
            }
        }
    }
    if (sc.capped) {
#pragma unroll
        for (int b = 0; b < Blocks; ++b) {
#pragma unroll
            for (int n = 0; n < 2; ++n) {
#pragma unroll
                for (int e = 0; e < 4; ++e) s[b][n][e] = flashinfer::math::tanh(s[b][n][e] * sc.pre_tanh);
            }
        }
    }
    // Some key of this warp is past a row's end or before a row's first key.
    if (stage_key + Blocks * 16 - 1 > bounds.tile_last_key || stage_key < bounds.tile_first_key) {
#pragma unroll
        for (int b = 0; b < Blocks; ++b) {
#pragma unroll
            for (int n = 0; n < 2; ++n) {
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int key = stage_key + b * 16 + n * 8 + 2 * t + (e & 1);
                    if (key > bounds.last_key[e / 2] || key < bounds.first_key[e / 2]) s[b][n][e] = -INFINITY;
                }
            }
        }
    }
    // Online softmax in the log2 domain, per row j (g, g + 8).
#pragma unroll
    for (int j = 0; j < 2; ++j) {
        if (j == 1 && !rows_8_15) break;
        float top = -INFINITY;
#pragma unroll
        for (int b = 0; b < Blocks; ++b) {
            top = fmaxf(top, fmaxf(fmaxf(s[b][0][2 * j], s[b][0][2 * j + 1]), fmaxf(s[b][1][2 * j], s[b][1][2 * j + 1])));
        }
        top = fmaxf(top, __shfl_xor_sync(0xffffffff, top, 1));
        top = fmaxf(top, __shfl_xor_sync(0xffffffff, top, 2));
        const float m_new = fmaxf(st.m[j], top * sc.scale_log2);
        const float base = m_new == -INFINITY ? 0.f : m_new;  // rows with no key yet stay at 0
        const float correction = exp2f(st.m[j] - base);
        st.m[j] = m_new;
        st.l[j] *= correction;
#pragma unroll
        for (int b = 0; b < Blocks; ++b) {
#pragma unroll
            for (int n = 0; n < 2; ++n) {
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const float p = exp2f(s[b][n][2 * j + e] * sc.scale_log2 - base);
                    s[b][n][2 * j + e] = p;
                    st.l[j] += p;
                }
            }
        }
#pragma unroll
        for (int d = 0; d < HeadDim / 8; ++d) {
            st.o[d][2 * j] *= correction;
            st.o[d][2 * j + 1] *= correction;
        }
    }
    // P (16 rows x 16 keys per block) as the A operand; V (16 keys x HeadDim) through
    // transposing ldmatrix.
#pragma unroll
    for (int b = 0; b < Blocks; ++b) {
        uint32_t p_frag[4] = {pack<M>(s[b][0][0], s[b][0][1]), rows_8_15 ? pack<M>(s[b][0][2], s[b][0][3]) : 0u,
                              pack<M>(s[b][1][0], s[b][1][1]), rows_8_15 ? pack<M>(s[b][1][2], s[b][1][3]) : 0u};
        if constexpr (kFp8) {
            fp8::accumulate<HeadDim>(st.o, p_frag, v_tile, v_part, b * 16, offset);
        } else {
#pragma unroll
            for (int pair = 0; pair < HeadDim / 16; ++pair) {
                uint32_t v_frag[4];
                mma::ldmatrix_m8n8x4_trans(v_frag, reinterpret_cast<T*>(const_cast<uint8_t*>(v_tile) +
                                                                         layout::at(offset, v_part, b * 16, 2 * pair)));
                mma::mma_sync_m16n16k16_row_col_f16f16f32<T>(&st.o[2 * pair][0], p_frag, v_frag);  // 2 dim blocks
            }
        }
    }
}

// Where a tile's rows go: out (or the split plan's fp32 partials and their log2 LSE).
struct TileOutput {
    int request, qo_tile, kv_tile, kv_head, qo_len, group, num_chunks;
};
// A tile of the stream kernel's tail variant (decode_items.cuh): tail, the item it is a piece of
// (-1: a round-robin item). A type of its own: a field more in TileOutput changed the SASS of the
// kernels without a tail (docs/design/decode-producer.md).
struct TailTileOutput {
    int request, qo_tile, kv_tile, kv_head, qo_len, group, num_chunks;
    int tail = -1;
};
template <typename Tile>
constexpr bool kTailTile = std::is_same<Tile, TailTileOutput>::value;

// The row of tail_v (and tail_s) of a tail piece's query `token`, head `head`: [item][piece][the
// item's 16-row block: 0, or 1 in 32-row tiles][16 rows].
__device__ __forceinline__ int64_t tail_partial_row(const TailTileOutput& tile, int chunk, int token, int head) {
    const int row = token * tile.group + head - tile.kv_head * tile.group - tile.qo_tile * 16;  // of the 16
    return ((static_cast<int64_t>(tile.tail) * kTailMaxPieces + chunk) * 2 + (tile.qo_tile & 1)) * 16 + row;
}

// The partial row of chunk 0 of a split tile's query `token` (its chunk c: this + c).
template <typename Tile>
__device__ __forceinline__ int first_partial_row(const LaunchArgs& a, const Tile& tile, int token) {
    return a.o_indptr[tile.request] + token * tile.num_chunks;  // partial rows stay under 2^31 (plan.cpp)
}

// Writes 8 elements (chunk8) of a tile row's output, and the row's log2 LSE with chunk 0: to out
// and lse, or to a split plan's fp32 partials (the merge rounds once, not once per chunk). A
// sequence of one chunk writes out itself, in split plans too (merge_decode skips its rows): the
// same values the merge would round from its one partial, without the round trip.
template <typename T, int HeadDim, typename Tile>
__device__ __forceinline__ void store_chunk(const LaunchArgs& a, const Tile& tile, int token, int head,
                                            int chunk8, const float (&acc)[8], float lse_value) {
    if constexpr (kTailTile<Tile>) {  // a piece of an item cut in several: its own fp32 rows
        if (tile.tail >= 0 && tile.num_chunks > 1) {
            const int64_t row = tail_partial_row(tile, tile.kv_tile, token, head);
            float4* to = reinterpret_cast<float4*>(a.tail_v + row * HeadDim + chunk8 * 8);
            to[0] = make_float4(acc[0], acc[1], acc[2], acc[3]);
            to[1] = make_float4(acc[4], acc[5], acc[6], acc[7]);
            if (chunk8 == 0) a.tail_s[row] = lse_value;
            return;
        }
    }
    const bool partial = a.split && tile.num_chunks > 1;
    const int64_t out_row = partial ? first_partial_row(a, tile, token) + tile.kv_tile : a.q_indptr[tile.request] + token;
    const int64_t at = (out_row * a.num_heads_q + head) * HeadDim + chunk8 * 8;
    if (partial) {
        float4* to = reinterpret_cast<float4*>(static_cast<float*>(a.tmp_v) + at);
        to[0] = make_float4(acc[0], acc[1], acc[2], acc[3]);
        to[1] = make_float4(acc[4], acc[5], acc[6], acc[7]);
    } else {
        uint4 packed8;
        packed8.x = pack<T>(acc[0], acc[1]);
        packed8.y = pack<T>(acc[2], acc[3]);
        packed8.z = pack<T>(acc[4], acc[5]);
        packed8.w = pack<T>(acc[6], acc[7]);
        *reinterpret_cast<uint4*>(static_cast<T*>(a.out) + at) = packed8;
    }
    float* lse = partial ? a.tmp_s : a.lse;
    if (chunk8 == 0 && lse != nullptr) lse[out_row * a.num_heads_q + head] = lse_value;
}

// The end of a tile: the Warps' softmax states (state: [warp][16 rows][m, l]) and O (partial:
// [warp][16 rows][HeadDim] fp32) meet in shared memory, `sync` (a barrier of the Warps) between
// writing and reading; Threads = 32 x Warps combine them row by row. v_scale: e4m3 V's descale.
template <typename T, typename KV, int HeadDim, int Warps, typename Sync, typename Tile>
__device__ __forceinline__ void finish_tile(WarpState<HeadDim>& st, float* state, float* partial, const LaunchArgs& a,
                                            const Tile& tile, float v_scale, int tid, const Sync& sync) {
    constexpr bool kFp8 = sizeof(KV) == 1;
    constexpr int kQChunks = HeadDim / 8;  // 8-element pieces of an output row
    const int warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
#pragma unroll
    for (int j = 0; j < 2; ++j) {
        st.l[j] += __shfl_xor_sync(0xffffffff, st.l[j], 1);
        st.l[j] += __shfl_xor_sync(0xffffffff, st.l[j], 2);
    }
    if (t == 0) {
#pragma unroll
        for (int j = 0; j < 2; ++j) {
            state[(warp * 16 + g + 8 * j) * 2] = st.m[j];
            state[(warp * 16 + g + 8 * j) * 2 + 1] = st.l[j];
        }
    }
    if constexpr (kFp8) {
        fp8::store_partial<HeadDim>(partial + (warp * 16 + g) * HeadDim, st.o, t);
    } else {
#pragma unroll
        for (int d = 0; d < HeadDim / 8; ++d) {
#pragma unroll
            for (int j = 0; j < 2; ++j) {
                float2* at = reinterpret_cast<float2*>(partial + (warp * 16 + g + 8 * j) * HeadDim + d * 8 + 2 * t);
                *at = make_float2(st.o[d][2 * j], st.o[d][2 * j + 1]);
            }
        }
    }
    sync();

    const int row0 = tile.qo_tile * 16;
    // The sink joins the denominator once per row: in the only chunk, or in a split plan's first
    // (whose LSE carries it into the merge), and only in rows that saw a key.
    bool sinks = a.sinks != nullptr && (!a.split || tile.kv_tile == 0);
    if constexpr (kTailTile<Tile>) sinks = a.sinks != nullptr && tile.kv_tile == 0;  // a tail piece: the first
    for (int i = tid; i < 16 * kQChunks; i += 32 * Warps) {
        const int row = i / kQChunks, chunk8 = i % kQChunks;
        const int packed = row0 + row, token = packed / tile.group, head = tile.kv_head * tile.group + packed % tile.group;
        if (token >= tile.qo_len) continue;
        float top = -INFINITY;
#pragma unroll
        for (int w = 0; w < Warps; ++w) top = fmaxf(top, state[(w * 16 + row) * 2]);
        const float sink = sinks && top != -INFINITY ? a.sinks[head] * kLog2e : -INFINITY;
        const float base = top == -INFINITY ? 0.f : fmaxf(top, sink);
        float sum = 0.f, acc[8] = {};
#pragma unroll
        for (int w = 0; w < Warps; ++w) {
            const float weight = exp2f(state[(w * 16 + row) * 2] - base);
            sum += weight * state[(w * 16 + row) * 2 + 1];
            const float4* from = reinterpret_cast<const float4*>(partial + (w * 16 + row) * HeadDim + chunk8 * 8);
            const float4 lo = from[0], hi = from[1];
            acc[0] += weight * lo.x, acc[1] += weight * lo.y, acc[2] += weight * lo.z, acc[3] += weight * lo.w;
            acc[4] += weight * hi.x, acc[5] += weight * hi.y, acc[6] += weight * hi.z, acc[7] += weight * hi.w;
        }
        sum += exp2f(sink - base);  // 0 without a sink
        float inverse = sum > 0.f ? 1.f / sum : 0.f;  // a row without keys writes zeros
        if constexpr (kFp8) inverse *= v_scale;         // split partials too: the merge is linear in V
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[e] *= inverse;
        store_chunk<T, HeadDim>(a, tile, token, head, chunk8, acc, sum > 0.f ? log2f(sum) + base : -INFINITY);
    }
}

// A split tile's arrival count (LaunchArgs::fold_counts): one per (chunk 0's partial row of the
// tile's first token, KV head, 16-row part of that token's query heads), which no other tile of
// the plan shares. The plan sizes the counts by its partial rows x KV heads x parts per token.
template <typename Tile>
__device__ __forceinline__ int64_t fold_slot(const LaunchArgs& a, const Tile& tile) {
    const int packed = tile.qo_tile * 16, token = packed / tile.group, parts = (tile.group + 15) / 16;
    return (static_cast<int64_t>(first_partial_row(a, tile, token)) * a.num_heads_k + tile.kv_head) * parts +
           (packed % tile.group) / 16;
}

// After a tile's chunk is stored (its threads' partial rows written): in a folding plan, the CTA
// that stores the tile's last chunk folds the tile's rows into out, one warp per row (fold.cuh).
// Threads from tid (a multiple of 32) take part; `sync` is a barrier of every thread that calls
// this (each with its own tile), flag one int of shared memory per tile. Publishing: a barrier,
// then one thread's count with release and acquire semantics (CUTLASS's semaphores arrive so),
// then a barrier before the last arriver's reads.
// Tail tiles (TailTileOutput) count on tail_counts, one per item and 16-row block, and fold
// their pieces' rows of tail_v.
template <typename T, int HeadDim, typename Sync, typename Tile>
__device__ __forceinline__ void fold_if_last(const LaunchArgs& a, const Tile& tile, int tid, int threads,
                                             int* flag, const Sync& sync) {
    if constexpr (kTailTile<Tile>) {
        if (tile.num_chunks <= 1) return;
    } else {
        if (a.fold_counts == nullptr || tile.num_chunks <= 1) return;  // alike for every caller of an item
    }
    const bool counted = tile.qo_tile * 16 < tile.qo_len * tile.group;  // a tile with rows
    sync();  // every row of this chunk is stored
    if (counted && tid == 0) {
        int32_t* count;
        if constexpr (kTailTile<Tile>) {
            count = a.tail_counts + tile.tail * 2 + (tile.qo_tile & 1);
        } else {
            count = a.fold_counts + fold_slot(a, tile);
        }
        int arrived;  // release: this CTA's rows (the barrier orders them before it); acquire: the others'
        asm volatile("atom.add.acq_rel.gpu.global.s32 %0, [%1], 1;" : "=r"(arrived) : "l"(count) : "memory");
        const bool last = arrived == tile.num_chunks - 1;
        if (last) *count = 0;  // for the next run (the next kernel on the stream)
        *flag = last;
    }
    sync();
    if (!counted || *flag == 0) return;
    const int lane = tid % 32;
    for (int row = tid / 32; row < 16; row += threads / 32) {
        const int packed = tile.qo_tile * 16 + row, token = packed / tile.group;
        if (token >= tile.qo_len) break;
        if constexpr (kTailTile<Tile>) {
            const int head = tile.kv_head * tile.group + packed % tile.group;
            const int64_t first = tail_partial_row(tile, 0, token, head);
            fold_tail_row<T, HeadDim>(a, first, tail_partial_row(tile, 1, token, head) - first, tile.num_chunks,
                                      a.q_indptr[tile.request] + token, head, lane);
        } else {
            fold_row<T, HeadDim>(a, first_partial_row(a, tile, token), tile.num_chunks, a.q_indptr[tile.request] + token,
                                 tile.kv_head * tile.group + packed % tile.group, lane);
        }
    }
}

// A tile whose chunk holds no key: zeros, and an LSE of -inf (Threads threads from tid).
template <typename T, int HeadDim, typename Tile>
__device__ __forceinline__ void finish_empty_tile(const LaunchArgs& a, const Tile& tile, int tid, int threads) {
    constexpr int kQChunks = HeadDim / 8;
    const float zeros[8] = {};
    for (int i = tid; i < 16 * kQChunks; i += threads) {
        const int packed = tile.qo_tile * 16 + i / kQChunks, token = packed / tile.group;
        if (token < tile.qo_len) {
            store_chunk<T, HeadDim>(a, tile, token, tile.kv_head * tile.group + packed % tile.group, i % kQChunks, zeros,
                                    -INFINITY);
        }
    }
}

}  // namespace decode
}  // namespace fas_paged

#endif  // FAS_PAGED_DECODE_MATH_CUH
