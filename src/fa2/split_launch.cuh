// Our launch of FA2's split-KV kernel, instantiating only the variants the C API can reach
// (issue 33). FA2's own launcher (run_mha_fwd_splitkv_dispatch) compiles a kernel for every
// combination of its runtime switches, among them the unsplit kernel and the in-kernel KV append
// (Append_KV), neither of which this library dispatches: fa2/plan.cpp picks the split kernel only
// with num_splits > 1, and no plan passes new keys. Here those two are fixed (Split on, Append_KV
// off, ALiBi off as the build defines), so are a local window and softcap (fas_fwd, the only
// caller that splits, sets neither; plan.cpp splits nothing else), the tiles' evenness and the
// head dim's are dispatched at run time, and the combine kernel is picked by the split count.
// The kernels and their launch geometry are FA2's, from the pinned headers; the kernels compiled
// here are the same code as before (docs/design/build-measurements.md).
// Included by the fa2_fwd_split kernel TUs only (flashbuild/config/families.py).
#ifndef FAS_FA2_SPLIT_LAUNCH_CUH
#define FAS_FA2_SPLIT_LAUNCH_CUH

#include "flash_fwd_launch_template.h"

#include "fa2/fa2.h"
#include "fa2/variant_launch.cuh"

namespace fas_fa2 {

namespace launch_detail {

// The combine kernel for up to 2^LogMaxSplits splits (FA2 unrolls its loads over that many).
template <typename Traits, int RowsPerCta, bool EvenK>
void launch_combine(FLASH_NAMESPACE::Flash_fwd_params& params, cudaStream_t stream, dim3 grid) {
    const auto launch = [&](auto log_max_splits) {
        constexpr int kLog = decltype(log_max_splits)::value;
        FLASH_NAMESPACE::flash_fwd_splitkv_combine_kernel<Traits, RowsPerCta, kLog, EvenK>
            <<<grid, Traits::kNThreads, 0, stream>>>(params);
    };
    const int splits = params.num_splits;
    if (splits <= 2) {
        launch(std::integral_constant<int, 1>{});
    } else if (splits <= 4) {
        launch(std::integral_constant<int, 2>{});
    } else if (splits <= 8) {
        launch(std::integral_constant<int, 3>{});
    } else if (splits <= 16) {
        launch(std::integral_constant<int, 4>{});
    } else if (splits <= 32) {
        launch(std::integral_constant<int, 5>{});
    } else if (splits <= 64) {
        launch(std::integral_constant<int, 6>{});
    } else {
        launch(std::integral_constant<int, 7>{});  // plan.cpp caps splits at 128
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace launch_detail

// One split-KV attention of FA2 (params.num_splits > 1, as plan.cpp plans it) and its combine.
// Tiles as FA2's split dispatch: 64 query rows, split_block_n(HeadDim) keys (fa2.h), 4 warps.
template <typename Element, int HeadDim, bool Causal>
void run_split(FLASH_NAMESPACE::Flash_fwd_params& params, cudaStream_t stream) {
    using Traits = ::Flash_fwd_kernel_traits<HeadDim, kSplitBlockM, split_block_n(HeadDim), 4, false, false, Element>;
    const int m_blocks = (params.seqlen_q + Traits::kBlockM - 1) / Traits::kBlockM;
    const dim3 grid(m_blocks, params.num_splits, params.b * params.h);
    launch_detail::with_variant<Traits, HeadDim, Causal, /*Masks=*/false>(
        params, [&](auto even_mn, auto even_k, auto local, auto softcap) {
            launch_detail::launch_attention<Traits>(
                &FLASH_NAMESPACE::flash_fwd_splitkv_kernel<Traits, Causal, decltype(local)::value, /*Has_alibi=*/false,
                                                           decltype(even_mn)::value, decltype(even_k)::value,
                                                           decltype(softcap)::value, /*Split=*/true, /*Append_KV=*/false>,
                grid, params, stream);
        });
    // Rows of the combine per CTA: as few as keep each thread's loads whole.
    constexpr int kCombineRows = HeadDim % 128 == 0 ? 4 : HeadDim % 64 == 0 ? 8 : 16;
    const dim3 combine_grid((params.b * params.h * params.seqlen_q + kCombineRows - 1) / kCombineRows);
    launch_detail::with_flag(params.d == HeadDim, [&](auto even_k) {
        launch_detail::launch_combine<Traits, kCombineRows, decltype(even_k)::value>(params, stream, combine_grid);
    });
}

}  // namespace fas_fa2

#endif  // FAS_FA2_SPLIT_LAUNCH_CUH
