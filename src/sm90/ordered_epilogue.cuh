// Our epilogues for FlashInfer's SM90 prefill kernels.
//
// 16-bit kernels: Epilogue16, our own. It replaces the pinned upstream epilogue
// (flashinfer-python 0.7.2.post1, hopper/epilogue.cuh, CollectiveEpilogue::store), which
//
//  * races: every consumer thread does `bar.arrive` and then `bar.sync` on the same named barrier
//    with the count of consumer threads. Both instructions count arrivals, so the barrier can
//    complete with one warpgroup's arrive+sync before the other warpgroup has staged its rows in
//    shared memory; the early warpgroup then copies stale shared memory (last V tile, which smem_o
//    overlays) to global memory (docs/design/epilogue-race.md). After the copy nothing waits for
//    all consumer threads; only the last warp releases barrier_O, which lets the producer
//    TMA-load the next tile's V over smem_o while other warps may still read it;
//  * stores every column of the tile and needs head_dim / 8 to divide the consumer threads (no
//    head dim 96 or 192 with 128-row tiles).
//
// Here, where smem_o has bytes of its own: each warp stages its own 16 rows of the tile (the rows
// its accumulator holds) and copies them out itself, ordered by __syncwarp alone, so no warp
// waits for another and the warpgroups keep their ping-pong stagger into the next work item.
// Where smem_o overlays V (sm90/shared_storage.cuh): staging waits for all consumers to be done
// with V, then one full consumer barrier between staging and the copy, and one after the copy
// (which keeps the next tile's V and staging off smem_o until every copy is done). The copy
// to global memory predicates rows and columns: a kernel of head dim D serves a narrower head
// dim d (a multiple of 8, d <= D) whose tensors the mainloop reads through tensor maps of width
// d (TMA fills the missing columns with zeros, so they add nothing to Q.K and give zero output
// columns), and only d columns are written.
//
// FP8 kernels: Epilogue16 where smem_o has bytes of its own (head dims up to 192: it also serves
// their round-up, sm90/launch.cuh); at 256 the upstream epilogue (hopper/quantization/epilogue.cuh),
// which stages correctly (sync only) but has the second hazard (smem_o overlays smem_vt, refilled
// by the producer after barrier_O): that overlay gets the trailing barrier, through a
// specialization selected by our variant type.
#ifndef FAS_SM90_ORDERED_EPILOGUE_CUH
#define FAS_SM90_ORDERED_EPILOGUE_CUH

#include <type_traits>

#include <flashinfer/attention/hopper/named_barrier.cuh>
#include <flashinfer/attention/hopper/quantization/epilogue.cuh>
#include <flashinfer/attention/hopper/quantization/kernel_traits.cuh>
#include <flashinfer/attention/hopper/utils.cuh>
#include <flashinfer/attention/hopper/variants.cuh>

#include "sm90/shared_storage.cuh"
#include "sm90/softmax.cuh"

namespace fas_sm90 {

// FlashInfer's StandardFP8Attention under our own name, so that FP8 kernel traits built with it
// pick the FP8 epilogue below; its softmax is the kernels' (sm90/softmax.cuh). Where softmax_choice
// folds P's scale (kFoldPScale), P reaches e4m3's range through its exponent (2^(x + log2 448))
// instead of a multiply per score after the softmax (PQuantize), and O / sum needs only V's scale.
// Softcap: scores capped as cap * tanh(score / cap) (Fp8DescalesAndCap's cap), the descales and
// the softmax scale applied before the tanh and the cap folded into the softmax's scale, as
// FlashInfer's LogitsSoftCap does for 16-bit inputs.
template <int HeadDim, bool Softcap = false>
struct OrderedEpilogueFP8Attention : flashinfer::StandardFP8Attention {
    static constexpr bool kFoldPScale = softmax_choice(/*fp8=*/true, HeadDim, Softcap).fold_p_scale;
    // log2 of p_scale, e4m3's largest value (448; the FP8 kernels take e4m3 only): a constant, not
    // a MUFU.LG2 per work tile.
    static constexpr float kLog2PScale = 8.80735492205760410749f;
    float pre_tanh_scale = 1.f;  // softcap: (q, k descales) x softmax scale / cap

