// Our launch of FA2's forward kernel on sm_90a, instantiating only the variants the C API can
// reach (issue 33). FA2's own launcher (run_mha_fwd_hdimN) picks its tiles at run time by the
// device (an sm8x choice, and at head dim 256 one by shared memory), and so compiles both tile
// sets into every TU; on a Hopper card only one of them ever runs. Here the tiles are the ones
// FA2 chooses on sm_90 (fwd_tiles below), the switches a plan can set are dispatched at run
// time (even tiles, even head dim, a local window, softcap), and the ones it cannot are fixed:
// no dropout, no ALiBi (as the build defines), no returned softmax (fa2/launch.cu passes no
// p_ptr). The kernels and launch geometry are FA2's, from the pinned headers.
// Included by the fa2_fwd kernel TUs only (flashbuild/config/families.py).
#ifndef FAS_FA2_FWD_LAUNCH_CUH
#define FAS_FA2_FWD_LAUNCH_CUH

#include "flash_fwd_launch_template.h"

#include "fa2/variant_launch.cuh"

namespace fas_fa2 {

// FA2's forward tiles on sm_90 (its run_mha_fwd_hdimN without dropout, on a device that is not
// sm8x and has 227 KiB of shared memory per block): query rows, key rows, warps.
template <int HeadDim>
struct FwdTiles {
    static constexpr int kBlockM = HeadDim == 256 ? 64 : 128;
    static constexpr int kBlockN = HeadDim <= 64 ? 128 : 64;
    static constexpr int kWarps = HeadDim == 192 ? 8 : 4;
};

// One forward attention of FA2 over params (no split).
template <typename Element, int HeadDim, bool Causal>
void run_fwd(FLASH_NAMESPACE::Flash_fwd_params& params, cudaStream_t stream) {
    using Tiles = FwdTiles<HeadDim>;
    using Traits = ::Flash_fwd_kernel_traits<HeadDim, Tiles::kBlockM, Tiles::kBlockN, Tiles::kWarps, false, false, Element>;
    const int m_blocks = (params.seqlen_q + Traits::kBlockM - 1) / Traits::kBlockM;
    const dim3 grid(m_blocks, params.b, params.h);
    launch_detail::with_variant<Traits, HeadDim, Causal, /*Masks=*/true>(
        params, [&](auto even_mn, auto even_k, auto local, auto softcap) {
            launch_detail::launch_attention<Traits>(
                &FLASH_NAMESPACE::flash_fwd_kernel<Traits, /*Is_dropout=*/false, Causal, decltype(local)::value,
                                                   /*Has_alibi=*/false, decltype(even_mn)::value, decltype(even_k)::value,
                                                   decltype(softcap)::value, /*Return_softmax=*/false>,
                grid, params, stream);
        });
}

}  // namespace fas_fa2

#endif  // FAS_FA2_FWD_LAUNCH_CUH
