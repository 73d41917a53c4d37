// The fold of a split row's chunks (fp32 partial O with its log2 LSE) into out, in one fixed
// order whoever runs it: the merge kernel (merge.cuh: eight warps per row) and the decode kernel
// that stores a tile's last chunk (decode_math.cuh: one warp per row, the eight states in its
// registers). Chunk c of a row goes to state c % 8, each state folds its chunks in ascending
// order, and the eight states meet in state order. Every product and sum below is rounded
// explicitly (no contraction left to the compiler), so that both give the same bits and a
// device-length plan equals a host-length plan of the same lengths bit for bit.
#ifndef FAS_PAGED_FOLD_CUH
#define FAS_PAGED_FOLD_CUH

#include <cstdint>

#include "paged/paged.h"

namespace fas_paged {

// One chunk (log2 LSE s, values v) into a state (m, d, o); chunks that saw no key (s = -inf) skip.
template <int K>
__device__ __forceinline__ void fold_step(float& m, float& d, float (&o)[K], float s, const float (&v)[K]) {
    if (s == -INFINITY) return;
    const float top = fmaxf(m, s), scale = exp2f(m - top), weight = exp2f(s - top);
    d = __fmaf_rn(d, scale, weight);
#pragma unroll
    for (int e = 0; e < K; ++e) o[e] = __fmaf_rn(o[e], scale, __fmul_rn(weight, v[e]));
    m = top;
}

// The states' common maximum (0 where no chunk saw a key) and their denominator: {top, sum}.
template <typename M, typename D>
__device__ __forceinline__ float2 fold_total(const M& m_of, const D& d_of) {
    float top = -INFINITY;
#pragma unroll
    for (int w = 0; w < kFoldStates; ++w) top = fmaxf(top, m_of(w));
    if (top == -INFINITY) top = 0.f;  // every weight below is then 0
    float sum = 0.f;
#pragma unroll
    for (int w = 0; w < kFoldStates; ++w) sum = __fadd_rn(sum, __fmul_rn(d_of(w), exp2f(m_of(w) - top)));
    return make_float2(top, sum);
}

// One element of the folded row, before the division by the denominator.
template <typename M, typename P>
__device__ __forceinline__ float fold_value(float top, const M& m_of, const P& p_of) {
    float value = 0.f;
#pragma unroll
    for (int w = 0; w < kFoldStates; ++w) value = __fadd_rn(value, __fmul_rn(p_of(w), exp2f(m_of(w) - top)));
    return value;
}

__device__ __forceinline__ float fold_inverse(float sum) { return sum > 0.f ? __fdiv_rn(1.f, sum) : 0.f; }
__device__ __forceinline__ float fold_lse(float top, float sum) { return sum > 0.f ? __fadd_rn(top, log2f(sum)) : -INFINITY; }

// Partial row c's log2 LSE for `head` (-inf where !valid: past the row's chunks) and this lane's
// K values of it (row c's, valid or not: c is always a row of the buffer). Read through L2
// (ld.cg): the decode kernel's fold reads what other CTAs of the same kernel wrote.
template <int HeadDim, int K>
__device__ __forceinline__ void load_partial(const LaunchArgs& a, int64_t c, int head, int lane, bool valid, float& s,
                                             float (&v)[K]) {
    s = valid ? __ldcg(a.tmp_s + c * a.num_heads_q + head) : -INFINITY;
    const float* from = static_cast<const float*>(a.tmp_v) + (c * a.num_heads_q + head) * HeadDim + lane * K;
#pragma unroll
    for (int e = 0; e < K; ++e) v[e] = __ldcg(from + e);
}

// A fold's running states, empty (fold_row, fold_tail_row).
template <int K>
__device__ __forceinline__ void fold_begin(float (&m)[kFoldStates], float (&d)[kFoldStates], float (&o)[kFoldStates][K]) {
#pragma unroll
    for (int w = 0; w < kFoldStates; ++w) {
        m[w] = -INFINITY;
        d[w] = 0.f;
#pragma unroll
        for (int e = 0; e < K; ++e) o[w][e] = 0.f;
    }
}
// The folded states into row `row` of out, head `head` (and its log2 LSE where asked).
template <typename T, int HeadDim, int K>
__device__ __forceinline__ void fold_store(const LaunchArgs& a, int64_t row, int head, int lane,
                                           const float (&m)[kFoldStates], const float (&d)[kFoldStates],
                                           const float (&o)[kFoldStates][K]) {
    const auto m_of = [&](int w) { return m[w]; };
    const float2 total = fold_total(m_of, [&](int w) { return d[w]; });
    const float inverse = fold_inverse(total.y);
    T* out = static_cast<T*>(a.out) + (row * a.num_heads_q + head) * HeadDim + lane * K;
#pragma unroll
    for (int e = 0; e < K; ++e) {
        out[e] = static_cast<T>(__fmul_rn(fold_value(total.x, m_of, [&](int w) { return o[w][e]; }), inverse));
    }
    if (a.lse != nullptr && lane == 0) a.lse[row * a.num_heads_q + head] = fold_lse(total.x, total.y);
}

// One warp folds row `row` of out, head `head`, from its chunks' partial rows first .. first +
// chunks - 1 (a.tmp_v / a.tmp_s), after the caller's acquire.
template <typename T, int HeadDim>
__device__ __forceinline__ void fold_row(const LaunchArgs& a, int64_t first, int chunks, int64_t row, int head,
                                         int lane) {
    constexpr int kPerLane = HeadDim / 32;
    float m[kFoldStates], d[kFoldStates], o[kFoldStates][kPerLane];
    fold_begin(m, d, o);
    for (int c0 = 0; c0 < chunks; c0 += kFoldStates) {
        float s[kFoldStates], v[kFoldStates][kPerLane];
#pragma unroll
        for (int w = 0; w < kFoldStates; ++w) {  // every load of the round first
            const bool valid = c0 + w < chunks;
            load_partial<HeadDim>(a, first + (valid ? c0 + w : 0), head, lane, valid, s[w], v[w]);
        }
#pragma unroll
        for (int w = 0; w < kFoldStates; ++w) fold_step(m[w], d[w], o[w], s[w], v[w]);
    }
    fold_store<T, HeadDim>(a, row, head, lane, m, d, o);
}

// The same fold from rows of one head each (a stream launch's tail pieces, decode_items.cuh:
// tail_v, tail_s), chunk c's row at first + c x stride. A loop of its own: fold_row written
// over a loader changed the stream kernels' SASS (docs/design/decode-producer.md).
template <typename T, int HeadDim>
__device__ __forceinline__ void fold_tail_row(const LaunchArgs& a, int64_t first, int64_t stride, int chunks,
                                              int64_t row, int head, int lane) {
    constexpr int kPerLane = HeadDim / 32;
    float m[kFoldStates], d[kFoldStates], o[kFoldStates][kPerLane];
    fold_begin(m, d, o);
    for (int c0 = 0; c0 < chunks; c0 += kFoldStates) {
        float s[kFoldStates], v[kFoldStates][kPerLane];
#pragma unroll
        for (int w = 0; w < kFoldStates; ++w) {
            const bool valid = c0 + w < chunks;
            const int64_t at = first + (valid ? c0 + w : 0) * stride;
            s[w] = valid ? __ldcg(a.tail_s + at) : -INFINITY;
#pragma unroll
            for (int e = 0; e < kPerLane; ++e) v[w][e] = __ldcg(a.tail_v + at * HeadDim + lane * kPerLane + e);
        }
#pragma unroll
        for (int w = 0; w < kFoldStates; ++w) fold_step(m[w], d[w], o[w], s[w], v[w]);
    }
    fold_store<T, HeadDim>(a, row, head, lane, m, d, o);
}

}  // namespace fas_paged

#endif  // FAS_PAGED_FOLD_CUH