    template <typename MainloopParams, typename BlockCoord>
    __device__ OrderedEpilogueFP8Attention(const MainloopParams& params, const BlockCoord& block_coord)
        : flashinfer::StandardFP8Attention(params, block_coord) {
        static_assert(!kFoldPScale || std::is_same_v<typename MainloopParams::DTypeKV, cutlass::float_e4m3_t>,
                      "kLog2PScale is e4m3's");
        if constexpr (kFoldPScale) scale_pv *= p_scale;  // v_scale: the row sums carry p_scale too
        if constexpr (Softcap) {
            const float cap = params.additional_params.logits_soft_cap;
            pre_tanh_scale = sm_scale_with_qk_log2 * (1.f / flashinfer::math::log2e) / cap;
            sm_scale_with_qk_log2 = flashinfer::math::log2e * cap;
        }
    }

    template <int NUM_ROWS_PER_THREAD>
    __device__ auto GetAttentionUpdater() {
        Softmax<NUM_ROWS_PER_THREAD, HeadDim, /*Fp8=*/true, Softcap> updater(sm_scale_with_qk_log2);
        if constexpr (kFoldPScale) updater.log2_prescale = kLog2PScale;
        return updater;
    }

    template <typename Tensor0>
    __device__ __forceinline__ void PQuantize(Tensor0& tSrS) {
        if constexpr (!kFoldPScale) flashinfer::StandardFP8Attention::PQuantize(tSrS);
    }

    REGISTER_LOGITS_TRANSFORM(params, logits, batch_idx, qo_idx, kv_idx, qo_head_idx, kv_head_idx, {
        if constexpr (Softcap) return flashinfer::math::tanh(logits * pre_tanh_scale);
        return logits;
    })
};

// Threads that copy one output row: 16-byte vectors, a power of two that divides the row's
// vectors, at most 32 (head dim 64: 8, 96: 4, 128: 16, 192: 8, 256: 32).
constexpr int copy_threads_per_row(int vectors) {
    int threads = 1;
    while (threads < 32 && vectors % (threads * 2) == 0) threads *= 2;
    return threads;
}

// The output's head dim: HEAD_DIM_VO of the 16-bit traits, HEAD_DIM of the FP8 ones.
template <typename Traits, typename = void>
struct OutputHeadDim {
    static constexpr int value = Traits::HEAD_DIM;
};
template <typename Traits>
struct OutputHeadDim<Traits, std::void_t<decltype(Traits::HEAD_DIM_VO)>> {
    static constexpr int value = Traits::HEAD_DIM_VO;
};

template <typename Traits>
struct Epilogue16 {
    using DTypeO = typename Traits::DTypeO;
    static constexpr int kCtaQ = Traits::CTA_Q;
    static constexpr int kHeadDim = OutputHeadDim<Traits>::value;
    static constexpr int kConsumers = Traits::NUM_MMA_THREADS;
    using TileO = cute::Shape<cute::Int<kCtaQ>, cute::Int<kHeadDim>>;
    using SmemLayoutO = typename Traits::SmemLayoutO;
    using StageAtom = cute::Copy_Atom<cute::SM90_U32x4_STSM_N, DTypeO>;

    static constexpr int kVector = 16 / sizeof(DTypeO);
    static constexpr int kThreadsPerRow = copy_threads_per_row(kHeadDim / kVector);
    static_assert(kConsumers % kThreadsPerRow == 0, "consumer threads must tile the output rows");
    // 16-byte vectors, kThreadsPerRow threads a row, over `threads` threads.
    template <int threads>
    using RowCopy = decltype(cute::make_tiled_copy(
        cute::Copy_Atom<cute::UniversalCopy<cutlass::uint128_t>, DTypeO>{},
        cute::make_layout(cute::make_shape(cute::Int<threads / kThreadsPerRow>{}, cute::Int<kThreadsPerRow>{}),
                          cute::LayoutRight{}),
        cute::make_layout(cute::make_shape(cute::_1{}, cute::Int<kVector>{}), cute::LayoutRight{})));
    using CopyOut = RowCopy<kConsumers>;  // the whole tile over every consumer thread
    // A warp's rows: a warpgroup's accumulator gives warp w rows 16 w to 16 w + 15.
    static constexpr int kWarpRows = 16;
    static_assert(kCtaQ == kWarpRows * (kConsumers / cutlass::NumThreadsPerWarp), "16 rows a consumer warp");
    static_assert(kWarpRows % (cutlass::NumThreadsPerWarp / kThreadsPerRow) == 0, "a warp's copy tiles its rows");
    using CopyWarp = RowCopy<cutlass::NumThreadsPerWarp>;
    using TileWarp = cute::Shape<cute::Int<kWarpRows>, cute::Int<kHeadDim>>;

