// The online softmax of every SM90 kernel (plain and sinks, packed, paged, softcap, FP8): FlashInfer's
// OnlineSoftmax with the four switches of docs/design/sm90-mainloop-plan.md, steps 2a-2d. A kernel
// names itself (head dim, FP8 or not, softcap or not, packed or not) and softmax_choice
// (sm90/softmax_choice.h) says which switches it takes; with all off its update is FlashInfer's and
// the SASS is unchanged.
// Where a switch needs it, the update is the usual online softmax written here (running row max,
// the previous sum and O rescaled by 2^(old max - new max), scores exponentiated against the new
// max and summed per thread; the quad's partial sums meet in finalize); reductions and layouts are
// FlashInfer's.
#ifndef FAS_SM90_SOFTMAX_CUH
#define FAS_SM90_SOFTMAX_CUH

#include <cuda/std/limits>

#include <cute/tensor.hpp>

#include <flashinfer/attention/hopper/attention_updater.cuh>
#include <flashinfer/attention/hopper/utils.cuh>

#include "sm90/exp2_fma.h"
#include "sm90/softmax_choice.h"

namespace fas_sm90 {

// The mainloops issue QK^T of tile n and PV of tile n-1, wait for the first, run this update,
// then wait for PV: the softmax is meant to run while PV does. ptxas (12.4 and 13.0 alike) moves
// that second wait up to just after the first row's max, so the exponentials run after PV has
// finished, in the 16-bit kernels and the FP8 ones (SASS: no MUFU.EX2 between the two
// WARPGROUP.DEPBARs). A fence predicated on the row sums (taken only for a NaN sum, and
// harmless then) gives the wait an instruction it may not pass that depends on every
// exponential: ptxas keeps the wait behind it (SASS: all of a tile's MUFU.EX2 between them).
__device__ __forceinline__ void hold_pv_wait_behind(float value) {
    asm volatile(
        "{\n"
        " .reg .pred nan;\n"
        " setp.neu.f32 nan, %0, %0;\n"
        " @nan membar.cta;\n"
        "}\n" ::"f"(value)
        : "memory");
}

// The switches (SoftmaxChoice's fields):
//   poly_exp2_every=K  every K-th column of a thread's score tile through exp2_fma (FMA and ALU
//                      pipes, sm90/exp2_fma.h), the rest through MUFU.EX2;
//   lazy_rescale_log2=T (16-bit) a row keeps its running max until a tile raises it by more than
//                      T powers of two, so P stays below 2^T (fp16 and bf16 hold it; e4m3's 448
//                      does not), and O and the row sums are rescaled only when some row of the
//                      warp moved its max. The final O / sum and the LSE use the same max: the
//                      same softmax;
//   fold_p_scale (FP8) P comes out multiplied by 2^log2_prescale (the scale into e4m3's range,
//                      folded into each exponent instead of a multiply per score); the LSE leaves
//                      it out;
//   hold_pv_wait       the update keeps the PV GEMM's wait behind it (hold_pv_wait_behind).
// And FAS_SM90_DIAG, for speed-only diagnostic builds (below; fp8-speed.md, 2026-12-03).
template <int NUM_ROWS_PER_THREAD, int HeadDim, bool Fp8 = false, bool Softcap = false, bool Packed = false,
          bool Paged = false>
struct Softmax : flashinfer::OnlineSoftmax<NUM_ROWS_PER_THREAD, /*WITH_SCALE=*/true> {
    static constexpr SoftmaxChoice kChoice = softmax_choice(Fp8, HeadDim, Softcap, Packed, Paged);
    static constexpr int kPolyEvery = kChoice.poly_exp2_every;
    static constexpr int kLazyLog2 = kChoice.lazy_rescale_log2;
    static constexpr bool kLazy = kLazyLog2 > 0;
    static constexpr bool kPrescaled = kChoice.fold_p_scale;
    static_assert(kPolyEvery >= 0, "poly_exp2_every: 0 (off) or every how many columns");
    static_assert(kLazyLog2 >= 0 && kLazyLog2 <= 8, "lazy_rescale_log2: 0 (off) to 8 (P up to 256)");
    // Speed-only diagnostics (wrong outputs; variant builds): FAS_SM90_DIAG=0 this update with no
    // switch, 1 an FMUL for each exponential, 2 no row max; 3 (sm90/launch.cuh) softcap without its tanh.
    // Unset (-1): the library's kernels.
#if defined(FAS_SM90_DIAG)
    static constexpr int kDiag = FAS_SM90_DIAG;
#else
    static constexpr int kDiag = -1;
#endif
    static constexpr bool kDiagHere = kDiag >= 0 && kDiag <= 2;  // 3 changes the softcap variant only
    using Base = flashinfer::OnlineSoftmax<NUM_ROWS_PER_THREAD, /*WITH_SCALE=*/true>;
    using Base::Base;
    float log2_prescale = 0.f;

