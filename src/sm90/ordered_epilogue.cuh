// Our epilogues for FlashInfer's SM90 prefill kernels (fp16/bf16 and FP8), selected through our
// own attention variant types. It fixes a race in the pinned upstream epilogue (flashinfer-python
// 0.7.2.post1, hopper/epilogue.cuh, CollectiveEpilogue::store):
//
//  * Every consumer thread does `bar.arrive` and then `bar.sync` on the same named barrier with
//    the count of consumer threads. Both instructions count arrivals, so the barrier can complete
//    with one warpgroup's arrive+sync before the other warpgroup has staged its rows in shared
//    memory; the early warpgroup then copies stale shared memory (last V tile, which smem_o
//    overlays) to global memory (docs/design/epilogue-race.md).
//  * After the shared-to-global copy nothing waits for all consumer threads; only the last warp
//    releases barrier_O, which lets the producer TMA-load the next tile's V over smem_o. Without
//    the warp scheduler barrier (hdim 256) other warps can still be reading smem_o then.
//
// Here: one full consumer barrier between staging and the copy, and one after the copy (which
// also keeps the next tile's staging off smem_o until every copy is done). Where smem_o overlays
// V (sm90/shared_storage.cuh), staging waits for all consumers to be done with V first.
// Everything else (layouts, params, store_zero) is the upstream epilogue's, inherited. The FP8
// epilogue (hopper/quantization/epilogue.cuh) stages correctly (sync only) but has the second
// hazard (smem_o overlays smem_vt, refilled by the producer after barrier_O; at hdim 64 no warp
// scheduler barrier orders the warpgroups): where that overlay exists it gets the trailing
// barrier.
#ifndef FAS_SM90_ORDERED_EPILOGUE_CUH
#define FAS_SM90_ORDERED_EPILOGUE_CUH

#include <flashinfer/attention/hopper/epilogue.cuh>
#include <flashinfer/attention/hopper/kernel_traits.cuh>
#include <flashinfer/attention/hopper/named_barrier.cuh>
#include <flashinfer/attention/hopper/quantization/epilogue.cuh>
#include <flashinfer/attention/hopper/quantization/kernel_traits.cuh>
#include <flashinfer/attention/hopper/variants.cuh>

#include "sm90/shared_storage.cuh"

namespace fas_sm90 {

// FlashInfer's StandardAttention under our own name, so that kernel traits built with it pick
// the epilogue below; the attention math is unchanged.
struct OrderedEpilogueAttention : flashinfer::StandardAttention {
    using flashinfer::StandardAttention::StandardAttention;
};

// Likewise for the FP8 kernels' StandardFP8Attention.
struct OrderedEpilogueFP8Attention : flashinfer::StandardFP8Attention {
    using flashinfer::StandardFP8Attention::StandardFP8Attention;
};

}  // namespace fas_sm90

