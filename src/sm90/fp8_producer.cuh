// Producer warpgroup of our FP8 SM90 kernels.
//
// FP8 WGMMA takes both operands K-major, so the PV GEMM needs V transposed: the producer
// warpgroup loads V with TMA and transposes it in shared memory (ldmatrix.trans / stmatrix) into
// V^T. FlashInfer's FP8 producer (hopper/quantization/mainloop_load.cuh) issues one KV tile's K
// and V loads, waits for that V to land, transposes it, and only then issues the next tile's
// loads. Every KV tile thus costs the producer a global-load latency and a transpose in series,
// which at FP8 rates is close to the consumers' time per tile (docs/design/fp8-speed.md).
//
// This producer keeps the next tile's K and V loads in flight while it transposes the current V.
// Within a work tile the loads run one stage ahead of the transposes, so two stages (the
// library's tile table) suffice; at the end of a work tile nothing is left in flight, so the
// pipeline states agree with the kernel's at every work tile's start and upstream's load_tail
// still applies. The transposed bytes are fenced for the async proxy before they are signalled,
// because the consumers read V^T with WGMMA.
//
// Everything else (parameters, TMA descriptors, the consumers' mainloop) is upstream's: the
// kernel calls load() on the mainloop type it is given, so deriving replaces only this step.
#ifndef FAS_SM90_FP8_PRODUCER_CUH
#define FAS_SM90_FP8_PRODUCER_CUH

#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>

#include <flashinfer/attention/hopper/named_barrier.cuh>
#include <flashinfer/attention/hopper/quantization/kernel_traits.cuh>
#include <flashinfer/attention/hopper/quantization/mainloop_load.cuh>
#include <flashinfer/attention/hopper/utils.cuh>

#include "sm90/fp8_traits.cuh"
#include "sm90/ragged_args.h"

namespace fas_sm90 {

// V -> V^T of one stage by the whole producer warpgroup: FlashInfer's ldmatrix transpose of 64 x 64
// blocks, or ours where the traits are (sm90/fp8_traits.cuh: head dims that are not multiples of 64).
template <typename Traits, typename Storage>
CUTLASS_DEVICE void transpose_v(Storage& storage, int stage) {
    using namespace cute;
    if constexpr (OwnsTranspose<Traits>::value) {
        Fp8Transpose<Traits>{}(reinterpret_cast<uint8_t*>(storage.smem_v.data()),
                               reinterpret_cast<uint8_t*>(storage.smem_vt.data()), stage);
    } else {
        Tensor sV_src = as_position_independent_swizzle_tensor(
            make_tensor(make_smem_ptr(storage.smem_v.data()), typename Traits::SmemLayoutVTransposeSrc{}));
        Tensor sVt_dst = as_position_independent_swizzle_tensor(
            make_tensor(make_smem_ptr(storage.smem_vt.data()), typename Traits::SmemLayoutVtTransposeTgt{}));
        flashinfer::SmemTransposeFP8_64x64<Traits> transposer;
        transposer.do_transpose(sV_src, sVt_dst, stage);
    }
}

template <typename Additional, typename Traits, bool Causal>
struct Fp8PrefetchMainloop : flashinfer::FP8CollectiveMainloop<Additional, Traits, Causal> {
    using Base = flashinfer::FP8CollectiveMainloop<Additional, Traits, Causal>;
    using typename Base::MainloopPipeline;
    using typename Base::MainloopPipelineVt;
    using typename Base::Params;
    using typename Base::PipelineState;
    using typename Base::TileShape_QKD;

