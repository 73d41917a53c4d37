// Which of the softmax's switches (sm90/softmax.cuh) an SM90 kernel takes, by its input type, head
// dim and score transform: the ones measured to pay on the H200 (bench_pair.py, each switch
// against the kernels without it in one process; docs/design/sm90-mainloop-plan.md, "Step 2
// measured"). What did not pay stays off:
//   exp2 on the FMA pipe for every 4th column: softcap kernels only (their tanh and exp2 fill the
//     XU pipe: 0.95-0.98x the time; elsewhere 1.05-1.09x);
//   lazy rescale past 2^8: 16-bit head dim 256 (0.93-0.95x non-causal, causal even; hd128
//     1.01-1.03x);
//   P's FP8 scale folded into the exponent: FP8 head dim 256 (0.96-0.97x; hd128 0.98-1.02x).
// A FAS_SM90_POLY_EXP2_EVERY, FAS_SM90_LAZY_RESCALE_LOG2 or FAS_SM90_FP8_FOLD_P_SCALE flag, where
// defined, sets its switch in every kernel instead (variant builds: scripts/gpu_variants.sh),
// except where the math forbids it: FP8 kernels never rescale lazily (P would pass e4m3's 448),
// 16-bit ones have no FP8 scale to fold. Host-compilable (tests/test_softmax_choice.py).
#ifndef FAS_SM90_SOFTMAX_CHOICE_H
#define FAS_SM90_SOFTMAX_CHOICE_H

namespace fas_sm90 {

struct SoftmaxChoice {
    int poly_exp2_every;    // every how many columns through exp2_fma; 0: all on MUFU.EX2
    int lazy_rescale_log2;  // keep a row's max until it rises past 2^this; 0: FlashInfer's rule
    bool fold_p_scale;      // FP8: P scaled into e4m3's range inside the exponent
};

constexpr SoftmaxChoice softmax_choice(bool fp8, int head_dim, bool softcap) {
    SoftmaxChoice choice{softcap ? 4 : 0, !fp8 && head_dim >= 256 ? 8 : 0, fp8 && head_dim >= 256};
#if defined(FAS_SM90_POLY_EXP2_EVERY)
    choice.poly_exp2_every = FAS_SM90_POLY_EXP2_EVERY;
#endif
#if defined(FAS_SM90_LAZY_RESCALE_LOG2)
    choice.lazy_rescale_log2 = fp8 ? 0 : FAS_SM90_LAZY_RESCALE_LOG2;
#endif
#if defined(FAS_SM90_FP8_FOLD_P_SCALE)
    choice.fold_p_scale = fp8 && FAS_SM90_FP8_FOLD_P_SCALE != 0;
#endif
    return choice;
}

}  // namespace fas_sm90

#endif  // FAS_SM90_SOFTMAX_CHOICE_H