namespace flashinfer {

template <bool kUseTmaLoadKV, int kHeadDimQK, int kHeadDimVO, int kCtaQ, int kCtaKV, int kStages, typename DTypeQ,
          typename DTypeKV, typename DTypeO, typename IdType>
struct CollectiveEpilogue<AttentionKernelTraits<kUseTmaLoadKV, kHeadDimQK, kHeadDimVO, kCtaQ, kCtaKV, kStages, DTypeQ,
                                                DTypeKV, DTypeO, IdType, fas_sm90::OrderedEpilogueAttention>>
    : CollectiveEpilogue<AttentionKernelTraits<kUseTmaLoadKV, kHeadDimQK, kHeadDimVO, kCtaQ, kCtaKV, kStages, DTypeQ,
                                               DTypeKV, DTypeO, IdType, StandardAttention>> {
    using Upstream = CollectiveEpilogue<AttentionKernelTraits<kUseTmaLoadKV, kHeadDimQK, kHeadDimVO, kCtaQ, kCtaKV,
                                                              kStages, DTypeQ, DTypeKV, DTypeO, IdType,
                                                              StandardAttention>>;
    using typename Upstream::Params;

    // Barriers over all consumer threads (the producer warpgroup takes no part in the epilogue).
    static CUTLASS_DEVICE void consumers_sync(NamedBarriers id) {
        cutlass::arch::NamedBarrier::sync(Upstream::NUM_MMA_THREADS, static_cast<int>(id));
    }
    static CUTLASS_DEVICE void consumers_sync(cutlass::arch::ReservedNamedBarriers id) {
        cutlass::arch::NamedBarrier::sync(Upstream::NUM_MMA_THREADS, id);
    }

    template <typename BlockCoord, typename SharedStorage, typename FrgTensorO, typename FrgTensorLSE,
              typename TiledMma>
    CUTLASS_DEVICE void store(Params const& params, FrgTensorO const& acc_o, FrgTensorLSE const& row_lse,
                              SharedStorage& shared_storage, TiledMma tiled_mma, int thread_idx,
                              BlockCoord const& block_coord) {
        using namespace cute;
        const int tile = get<0>(block_coord);
        const int qo_head = get<1>(block_coord);
        const int qo_start = get<3>(block_coord);
        const int qo_len = get<5>(block_coord);
        const int rows_left = qo_len - tile * Upstream::CTA_Q;

        Tensor staged = make_tensor(make_smem_ptr(shared_storage.smem_o.data()), typename Upstream::SmemLayoutO{});

        // Where smem_o overlays smem_v, no consumer may still be reading V.
        if constexpr (fas_sm90::kOOverlaysV<SharedStorage>) consumers_sync(NamedBarriers::kValueEmpty);
        {
            auto stsm = make_tiled_copy_C(typename Upstream::SmemCopyAtomO{}, tiled_mma);
            auto thread_stsm = stsm.get_thread_slice(thread_idx);
            Tensor narrowed = convert_type<typename Upstream::DTypeO>(acc_o);
            cute::copy(stsm, thread_stsm.retile_S(narrowed), thread_stsm.partition_D(staged));
        }

        // LSE straight from registers: the thread that holds column 0 of a row writes it.
        if (params.lse_ptr != nullptr) {
            Tensor lse_rows = get_lse_local_tile_tensor(make_tensor(make_gmem_ptr(params.lse_ptr), params.layout_LSE),
                                                        Shape<Int<Upstream::CTA_Q>>{}, qo_head, qo_start,
                                                        qo_len)(_, tile);
            Tensor coords = tiled_mma.get_thread_slice(thread_idx)
                                .partition_C(make_identity_tensor(select<0, 1>(typename Upstream::TileShape_PDV{})));
            Tensor row_coords = coords(make_coord(_0{}, _, _0{}), _, _0{});
            if (get<1>(row_coords(_0{})) == 0) {
                CUTLASS_PRAGMA_UNROLL
                for (int i = 0; i < size(row_lse); ++i) {
                    const int row = get<0>(row_coords(i));
                    if (row < rows_left) lse_rows(row) = row_lse(i);
                }
            }
        }

        // Every warpgroup's rows are staged before anyone copies the tile out.
        consumers_sync(cutlass::arch::ReservedNamedBarriers::EpilogueBarrier);
        typename Upstream::TiledCopyO copy_out;
        write_O<Upstream::NUM_COPY_THREADS>(params.O_ptr, copy_out, params.layout_O,
                                            select<0, 1>(typename Upstream::TileShape_PDV{}), staged, thread_idx,
                                            tile, qo_head, qo_start, qo_len, Upstream::NUM_WARPS - 1);
        // Nobody reads smem_o any more once the last warp lets the producer refill V (barrier_O),
        // nor once the next tile is staged.
        consumers_sync(NamedBarriers::kValueEmpty);
    }
};

template <bool kUseTmaLoadKV, int kHeadDim, int kCtaQ, int kCtaKV, int kStages, typename DTypeQ, typename DTypeKV,
          typename DTypeO, typename IdType>
struct FP8CollectiveEpilogue<FP8AttentionKernelTraits<kUseTmaLoadKV, kHeadDim, kCtaQ, kCtaKV, kStages, DTypeQ, DTypeKV,
                                                      DTypeO, IdType, fas_sm90::OrderedEpilogueFP8Attention>>
    : FP8CollectiveEpilogue<FP8AttentionKernelTraits<kUseTmaLoadKV, kHeadDim, kCtaQ, kCtaKV, kStages, DTypeQ, DTypeKV,
                                                     DTypeO, IdType, StandardFP8Attention>> {
    using Upstream = FP8CollectiveEpilogue<FP8AttentionKernelTraits<kUseTmaLoadKV, kHeadDim, kCtaQ, kCtaKV, kStages,
                                                                    DTypeQ, DTypeKV, DTypeO, IdType,
                                                                    StandardFP8Attention>>;

    template <typename BlockCoord, typename SharedStorage, typename FrgTensorO, typename FrgTensorLSE,
              typename TiledMma>
    CUTLASS_DEVICE void store(typename Upstream::Params const& params, FrgTensorO const& acc_o,
                              FrgTensorLSE const& row_lse, SharedStorage& shared_storage, TiledMma tiled_mma,
                              int thread_idx, BlockCoord const& block_coord) {
        Upstream::store(params, acc_o, row_lse, shared_storage, tiled_mma, thread_idx, block_coord);
        // Nobody reads smem_o any more once the last warp lets the producer refill it (barrier_O).
        // In our own layout the next store's leading barrier orders the reuse of smem_o.
        if constexpr (fas_sm90::kOOverlaysV<SharedStorage>) {
            cutlass::arch::NamedBarrier::sync(Upstream::NUM_MMA_THREADS, static_cast<int>(NamedBarriers::kValueEmpty));
        }
    }
};

}  // namespace flashinfer

#endif  // FAS_SM90_ORDERED_EPILOGUE_CUH
