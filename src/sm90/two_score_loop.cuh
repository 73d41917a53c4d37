// The consumer loop with a second score tile in flight (issue 35; docs/design/sm90-mainloop-plan.md,
// "Two score tiles"), for the FP8 kernels and the 16-bit softcap ones. The pinned loops
// (FlashInfer's mma_fp8 and mma_f16) issue QK^T of tile n with PV of tile n-1 and run tile n's
// softmax once QK^T is done; where the exponentials (FP8: GEMMs half as long; softcap: a tanh per
// score too) fill the XU pipe as long as the GEMMs fill the tensor pipe, ncu puts the two one
// after the other. Here each step issues PV of tile n-1 and QK^T of tile n+1 together, then runs
// tile n's softmax (issued a step earlier), so a GEMM of the warpgroup's own runs beside its
// exponentials: ptxas places the PV wait after the row max, as in the pinned loops, but QK^T of
// n+1 stays in flight.
//
//   step n:  rescale O | PV(P[n-1], V[n-1]), QK(K[n+1]) -> S[(n+1)%2] | wait QK(n) | mask, softmax
//            S[n%2] | wait PV(n-1) | P = S[n%2] in the PV operand's type
//
// The second S costs kv/2 registers a thread, so the tiles narrow where it is on
// (two_score_tiles, sm90/tiles.h): FP8 128 keys at hd128 (three stages, since K is read a tile
// further ahead of V), 64 at hd256; softcap 96 at hd128. The two S tiles swap roles every step;
// the loop body holds two steps so that each role is a register set of its own. The masked
// steps (the first, and the causal diagonal's after it) are peeled off before the loop; a left
// window's edge tiles, the last ones, take their mask in the loop (a uniform branch). Every
// lambda is forced inline: a GEMM pipeline that crosses a call is serialized by ptxas (C7520).
//
// It replaces the pinned loops through argument-dependent lookup: the pinned kernels call
// mma_fp8 and mma_f16 unqualified with our variants, and these overloads, on
// OrderedEpilogueFP8Attention<HeadDim>& and SoftcapAttention<HeadDim>&, are the more specialized
// ones wherever they exist (two_score_tiles). The contract is the pinned loops': tiles from the
// last to the first (to a left window's first), K and V states advanced by the tiles read, Q
// released to the producer (kQueryEmpty) after the last QK^T, O scaled and the LSE in the updater.
#ifndef FAS_SM90_TWO_SCORE_LOOP_CUH
#define FAS_SM90_TWO_SCORE_LOOP_CUH

#include <type_traits>

#include <cute/tensor.hpp>
#include <cutlass/numeric_conversion.h>

#include <flashinfer/attention/hopper/named_barrier.cuh>
#include <flashinfer/attention/hopper/utils.cuh>
#include <flashinfer/attention/hopper/variants.cuh>

#include "sm90/ordered_epilogue.cuh"
#include "sm90/tiles.h"