    // out: (rows, head dim, heads) with the real head dim (<= kHeadDim); LSE token-major.
    using LayoutO = cute::Layout<cute::Shape<int32_t, int32_t, int32_t>, cute::Stride<int64_t, cute::_1, int64_t>>;
    using LayoutLse = cute::Layout<cute::Shape<int32_t, int32_t>, cute::Stride<cute::_1, int64_t>>;
    struct Arguments {
        DTypeO* O_ptr;
        LayoutO layout_O;
        float* lse_ptr;
        LayoutLse layout_LSE;
    };
    using Params = Arguments;

    static Params to_underlying_arguments(const Arguments& args) { return args; }
    CUTLASS_DEVICE static void prefetch_tma_descriptors(const Params&) {}
    CUTLASS_DEVICE void store_tail() {}

    // Barriers over all consumer threads (the producer warpgroup takes no part in the epilogue).
    template <typename Id>
    static CUTLASS_DEVICE void consumers_sync(Id id) {
        cutlass::arch::NamedBarrier::sync(kConsumers, static_cast<int>(id));
    }

    // The query tile a work item stores: its index within the sequence, its query head, the
    // sequence's first row and length.
    struct Where {
        int tile, qo_head, qo_start, qo_len;
        CUTLASS_DEVICE int rows_left() const { return qo_len - tile * kCtaQ; }
    };
    template <typename BlockCoord>
    static CUTLASS_DEVICE Where where(const BlockCoord& block_coord) {
        return {cute::get<0>(block_coord), cute::get<1>(block_coord), cute::get<3>(block_coord),
                cute::get<5>(block_coord)};
    }

    // The tile's rows of out (all kHeadDim columns; only the real ones may be written).
    static CUTLASS_DEVICE auto out_tile(const Params& params, const Where& at) {
        using namespace cute;
        Tensor out = make_tensor(make_gmem_ptr(params.O_ptr + int64_t(at.qo_start) * stride<0>(params.layout_O)),
                                 params.layout_O);
        return flashinfer::get_local_tile_tensor(out, TileO{}, at.qo_head, 0, at.qo_len)(_, _, at.tile);
    }

    static CUTLASS_DEVICE auto lse_tile(const Params& params, const Where& at) {
        using namespace cute;
        return flashinfer::get_lse_local_tile_tensor(make_tensor(make_gmem_ptr(params.lse_ptr), params.layout_LSE),
                                                     Shape<Int<kCtaQ>>{}, at.qo_head, at.qo_start, at.qo_len)(_, at.tile);
    }

    // Copies this thread's vectors of src (its partition, as thread `idx` of Copy, of a tile like
    // dst) that fall inside dst's first rows_left rows and first `columns` columns to dst.
    template <typename Copy, typename Src, typename Dst>
    static CUTLASS_DEVICE void copy_inside(const Src& src, Dst dst_tile, int idx, int rows_left, int columns) {
        using namespace cute;
        Copy copy_op;
        auto thread_copy = copy_op.get_slice(idx);
        Tensor dst = flashinfer::flatten_1(thread_copy.partition_D(dst_tile));
        if (rows_left >= int(size<0>(dst_tile)) && columns == kHeadDim) {
            copy(copy_op, src, dst);
        } else {
            Tensor coords = flashinfer::flatten_1(thread_copy.partition_D(make_identity_tensor(shape(dst_tile))));
            auto inside = [&](auto i) {
                auto coord = coords(_0{}, i);
                return get<0>(coord) < rows_left && get<1>(coord) < columns;
            };
            copy_if(copy_op, inside, src, dst);
        }
    }