    template <bool LeftSlidingWindow, typename BlockCoord, typename Scheduler, typename SharedStorage>
    CUTLASS_DEVICE void load(Params const& params, MainloopPipeline pipeline_k, MainloopPipeline pipeline_v,
                             MainloopPipelineVt pipeline_vt, PipelineState& write, PipelineState& read,
                             SharedStorage& storage, Scheduler& scheduler,
                             typename Scheduler::Params const& scheduler_params,
                             typename Scheduler::WorkTileInfo& work_tile_info, BlockCoord const& block_coord,
                             int work_idx) {
        using namespace cute;
        // A left window (launch_ragged_fp8_window) needs nothing here: the plan starts each tile's
        // keys at its first row's first one (sm90/tile_keys.h), so FlashInfer's first windowed key
        // tile is tile 0 and every tile of the range is loaded, as without one.

        auto [q_tile, qo_head, kv_head, qo_offset, kv_offset, qo_len, kv_len, batch] = block_coord;

        Tensor sQ = make_tensor(make_smem_ptr(storage.smem_q.data()), typename Traits::SmemLayoutQ{});
        Tensor sK = make_tensor(make_smem_ptr(storage.smem_k.data()), typename Traits::SmemLayoutK{});
        Tensor sV = make_tensor(make_smem_ptr(storage.smem_v.data()), typename Traits::SmemLayoutV{});

        Tensor mQ = params.tma_load_Q.get_tma_tensor(params.layout_Q.shape());
        Tensor mK = params.tma_load_K.get_tma_tensor(params.layout_K.shape());
        Tensor mV = params.tma_load_V.get_tma_tensor(params.layout_V.shape());
        Tensor gQ = flashinfer::get_local_tile_tensor(mQ, select<0, 2>(TileShape_QKD{}), qo_head, qo_offset,
                                                      qo_len)(_, _, q_tile);  // (Q, D)
        Tensor gK = flashinfer::get_local_tile_tensor(mK, select<1, 2>(TileShape_QKD{}), kv_head, kv_offset,
                                                      kv_len);  // (K, D, tile)
        Tensor gV = flashinfer::get_local_tile_tensor(mV, select<1, 2>(TileShape_QKD{}), kv_head, kv_offset,
                                                      kv_len);  // (K, D, tile)
        Tensor sQ_x = make_tensor(sQ.data(), make_layout(sQ.layout(), Layout<_1>{}));
        Tensor gQ_x = make_tensor(gQ.data(), make_layout(gQ.layout(), Layout<_1>{}));
        auto [tQgQ, tQsQ] = tma_partition(params.tma_load_Q, _0{}, Layout<_1>{}, group_modes<0, 2>(sQ_x),
                                          group_modes<0, 2>(gQ_x));
        auto [tKgK, tKsK] = tma_partition(params.tma_load_K, _0{}, Layout<_1>{}, group_modes<0, 2>(sK),
                                          group_modes<0, 2>(gK));  // (TMA, tile), (TMA, stage)
        auto [tVgV, tVsV] = tma_partition(params.tma_load_V, _0{}, Layout<_1>{}, group_modes<0, 2>(sV),
                                          group_modes<0, 2>(gV));

        // One thread of the warpgroup issues the TMA loads; all 128 transpose.
        const int warp_in_group = __shfl_sync(0xffffffff, (threadIdx.x / 32) % 4, 0);
        const bool issuer = warp_in_group == 0 && cute::elect_one_sync();
        const auto load_k = [&](int kv_tile) {
            pipeline_k.producer_acquire(write);
            copy(params.tma_load_K.with(*pipeline_k.producer_get_barrier(write), /*mcast_mask=*/0),
                 tKgK(_, kv_tile), tKsK(_, write.index()));
        };
        const auto load_v = [&](int kv_tile) {
            pipeline_v.producer_acquire(write);
            copy(params.tma_load_V.with(*pipeline_v.producer_get_barrier(write), /*mcast_mask=*/0),
                 tVgV(_, kv_tile), tVsV(_, write.index()));
        };

        // KV tiles run from the last to the first, as the consumers expect.
        int kv_tile = this->get_num_kv_tiles(params, q_tile, qo_len, kv_len) - 1;
        if (issuer) load_k(kv_tile);
        // Q's buffer is free once the consumers have finished the previous work tile.
        cutlass::arch::NamedBarrier::sync(Base::NUM_MMA_THREADS + Traits::NUM_PRODUCER_THREADS,
                                          static_cast<int>(flashinfer::NamedBarriers::kQueryEmpty));
        if (issuer) {
            storage.barrier_Q.arrive_and_expect_tx(Base::TmaTransactionBytesQ);
            copy(params.tma_load_Q.with(
                     reinterpret_cast<cutlass::arch::ClusterTransactionBarrier::ValueType&>(storage.barrier_Q),
                     /*mcast_mask=*/0),
                 tQgQ, tQsQ);
            load_v(kv_tile);
        }
        ++write;
        // Where smem_o shares V^T's bytes (hdim 256), wait until the last work tile's output left.
        storage.barrier_O.wait((work_idx + 1) % 2);

        for (; kv_tile >= 0; --kv_tile) {
            if (kv_tile > 0) {
                if (issuer) {
                    load_k(kv_tile - 1);
                    load_v(kv_tile - 1);
                }
                ++write;
            }
            // V^T of a tile lives in the stage of its K and V; its producer state is the read
            // state with the producer's phase.
            const PipelineState vt_write(read.index(), read.phase() ^ 1, read.count());
            pipeline_v.consumer_wait(read);
            pipeline_vt.producer_acquire(vt_write);
            transpose_v<Traits>(storage, read.index());
            cutlass::arch::fence_view_async_shared();
            pipeline_vt.producer_commit(vt_write);
            pipeline_v.consumer_release(read);
            ++read;
        }
        scheduler.prefetch_next_work(scheduler_params, work_tile_info);
        scheduler.broadcast_next_work(work_tile_info);
    }
};

}  // namespace fas_sm90

#endif  // FAS_SM90_FP8_PRODUCER_CUH