namespace fas_sm90 {

template <int HeadDim>
struct SoftcapAttention;  // sm90/launch.cuh

// P as the PV GEMM's A operand: the scores converted in one array conversion; e4m3 then in the
// byte order of FlashInfer's FP8 A fragments (permute_regs_A_to_C).
template <typename Scores, typename Fragment>
CUTLASS_DEVICE void scores_to_p(const Scores& scores, Fragment& p) {
    using To = typename Fragment::value_type;
    constexpr int kCount = decltype(cute::size(scores))::value;
    static_assert(kCount == decltype(cute::size(p))::value, "P holds one value a score");
    cutlass::NumericArrayConverter<To, float, kCount, cutlass::FloatRoundStyle::round_to_nearest> convert;
    *reinterpret_cast<cutlass::Array<To, kCount>*>(p.data()) =
        convert(*reinterpret_cast<const cutlass::Array<float, kCount>*>(scores.data()));
    if constexpr (std::is_same_v<To, cutlass::float_e4m3_t>) flashinfer::permute_regs_A_to_C(p);
}

// The loop itself; the pinned loops' arguments. pipeline_v is V^T's pipeline in the FP8 kernels.
template <typename Ktraits, bool LEFT_SLIDING_WINDOW, bool CAUSAL, typename WarpScheduler, typename Variant,
          typename Params, typename PipelineK, typename PipelineV, typename PipelineState, typename SharedStorage,
          typename FrgTensorO, typename AttentionUpdater>
CUTLASS_DEVICE void two_score_loop(const Params& mainloop_params, Variant& variant, PipelineK pipeline_k,
                                   PipelineV pipeline_v, PipelineState& smem_pipe_read_k,
                                   PipelineState& smem_pipe_read_v, FrgTensorO& tOrO,
                                   AttentionUpdater& attention_updater, int kv_tile_idx_count,
                                   int swa_begin_kv_tile_idx, int swa_end_kv_tile_idx, int thread_idx, int work_idx,
                                   int q_tile_idx, SharedStorage& shared_storage, const int32_t qo_len,
                                   const int32_t kv_len, const int32_t qo_head_idx, const int32_t kv_head_idx,
                                   const int32_t batch_idx) {
    using namespace cute;
    static_assert(flashinfer::is_rmem<FrgTensorO>::value, "O lives in registers");
    using TileShape = typename Ktraits::TileShape_QKD;
    using DTypeKV = typename Ktraits::DTypeKV;
    constexpr bool kFp8 = std::is_same_v<DTypeKV, cutlass::float_e4m3_t>;
    constexpr int kCtaQ = get<0>(TileShape{});
    constexpr int kCtaKV = get<1>(TileShape{});
    // Tiles that can hold keys past a row's causal bound, after the last one (the pinned loop's
    // count): the steps peeled off before the loop, whose steps are mask-free.
    constexpr int kCausalTiles = CAUSAL ? ceil_div(kCtaQ, kCtaKV) : 0;
    static_assert(kCausalTiles <= 2, "the causal loop peels one or two masked steps");

    Tensor sQ = make_tensor(make_smem_ptr(shared_storage.smem_q.data()), typename Ktraits::SmemLayoutQ{});
    Tensor sK = make_tensor(make_smem_ptr(shared_storage.smem_k.data()), typename Ktraits::SmemLayoutK{});
    // V^T: the FP8 producer's transposed copy; the 16-bit kernels read V through a transposed layout.
    const auto v_bytes = [&]() CUTLASS_LAMBDA_FUNC_INLINE {
        if constexpr (kFp8) {
            return shared_storage.smem_vt.data();
        } else {
            return shared_storage.smem_v.data();
        }
    };
    Tensor sVt = make_tensor(make_smem_ptr(v_bytes()), typename Ktraits::SmemLayoutVt{});
    typename Ktraits::TiledMmaQK mma_qk;
    typename Ktraits::TiledMmaPV mma_pv;
    auto thread_qk = mma_qk.get_thread_slice(thread_idx);
    auto thread_pv = mma_pv.get_thread_slice(thread_idx);
    Tensor tSrQ = thread_qk.partition_fragment_A(sQ);
    Tensor tSrK = thread_qk.partition_fragment_B(sK);
    Tensor tOrV = thread_pv.partition_fragment_B(sVt);
    Tensor tScS = thread_qk.partition_C(make_identity_tensor(select<0, 1>(TileShape{})));

    // The two score tiles and P (the PV GEMM's A operand, from registers).
    Tensor s0 = partition_fragment_C(mma_qk, select<0, 1>(TileShape{}));
    Tensor s1 = partition_fragment_C(mma_qk, select<0, 1>(TileShape{}));
    const auto p_layout = [](auto score_layout) CUTLASS_LAMBDA_FUNC_INLINE {
        if constexpr (kFp8) {
            return flashinfer::convert_layout_acc_Aregs_fp8(score_layout);
        } else {
            return flashinfer::convert_layout_acc_Aregs<typename Ktraits::TiledMmaPV>(score_layout);
        }
    };
    Tensor tOrP = make_tensor<DTypeKV>(p_layout(s0.layout()));

    const auto wait = [](auto& pipeline, const auto& state) CUTLASS_LAMBDA_FUNC_INLINE {
        pipeline.consumer_wait(state, pipeline.consumer_try_wait(state));
    };
    // K's read state is the next tile to release; the tile after it, the one a step multiplies
    // ahead, is one stage on (derived, not a third state kept across the loop).
    const auto following = [](PipelineState state) CUTLASS_LAMBDA_FUNC_INLINE {
        ++state;
        return state;
    };
    const auto issue_qk = [&](auto& scores, const PipelineState& k) CUTLASS_LAMBDA_FUNC_INLINE {
        flashinfer::gemm</*init=*/true, /*wg_wait=*/-1>(mma_qk, tSrQ, tSrK(_, _, _, k.index()), scores);
    };
    // Tile `tile`'s scores, with the mask where a tile can hold keys past a row's bound (the last
    // tile: past kv_len; causal: past the row's diagonal too), and a left window's where a tile can
    // hold keys before a row's window: the masked steps and the last tiles (from swa_end down).
    const auto transform = [&](auto& scores, int tile, auto masked) CUTLASS_LAMBDA_FUNC_INLINE {
#pragma unroll
        for (int i = 0; i < size(scores); ++i) {
            const int qo = get<0>(tScS(i)) + q_tile_idx * kCtaQ;
            const int kv = get<1>(tScS(i)) + tile * kCtaKV;
            scores(i) = variant.LogitsTransform(mainloop_params, scores(i), batch_idx, qo, kv, qo_head_idx, kv_head_idx);
            const int bound = CAUSAL ? min(kv_len, qo + 1 + kv_len - qo_len) : kv_len;
            if (decltype(masked)::value && kv >= bound) scores(i) = AttentionUpdater::fill_value;
        }
        if constexpr (LEFT_SLIDING_WINDOW) {
            if (decltype(masked)::value || tile <= swa_end_kv_tile_idx) {
#pragma unroll
                for (int i = 0; i < size(scores); ++i) {
                    const int qo = get<0>(tScS(i)) + q_tile_idx * kCtaQ;
                    const int kv = get<1>(tScS(i)) + tile * kCtaKV;
                    if (kv < qo + kv_len - qo_len - mainloop_params.window_left) scores(i) = AttentionUpdater::fill_value;
                }
            }
        }
    };

    // Tiles from the last down to a left window's first (the pinned loops' and the producer's
    // range: at least one, since the window's first tile is never past the last).
    const int tiles = LEFT_SLIDING_WINDOW ? kv_tile_idx_count - swa_begin_kv_tile_idx : kv_tile_idx_count;
    int tile = kv_tile_idx_count - 1;
    if (static_cast<cutlass::BarrierStatus>(shared_storage.barrier_Q.try_wait(work_idx % 2)) ==
        cutlass::BarrierStatus::WaitAgain) {
        shared_storage.barrier_Q.wait(work_idx % 2);
    }
    // The first step: QK^T of the last tile and, where `two`, of the tile before it, whose product
    // runs while the first tile's softmax does. Two copies, not a branch around the second GEMM:
    // a conditional GEMM makes the compiler merge s1's registers at the join, and ptxas then
    // serializes every GEMM of the kernel (C7514).
    const auto first_step = [&](auto two) CUTLASS_LAMBDA_FUNC_INLINE {
        constexpr bool kTwo = decltype(two)::value;
        // The previous work tile's output has left smem_o. The pinned loop signals it after its
        // first GEMM; here it must come before the wait for the second K tile, which the producer
        // loads only after this signal (sm90/fp8_producer.cuh: barrier_O, then the loop's loads).
        if (work_idx != 0) {
            const int lane_predicate = cute::elect_one_sync();
            if (cutlass::canonical_warp_idx_sync() == Ktraits::NUM_WARPS - 1 && lane_predicate) {
                shared_storage.barrier_O.arrive(0, lane_predicate);
            }
        }
        wait(pipeline_k, smem_pipe_read_k);
        if constexpr (kTwo) wait(pipeline_k, following(smem_pipe_read_k));
        WarpScheduler::barrier_sync();
        issue_qk(s0, smem_pipe_read_k);
        if constexpr (kTwo) issue_qk(s1, following(smem_pipe_read_k));
        WarpScheduler::barrier_arrive();
        warpgroup_wait<kTwo ? 1 : 0>();
        pipeline_k.consumer_release(smem_pipe_read_k);
        ++smem_pipe_read_k;
        transform(s0, tile, /*masked=*/std::true_type{});
        attention_updater.template update</*init=*/true>(s0);
        if constexpr (kFp8) variant.PQuantize(s0);
        scores_to_p(s0, tOrP);
    };

    // A step with `current` = the tile whose QK^T is in flight, `next` free; `masked` where the
    // tile may hold keys past a row's causal bound.
    const auto step = [&](auto& current, auto& next, auto has_next, auto masked) CUTLASS_LAMBDA_FUNC_INLINE {
        constexpr bool kNext = decltype(has_next)::value;
        --tile;
        attention_updater.rescale_o(tOrO);
        wait(pipeline_v, smem_pipe_read_v);
        if constexpr (kNext) wait(pipeline_k, following(smem_pipe_read_k));
        WarpScheduler::barrier_sync();
        flashinfer::gemm</*init=*/false, /*wg_wait=*/-1>(mma_pv, tOrP, tOrV(_, _, _, smem_pipe_read_v.index()), tOrO);
        if constexpr (kNext) issue_qk(next, following(smem_pipe_read_k));
        WarpScheduler::barrier_arrive();
        if constexpr (kNext) {
            warpgroup_wait<2>();  // this tile's QK^T; PV and the next QK^T still run
        } else {
            warpgroup_wait<1>();
        }
        pipeline_k.consumer_release(smem_pipe_read_k);
        ++smem_pipe_read_k;
        transform(current, tile, masked);
        attention_updater.template update</*init=*/false>(current);
        if constexpr (kFp8) variant.PQuantize(current);
        if constexpr (kNext) {
            warpgroup_wait<1>();  // PV: P's registers are free
        } else {
            warpgroup_wait<0>();
        }
        pipeline_v.consumer_release(smem_pipe_read_v);
        ++smem_pipe_read_v;
        scores_to_p(current, tOrP);
    };
    // The steps past the masked ones (a left window's edge tiles mask behind a uniform branch), from
    // `done` tiles done (< tiles) to the end; `a` holds the scores of the tile in flight, and the
    // two score tiles swap roles every step.
    const auto unmasked_steps = [&](int done, auto& a, auto& b) CUTLASS_LAMBDA_FUNC_INLINE {
        // The caller has tested done < tiles; told so, the compiler leaves no QK^T in flight into the
        // tail past a loop that might not run (ptxas would serialize: C7514, the causal softcap kernel).
        __builtin_assume(done < tiles);
#pragma unroll 1
        for (; done < tiles; done += 2) {
            if (done + 1 < tiles) {
                step(a, b, std::true_type{}, std::false_type{});
            } else {
                step(a, b, std::false_type{}, std::false_type{});
                break;
            }
            if (done + 2 < tiles) {
                step(b, a, std::true_type{}, std::false_type{});
            } else {
                step(b, a, std::false_type{}, std::false_type{});
                break;
            }
        }
    };
    // Tests as <=, not ==: each branch then tells the compiler that what follows it has tiles left
    // (a first step's second GEMM left in flight into the tail would serialize: C7514).
    if (tiles <= 1) {
        first_step(std::false_type{});
    } else if constexpr (CAUSAL) {
        // The masked steps, each one the last where the tiles end there.
        first_step(std::true_type{});
        if (tiles <= 2) {
            step(s1, s0, std::false_type{}, std::true_type{});
        } else {
            step(s1, s0, std::true_type{}, std::true_type{});
            if constexpr (kCausalTiles == 1) {
                unmasked_steps(2, s0, s1);
            } else if (tiles <= 3) {
                step(s0, s1, std::false_type{}, std::true_type{});
            } else {
                step(s0, s1, std::true_type{}, std::true_type{});
                unmasked_steps(3, s1, s0);
            }
        }
    } else {
        first_step(std::true_type{});
        unmasked_steps(1, s1, s0);
    }

    // Every QK^T has finished: Q's buffer is the producer's again.
    cutlass::arch::NamedBarrier::arrive(Ktraits::NUM_MMA_THREADS + Ktraits::NUM_PRODUCER_THREADS,
                                        static_cast<int>(flashinfer::NamedBarriers::kQueryEmpty));
    attention_updater.rescale_o(tOrO);
    wait(pipeline_v, smem_pipe_read_v);
    flashinfer::gemm</*init=*/false, /*wg_wait=*/-1>(mma_pv, tOrP, tOrV(_, _, _, smem_pipe_read_v.index()), tOrO);
    attention_updater.finalize(s0, flashinfer::get_variant_scale_pv(variant));
    warpgroup_wait<0>();
    pipeline_v.consumer_release(smem_pipe_read_v);
    ++smem_pipe_read_v;
    attention_updater.rescale_o(tOrO);
    if constexpr (kFp8) variant.ODequantize(mainloop_params, tOrO, qo_head_idx, kv_head_idx);
}

// The FP8 kernels (no window).
template <typename Ktraits, bool LEFT_SLIDING_WINDOW, bool CAUSAL, typename WarpScheduler, int HeadDim,
          typename Params, typename MainloopPipeline, typename MainloopPipelineVt, typename PipelineState,
          typename SharedStorage, typename FrgTensorO, typename AttentionUpdater>
CUTLASS_DEVICE std::enable_if_t<two_score_tiles(/*fp8=*/true, HeadDim, /*softcap=*/false)> mma_fp8(
    const Params& mainloop_params, OrderedEpilogueFP8Attention<HeadDim>& variant, MainloopPipeline pipeline_k,
    MainloopPipelineVt pipeline_vt, PipelineState& smem_pipe_read_k, PipelineState& smem_pipe_read_v,
    FrgTensorO& tOrO, AttentionUpdater& attention_updater, int kv_tile_idx_count, int swa_begin_kv_tile_idx,
    int swa_end_kv_tile_idx, int thread_idx, int work_idx, int q_tile_idx, SharedStorage& shared_storage,
    const int32_t qo_len, const int32_t kv_len, const int32_t qo_head_idx, const int32_t kv_head_idx,
    const int32_t batch_idx) {
    static_assert(!LEFT_SLIDING_WINDOW, "the FP8 kernels take no window (sm90/launch.cuh)");
    two_score_loop<Ktraits, LEFT_SLIDING_WINDOW, CAUSAL, WarpScheduler>(
        mainloop_params, variant, pipeline_k, pipeline_vt, smem_pipe_read_k, smem_pipe_read_v, tOrO, attention_updater,
        kv_tile_idx_count, swa_begin_kv_tile_idx, swa_end_kv_tile_idx, thread_idx, work_idx, q_tile_idx, shared_storage,
        qo_len, kv_len, qo_head_idx, kv_head_idx, batch_idx);
}

// The 16-bit softcap kernels (a left window, kNoWindow where the plan has none; no multi-item
// scoring).
template <typename Ktraits, bool LEFT_SLIDING_WINDOW, bool CAUSAL, bool MULTIITEMSCORING, typename WarpScheduler,
          int HeadDim, typename Params, typename MainloopPipeline, typename PipelineState, typename SharedStorage,
          typename FrgTensorO, typename AttentionUpdater>
CUTLASS_DEVICE std::enable_if_t<two_score_tiles(/*fp8=*/false, HeadDim, /*softcap=*/true)> mma_f16(
    const Params& mainloop_params, SoftcapAttention<HeadDim>& variant, MainloopPipeline pipeline_k,
    MainloopPipeline pipeline_v, PipelineState& smem_pipe_read_k, PipelineState& smem_pipe_read_v, FrgTensorO& tOrO,
    AttentionUpdater& attention_updater, int kv_tile_idx_count, int swa_begin_kv_tile_idx, int swa_end_kv_tile_idx,
    int thread_idx, int work_idx, int q_tile_idx, SharedStorage& shared_storage, const int32_t qo_len,
    const int32_t kv_len, const int32_t qo_head_idx, const int32_t kv_head_idx, const uint32_t /*prefix_len*/,
    uint16_t* /*token_pos_in_items*/, const int /*num_kv_tiles_outside_items_window*/,
    const int /*num_kv_tiles_prefix*/) {
    static_assert(!MULTIITEMSCORING, "the softcap kernels score no item lists");
    two_score_loop<Ktraits, LEFT_SLIDING_WINDOW, CAUSAL, WarpScheduler>(
        mainloop_params, variant, pipeline_k, pipeline_v, smem_pipe_read_k, smem_pipe_read_v, tOrO, attention_updater,
        kv_tile_idx_count, swa_begin_kv_tile_idx, swa_end_kv_tile_idx, thread_idx, work_idx, q_tile_idx, shared_storage,
        qo_len, kv_len, qo_head_idx, kv_head_idx, /*batch_idx=*/0);
}

}  // namespace fas_sm90

#endif  // FAS_SM90_TWO_SCORE_LOOP_CUH