    template <typename BlockCoord, typename SharedStorage, typename FrgTensorO, typename FrgTensorLSE,
              typename TiledMma>
    CUTLASS_DEVICE void store(const Params& params, const FrgTensorO& acc_o, const FrgTensorLSE& row_lse,
                              SharedStorage& shared_storage, TiledMma tiled_mma, int thread_idx,
                              const BlockCoord& block_coord) {
        using namespace cute;
        const Where at = where(block_coord);
        const int columns = get<1>(params.layout_O.shape());
        Tensor staged = make_tensor(make_smem_ptr(shared_storage.smem_o.data()), SmemLayoutO{});
        constexpr bool kOverlay = kOOverlaysV<SharedStorage>;

        // Where smem_o overlays smem_v, no consumer may still be reading V; else this warp's
        // lanes are done copying its rows of the previous tile.
        if constexpr (kOverlay) {
            consumers_sync(flashinfer::NamedBarriers::kValueEmpty);
        } else {
            __syncwarp();
        }
        {
            auto stsm = make_tiled_copy_C(StageAtom{}, tiled_mma);
            auto thread_stsm = stsm.get_thread_slice(thread_idx);
            Tensor narrowed = flashinfer::convert_type<DTypeO>(acc_o);
            copy(stsm, thread_stsm.retile_S(narrowed), thread_stsm.partition_D(staged));
        }

        // LSE straight from registers: the thread that holds column 0 of a row writes it.
        if (params.lse_ptr != nullptr) {
            Tensor lse_rows = lse_tile(params, at);
            Tensor coords = tiled_mma.get_thread_slice(thread_idx).partition_C(make_identity_tensor(TileO{}));
            Tensor row_coords = coords(make_coord(_0{}, _, _0{}), _, _0{});
            if (get<1>(row_coords(_0{})) == 0) {
                CUTLASS_PRAGMA_UNROLL
                for (int i = 0; i < size(row_lse); ++i) {
                    const int row = get<0>(row_coords(i));
                    if (row < at.rows_left()) lse_rows(row) = row_lse(i);
                }
            }
        }

        if constexpr (kOverlay) {
            // Every warpgroup's rows are staged before anyone copies the tile out.
            consumers_sync(cutlass::arch::ReservedNamedBarriers::EpilogueBarrier);
            copy_inside<CopyOut>(flashinfer::flatten_1(CopyOut{}.get_slice(thread_idx).partition_S(staged)),
                                 out_tile(params, at), thread_idx, at.rows_left(), columns);
            // Nobody reads smem_o any more once the last warp lets the producer refill V (barrier_O),
            // nor once the next tile is staged.
            consumers_sync(flashinfer::NamedBarriers::kValueEmpty);
        } else {
            // This warp's rows only: its own lanes staged them. The warp index goes through a
            // shuffle: derived from thread_idx alone, ptxas re-read threadIdx inside the key loop
            // (two S2R and two SHF a tile at hd96: 1-2% on long sequences).
            __syncwarp();
            const int warp = __shfl_sync(0xffffffff, thread_idx / cutlass::NumThreadsPerWarp, 0);
            const int lane = cutlass::canonical_lane_idx();
            Tensor rows = local_tile(staged, TileWarp{}, make_coord(warp, _0{}));
            copy_inside<CopyWarp>(flashinfer::flatten_1(CopyWarp{}.get_slice(lane).partition_S(rows)),
                                  local_tile(out_tile(params, at), TileWarp{}, make_coord(warp, _0{})), lane,
                                  at.rows_left() - warp * kWarpRows, columns);
        }
    }

    // A query tile that sees no key: zero output and LSE -infinity (log2 units, as store's).
    template <typename BlockCoord, typename SharedStorage>
    CUTLASS_DEVICE void store_zero(const Params& params, SharedStorage&, int thread_idx,
                                   const BlockCoord& block_coord) {
        using namespace cute;
        const Where at = where(block_coord);
        Tensor zeros = make_fragment_like(
            flashinfer::flatten_1(CopyOut{}.get_slice(thread_idx).partition_D(out_tile(params, at))));
        clear(zeros);
        copy_inside<CopyOut>(zeros, out_tile(params, at), thread_idx, at.rows_left(), get<1>(params.layout_O.shape()));
        if (params.lse_ptr != nullptr && thread_idx < kCtaQ && thread_idx < at.rows_left()) {
            lse_tile(params, at)(thread_idx) = -INFINITY;
        }
    }
};

}  // namespace fas_sm90

namespace flashinfer {

template <bool kUseTmaLoadKV, int kHeadDim, int kCtaQ, int kCtaKV, int kStages, typename DTypeQ, typename DTypeKV,
          typename DTypeO, typename IdType, bool kSoftcap>
struct FP8CollectiveEpilogue<FP8AttentionKernelTraits<kUseTmaLoadKV, kHeadDim, kCtaQ, kCtaKV, kStages, DTypeQ, DTypeKV,
                                                      DTypeO, IdType,
                                                      fas_sm90::OrderedEpilogueFP8Attention<kHeadDim, kSoftcap>>>
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
