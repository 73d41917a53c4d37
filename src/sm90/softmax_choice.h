// Which of the softmax's switches (sm90/softmax.cuh) an SM90 kernel takes, by its input type, head
// dim, score transform and whether it is a packed (sm90/segment_mask.cuh) or paged kernel: the ones that
// measured faster on the H200, each against the kernels without it (docs/design/sm90-mainloop-plan.md,
// "Step 2 measured", holds the numbers). exp2 on the FMA pipe pays where softcap's tanh and exp2
// fill the XU pipe: every 4th column at 16-bit hd128, every 8th for FP8 and at hd256
// (softcap.md, "Softcap's share on the FMA pipe"), except the 16-bit paged hd256 softcap
// kernel since its 64-key stage (none there: 1-8% faster than every 8th with nvcc 13.0, even within the spread
// between calls from the release toolchain); and every 4th in the packed 16-bit
// hd96 kernels (vision windows, 3-5%; the packed hd128 kernels measured even, others not measured;
// sm90-epilogue-overlap.md); skipping O's rescale only where O is widest (16-bit head dim 256);
// folding FP8's P scale only at head dim 256; holding the PV wait only in the 16-bit hd256 softcap
// varlen kernels (since 2104cd8 ptxas put fewer of their exponentials beside PV: causal 10% slower,
// restored by the hold, non-causal 4% faster in the release build; the paged one gains with nvcc
// 13.0 but not from the release toolchain, and the FP8 softcap ones lose 9-12%; softcap.md).
// A FAS_SM90_POLY_EXP2_EVERY, FAS_SM90_LAZY_RESCALE_LOG2, FAS_SM90_FP8_FOLD_P_SCALE or
// FAS_SM90_HOLD_PV_WAIT flag, where defined, sets its switch in every kernel instead (variant
// builds: scripts/gpu_variants.sh), except where the math forbids it: FP8 kernels never rescale
// lazily (P would pass e4m3's 448), 16-bit ones have no FP8 scale to fold.
// Host-compilable (tests/test_softmax_choice.py).
#ifndef FAS_SM90_SOFTMAX_CHOICE_H
#define FAS_SM90_SOFTMAX_CHOICE_H

namespace fas_sm90 {

struct SoftmaxChoice {
    int poly_exp2_every;    // every how many columns through exp2_fma; 0: all on MUFU.EX2
    int lazy_rescale_log2;  // keep a row's max until it rises past 2^this; 0: FlashInfer's rule
    bool fold_p_scale;      // FP8: P scaled into e4m3's range inside the exponent
    bool hold_pv_wait;      // keep the PV GEMM's wait behind the softmax update
};

// Every how many columns an exponential goes through exp2_fma, by kernel (the header's first lines).
constexpr int poly_exp2_every(bool fp8, int head_dim, bool softcap, bool packed, bool paged) {
    if (!softcap) return packed && !fp8 && head_dim == 96 ? 4 : 0;
    if (fp8) return 8;
    if (head_dim < 256) return 4;
    return paged ? 0 : 8;  // 16-bit hd256: the paged kernel's 64-key stage measured fastest with none
}

constexpr SoftmaxChoice softmax_choice(bool fp8, int head_dim, bool softcap, bool packed = false, bool paged = false) {
    const bool wide16 = !fp8 && head_dim >= 256;  // 16-bit hd256: O is widest, softcap's XU share smallest
    SoftmaxChoice choice{poly_exp2_every(fp8, head_dim, softcap, packed, paged), wide16 ? 8 : 0,
                         fp8 && head_dim >= 256, softcap && wide16 && !paged};
#if defined(FAS_SM90_POLY_EXP2_EVERY)
    choice.poly_exp2_every = FAS_SM90_POLY_EXP2_EVERY;
#endif
#if defined(FAS_SM90_LAZY_RESCALE_LOG2)
    choice.lazy_rescale_log2 = fp8 ? 0 : FAS_SM90_LAZY_RESCALE_LOG2;
#endif
#if defined(FAS_SM90_FP8_FOLD_P_SCALE)
    choice.fold_p_scale = fp8 && FAS_SM90_FP8_FOLD_P_SCALE != 0;
#endif
#if defined(FAS_SM90_HOLD_PV_WAIT)
    choice.hold_pv_wait = FAS_SM90_HOLD_PV_WAIT != 0;
#endif
    return choice;
}

}  // namespace fas_sm90

#endif  // FAS_SM90_SOFTMAX_CHOICE_H
