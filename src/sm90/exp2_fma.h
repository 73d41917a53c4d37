// 2^x on the FMA and ALU pipes, for a share of the softmax's exponentials (sm90/softmax.cuh).
// The SM90 kernels' MUFU (XU pipe) work is one exp2 per score, ~1.55 ms of a 16k-token, 16-head
// prefill on the H200 at any head dim, and the FP8 kernels hide none of it behind their GEMMs
// (docs/design/sm90-mainloop-plan.md, step 1); the FMA pipe idles at 15-23% there.
//
// x = j + f with j = round(x) (the float add of 1.5 * 2^23 rounds to the nearest integer, which
// then sits in the low mantissa bits) and f in [-0.5, 0.5]; 2^f is a degree-3 polynomial fitted for
// relative error (at most 1.02e-4, about 2^-13.3, in float arithmetic: below bf16's rounding of P,
// 2^-9); 2^j enters as j added to the exponent field. Exact at x = 0 (2^0 = 1, the row's maximum).
// x < -126 (and -inf: masked scores, rows that saw no key) gives 0, as MUFU.EX2 does with ftz.
// A NaN x gives an unspecified value (the row's MUFU columns still carry the NaN into its sum).
// Host-compilable so that a unit test (tests/test_exp2_fma.py) holds it to these bounds.
#ifndef FAS_SM90_EXP2_FMA_H
#define FAS_SM90_EXP2_FMA_H

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define FAS_EXP2_FMA_FN __host__ __device__ __forceinline__
#else
#include <cmath>
#define FAS_EXP2_FMA_FN inline
#endif

namespace fas_sm90 {

// Coefficients of 2^f - 1 on [-0.5, 0.5] (f, f^2, f^3), a relative-error fit computed for this
// header (iteratively reweighted least squares over 4001 Chebyshev points, rounded to float).
constexpr float kExp2C1 = 0.6932829022407532f;
constexpr float kExp2C2 = 0.2422109693288803f;
constexpr float kExp2C3 = 0.05500892922282219f;
constexpr float kRoundMagic = 12582912.f;  // 1.5 * 2^23: its low 9 mantissa bits are 0

// The float operations are the round-to-nearest intrinsics on the device so that no contraction
// or reassociation folds (x + magic) - magic back into x.
FAS_EXP2_FMA_FN float exp2_fma(float x) {
#if defined(__CUDA_ARCH__)
    const float t = __fadd_rn(x, kRoundMagic);
    const float f = __fsub_rn(x, __fsub_rn(t, kRoundMagic));
    const float p = __fmaf_rn(__fmaf_rn(__fmaf_rn(kExp2C3, f, kExp2C2), f, kExp2C1), f, 1.f);
    const uint32_t bits = (__float_as_uint(t) << 23) + __float_as_uint(p);
    return x < -126.f ? 0.f : __uint_as_float(bits);
#else
    volatile float t = x + kRoundMagic;  // volatile: the host compiler keeps the rounding step
    const float j = t - kRoundMagic;
    const float f = x - j;
    const float p = std::fma(std::fma(std::fma(kExp2C3, f, kExp2C2), f, kExp2C1), f, 1.f);
    const float tv = t;
    uint32_t tb, pb;
    std::memcpy(&tb, &tv, 4);
    std::memcpy(&pb, &p, 4);
    const uint32_t bits = (tb << 23) + pb;
    float out;
    std::memcpy(&out, &bits, 4);
    return x < -126.f ? 0.f : out;
#endif
}

}  // namespace fas_sm90

#undef FAS_EXP2_FMA_FN
#endif  // FAS_SM90_EXP2_FMA_H
