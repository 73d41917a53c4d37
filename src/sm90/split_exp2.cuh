// The online softmax of the SM90 kernels with its exponentials split between two pipes: every
// kPolyEvery-th column of a thread's score tile through exp2_fma (FMA and ALU pipes,
// sm90/exp2_fma.h), the rest through exp2f (MUFU.EX2, the XU pipe). kPolyEvery = 0 keeps
// FlashInfer's update as it is. Which share pays is measured per family
// (docs/design/sm90-mainloop-plan.md); FAS_SM90_POLY_EXP2_EVERY sets it for a build (default 0).
//
// The update is the usual online softmax (running row max, the previous sum and O rescaled by
// 2^(old max - new max), scores exponentiated against the new max and summed per thread; the
// quad's partial sums meet in finalize), written here so that the exponent loop can choose its
// pipe per column at compile time; reductions and layouts are FlashInfer's.
#ifndef FAS_SM90_SPLIT_EXP2_CUH
#define FAS_SM90_SPLIT_EXP2_CUH

#include <cuda/std/limits>

#include <cute/tensor.hpp>

#include <flashinfer/attention/hopper/attention_updater.cuh>
#include <flashinfer/attention/hopper/utils.cuh>

#include "sm90/exp2_fma.h"

#ifndef FAS_SM90_POLY_EXP2_EVERY
#define FAS_SM90_POLY_EXP2_EVERY 0
#endif

namespace fas_sm90 {

constexpr int kPolyExp2Every = FAS_SM90_POLY_EXP2_EVERY;
static_assert(kPolyExp2Every >= 0, "FAS_SM90_POLY_EXP2_EVERY: 0 (off) or every how many columns");

template <int NUM_ROWS_PER_THREAD, int kPolyEvery = kPolyExp2Every>
struct SplitExp2Softmax : flashinfer::OnlineSoftmax<NUM_ROWS_PER_THREAD, /*WITH_SCALE=*/true> {
    using Base = flashinfer::OnlineSoftmax<NUM_ROWS_PER_THREAD, /*WITH_SCALE=*/true>;
    using Base::Base;

    template <bool init, typename Tensor0>
    __forceinline__ __device__ void update(Tensor0& acc_s) {
        if constexpr (kPolyEvery == 0) {
            Base::template update<init>(acc_s);
        } else {
            auto scores = cute::make_tensor(acc_s.data(), flashinfer::convert_layout_acc_rowcol(acc_s.layout()));
            static_assert(decltype(cute::size<0>(scores))::value == NUM_ROWS_PER_THREAD);
            if constexpr (init) {
                flashinfer::reduce_max</*init=*/true>(scores, this->row_max);
            } else {
                auto previous = cute::make_fragment_like(this->row_max);
                cute::copy(this->row_max, previous);
                flashinfer::reduce_max</*init=*/false>(scores, this->row_max);
#pragma unroll
                for (int mi = 0; mi < cute::size(this->row_max); ++mi) {
                    // A row that has seen no key keeps -inf as its max: rescale by 2^0 (its sum is 0).
                    const float current = fmaxf(this->row_max(mi), lowest());
                    this->scores_scale(mi) = exp2f((previous(mi) - current) * this->sm_scale_log2);
                    this->row_sum(mi) *= this->scores_scale(mi);
                }
            }
            exponentiate(scores);
            flashinfer::reduce_sum<init, /*warp_reduce=*/false>(scores, this->row_sum);
        }
    }

  private:
    __forceinline__ __device__ static float lowest() { return -cuda::std::numeric_limits<float>::max(); }

    // Each score s becomes 2^(s * scale - max * scale): the subtraction folds into one FFMA.
    template <typename Scores>
    __forceinline__ __device__ void exponentiate(Scores& scores) const {
#pragma unroll
        for (int mi = 0; mi < cute::size<0>(scores); ++mi) {
            const float max_scaled = fmaxf(this->row_max(mi) * this->sm_scale_log2, lowest());
#pragma unroll
            for (int ni = 0; ni < cute::size<1>(scores); ++ni) {
                const float x = scores(mi, ni) * this->sm_scale_log2 - max_scaled;
                scores(mi, ni) = ni % kPolyEvery == kPolyEvery - 1 ? exp2_fma(x) : exp2f(x);
            }
        }
    }
};

}  // namespace fas_sm90

#endif  // FAS_SM90_SPLIT_EXP2_CUH