    // The row sums carry the prescale as P does, so O / sum needs no correction; the LSE does.
    template <typename Tensor0>
    __forceinline__ __device__ void finalize(Tensor0& acc_s, float pv_scale = 1.f) {
        Base::finalize(acc_s, pv_scale);
        if constexpr (kPrescaled) {
#pragma unroll
            for (int mi = 0; mi < cute::size(this->row_sum); ++mi) this->row_sum(mi) -= log2_prescale;
        }
    }

    // Skipped by a whole warp when none of its rows moved its max (kLazy); the call after finalize
    // (scores_scale = 1 / sum) always has work.
    template <typename Tensor1>
    __forceinline__ __device__ void rescale_o(Tensor1& acc_o) {
        if constexpr (kLazy) {
            bool moved = false;
#pragma unroll
            for (int mi = 0; mi < cute::size(this->scores_scale); ++mi) moved |= this->scores_scale(mi) != 1.f;
            if (!__any_sync(0xffffffffu, moved)) return;
        }
        Base::rescale_o(acc_o);
    }

    template <bool init, typename Tensor0>
    __forceinline__ __device__ void update(Tensor0& acc_s) {
        exponentiate_and_sum<init>(acc_s);
        if constexpr (kChoice.hold_pv_wait) {
            float sums = 0.f;
#pragma unroll
            for (int mi = 0; mi < cute::size(this->row_sum); ++mi) sums += this->row_sum(mi);
            hold_pv_wait_behind(sums);
        }
    }

  private:
    template <bool init, typename Tensor0>
    __forceinline__ __device__ void exponentiate_and_sum(Tensor0& acc_s) {
        if constexpr (kPolyEvery == 0 && !kPrescaled && !kLazy && !kDiagHere) {
            Base::template update<init>(acc_s);
        } else {
            auto scores = cute::make_tensor(acc_s.data(), flashinfer::convert_layout_acc_rowcol(acc_s.layout()));
            static_assert(decltype(cute::size<0>(scores))::value == NUM_ROWS_PER_THREAD);
            if constexpr (kDiag == 2) {  // diagnostic: no row max (the previous one, 0 at first)
                if constexpr (init) cute::fill(this->row_max, 0.f);
                cute::fill(this->scores_scale, 1.f);
            } else if constexpr (init) {
                flashinfer::reduce_max</*init=*/true>(scores, this->row_max);
            } else {
                auto previous = cute::make_fragment_like(this->row_max);
                cute::copy(this->row_max, previous);
                flashinfer::reduce_max</*init=*/false>(scores, this->row_max);
#pragma unroll
                for (int mi = 0; mi < cute::size(this->row_max); ++mi) {
                    // While a row has seen no key its max stays -inf: the clamp keeps old - new from
                    // being -inf - -inf (NaN); its sum and O are 0 whatever the scale.
                    const float current = fmaxf(this->row_max(mi), lowest());
                    if constexpr (kLazy) {
                        // (A row that had seen no key has previous -inf: its max always moves.)
                        if ((current - previous(mi)) * this->sm_scale_log2 <= static_cast<float>(kLazyLog2)) {
                            this->row_max(mi) = previous(mi);
                            this->scores_scale(mi) = 1.f;
                            continue;
                        }
                    }
                    this->scores_scale(mi) = exp2f((previous(mi) - current) * this->sm_scale_log2);
                    this->row_sum(mi) *= this->scores_scale(mi);
                }
            }
            exponentiate(scores);
            flashinfer::reduce_sum<init, /*warp_reduce=*/false>(scores, this->row_sum);
        }
    }

    __forceinline__ __device__ static float lowest() { return -cuda::std::numeric_limits<float>::max(); }

    // Column ni of a thread's scores (a compile-time index) goes through exp2_fma.
    __forceinline__ __device__ static constexpr bool on_fma_pipe(int ni) {
        if constexpr (kPolyEvery > 0) return ni % kPolyEvery == kPolyEvery - 1;
        return false;
    }

    // Each score s becomes 2^(s * scale - max * scale): the subtraction folds into one FFMA.
    template <typename Scores>
    __forceinline__ __device__ void exponentiate(Scores& scores) const {
#pragma unroll
        for (int mi = 0; mi < cute::size<0>(scores); ++mi) {
            float max_scaled = fmaxf(this->row_max(mi) * this->sm_scale_log2, lowest());
            if constexpr (kPrescaled) max_scaled -= log2_prescale;
#pragma unroll
            for (int ni = 0; ni < cute::size<1>(scores); ++ni) {
                const float x = scores(mi, ni) * this->sm_scale_log2 - max_scaled;
                if constexpr (kDiag == 1) {  // diagnostic: an FMUL where the exponential was
                    scores(mi, ni) = x * 0x1p-8f;
                } else {
                    scores(mi, ni) = on_fma_pipe(ni) ? exp2_fma(x) : exp2f(x);
                }
            }
        }
    }
};

}  // namespace fas_sm90

#endif  // FAS_SM90_SOFTMAX_CUH
