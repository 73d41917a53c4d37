// Our kernel body for the SM90 prefill kernels (16-bit varlen, paged and packed; FP8), in place of
// the pinned flashinfer::PrefillWithKVCacheKernel and FP8PrefillWithKVCacheKernel
// (flashinfer-python 0.7.2.post1, hopper/prefill_sm90.cuh and quantization/prefill_sm90.cuh): the
// same roles and protocol, the parts FlashInfer's multi-item scoring needs left out. It is the
// first step of issue 35's item loop (docs/design/sm90-epilogue-overlap.md, "The next step"): the
// consumers' loop over work items is ours here, so that a later step can issue the next item's
// first QK^T before the current item's last PV wait. It does what the pinned bodies do, in the
// same order (the 16-bit kernels' body since 2026-12-02: on the H200 the same key loops,
// bit-identical outputs and the same speed for the varlen, paged and packed kernels;
// docs/design/sm90-epilogue-overlap.md), and one thing more: a causal kernel's diagonal moves
// right by the plan's right window (below).
//
//   warpgroup 0 (producer): one warp (16-bit TMA K/V) or all four (the paged kernels' cp.async
//     gather; FP8's V transpose into V^T) load every work item's Q, K and V through the
//     mainloop's load(), then drain the pipelines;
//   warpgroups 1.. (consumers): per work item, the mainloop's key loop (flashinfer::mma_f16 or
//     mma_fp8) and our epilogue's store.
// A work tile whose query tile lies past its sequence's queries is skipped by both roles; one
// with no key tile (an empty key range) writes zeros and an LSE of -inf (store_zero).
//
// Right windows (FlashAttention's window_size_right > 0) run on the causal kernels: FlashInfer's
// loads, tile counts and masks see the diagonal only through kv_len - qo_len, so both roles give
// them qo_len - right (the diagonal `right` keys further right; the left window's width grows by
// as much in the launch, window_left_param, so its edge stays) and keep the real qo_len for
// which tiles exist, the variant and the epilogue. The Q load only tiles by it.
#ifndef FAS_SM90_PREFILL_BODY_CUH
#define FAS_SM90_PREFILL_BODY_CUH

#include <type_traits>

#include <cute/tensor.hpp>
#include <cutlass/arch/reg_reconfig.h>
#include <cutlass/cutlass.h>
#include <cutlass/pipeline/pipeline.hpp>

#include <flashinfer/attention/hopper/mainloop_mma.cuh>
#include <flashinfer/attention/hopper/quantization/mainloop_mma.cuh>
#include <flashinfer/attention/hopper/utils.cuh>

namespace fas_sm90 {

// Registers a producer and a consumer thread keep after the split: FlashInfer's numbers, which
// its kernel traits' launch bounds assume (12 warps: two consumer warpgroups; 16: three); with
// one consumer warpgroup (8 warps, several CTAs an SM) the TMA producer keeps 24 and the consumer
// takes the rest of the block's share.
template <typename Kernel, bool TmaKV>
struct RoleRegisters {
    static constexpr int kGroups = Kernel::NUM_WARPS / 4;
    // What the block holds a thread from its launch: 65536 / (threads x CTAs an SM), in steps of 8.
    static constexpr int kShare = 65536 / (Kernel::NUM_WARPS * 32 * Kernel::kCtasPerSm) / 8 * 8;
    static constexpr bool kTwoConsumers = kGroups == 3;
    static constexpr bool kOneConsumer = kGroups == 2;
    static_assert(!kOneConsumer || TmaKV, "one consumer warpgroup: TMA K/V only");
    static constexpr int kProducer = kOneConsumer ? 24 : TmaKV ? (kTwoConsumers ? 24 : 32) : 72;
    static constexpr int kConsumer = kOneConsumer ? 2 * kShare - kProducer
                                     : TmaKV      ? (kTwoConsumers ? 240 : 160)
                                                  : (kTwoConsumers ? 216 : 144);
    // The split must fit that share: past it the consumers' setmaxnreg.inc waits forever (an FP8
    // producer keeping 32 hung every kernel: docs/design/fp8-speed.md, "Head dim 96").
    static_assert(kProducer + (kGroups - 1) * kConsumer <= kGroups * kShare,
                  "producer + consumer registers exceed the block's");
};

// The consumers' turns at the tensor pipe with one consumer warpgroup: nothing to take turns with,
// so FlashInfer's ping-pong (which asserts two or three) is left out; only the first Q's hand-over
// to the producer stays.
template <typename Kernel>
struct SoloConsumer {
    static CUTLASS_DEVICE void barrier_sync() {}
    static CUTLASS_DEVICE void barrier_arrive() {}
    static CUTLASS_DEVICE void mma_init() {
        cutlass::arch::NamedBarrier::arrive(Kernel::NUM_MMA_THREADS + Kernel::NUM_PRODUCER_THREADS,
                                            static_cast<int>(flashinfer::NamedBarriers::kQueryEmpty));
    }
};

// FP8 mainloops: V is transposed in shared memory by the producer warpgroup (a third pipeline,
// V^T, between it and the consumers).
template <typename Mainloop, typename = void>
struct TransposesV : std::false_type {};
template <typename Mainloop>
struct TransposesV<Mainloop, std::void_t<typename Mainloop::MainloopPipelineVt>> : std::true_type {};

// TMA transaction bytes of a K or V stage (FP8: V's tile is K's shape, and its mainloop names only
// K's); the cp.async (paged) pipelines count arrivals instead and their mainloops name no such bytes.
template <typename Mainloop, bool V>
constexpr uint32_t stage_bytes() {
    if constexpr (!Mainloop::USE_TMA_LOAD_KV) {
        return 0;
    } else if constexpr (TransposesV<Mainloop>::value || !V) {
        return Mainloop::TmaTransactionBytesK;
    } else {
        return Mainloop::TmaTransactionBytesV;
    }
}

// The output tile (CTA_Q x head dim) as each family's traits name it.
template <typename Kernel, bool Fp8>
CUTLASS_DEVICE auto output_tile_shape() {
    if constexpr (Fp8) {
        return cute::select<0, 2>(typename Kernel::TileShape_QKD{});
    } else {
        return cute::select<0, 1>(typename Kernel::TileShape_PDV{});
    }
}

// The V^T pipeline of an FP8 kernel (the producer warpgroup's threads arrive, the consumers read);
// nothing for the 16-bit ones.
struct NoVtPipeline {};
template <typename Mainloop, typename Storage>
CUTLASS_DEVICE auto make_vt_pipeline(Storage& storage, int producers, int consumers) {
    if constexpr (TransposesV<Mainloop>::value) {
        using Vt = typename Mainloop::MainloopPipelineVt;
        typename Vt::Params params;
        params.producer_arv_count = producers;
        params.consumer_arv_count = consumers;
        return Vt(storage.pipeline_vt, params);
    } else {
        return NoVtPipeline{};
    }
}

// Keys right of the diagonal that a causal kernel's rows see (sm90/launch.cuh's variant
// parameters; 0 where they have no such member: causal, or the packed kernels' row table).
template <typename Additional, typename = void>
struct RightWindow {
    static CUTLASS_DEVICE int of(const Additional&) { return 0; }
};
template <typename Additional>
struct RightWindow<Additional, std::void_t<decltype(Additional::window_right)>> {
    static CUTLASS_DEVICE int of(const Additional& additional) { return additional.window_right; }
};

// The block as the mainloop's masks and tile counts see it: the diagonal moved right by `right`.
template <typename Block>
CUTLASS_DEVICE Block shift_diagonal(Block block, int right) {
    cute::get<5>(block) -= right;  // qo_len
    return block;
}

template <typename Mainloop, typename Epilogue, typename Kernel, bool Window, bool Causal, typename Scheduler>
__global__ void __launch_bounds__(Kernel::NUM_WARPS* cutlass::NumThreadsPerWarp, Kernel::kCtasPerSm)
    prefill_body(CUTE_GRID_CONSTANT typename Mainloop::Params const mainloop_params,
                 CUTE_GRID_CONSTANT typename Epilogue::Params const epilogue_params,
                 CUTE_GRID_CONSTANT typename Scheduler::Params const scheduler_params) {
    using namespace cute;
    using Pipeline = typename Mainloop::MainloopPipeline;
    using PipelineState = typename Pipeline::PipelineState;
    constexpr bool kTmaKV = Mainloop::USE_TMA_LOAD_KV;
    constexpr bool kFp8 = TransposesV<Mainloop>::value;
    constexpr int kConsumerThreads = Kernel::NUM_MMA_THREADS;
    constexpr int kProducerThreads = cutlass::NumThreadsPerWarpGroup;
    constexpr int kCtaQ = Kernel::CTA_Q;
    using Registers = RoleRegisters<Kernel, kTmaKV>;

    extern __shared__ char shared_memory[];
    auto& storage = *reinterpret_cast<typename Kernel::SharedStorage*>(shared_memory);
    const int warp = cutlass::canonical_warp_idx_sync();
    const int warpgroup = cutlass::canonical_warp_group_idx();
    const bool elected = cute::elect_one_sync();
    if (warp == 0 && elected) {
        Mainloop::prefetch_tma_descriptors(mainloop_params);
        Epilogue::prefetch_tma_descriptors(epilogue_params);
        storage.barrier_Q.init(/*num_threads=*/1);
        storage.barrier_O.init(/*num_threads=*/1);
    }

    // K and V pipelines: TMA transactions counted by bytes, or cp.async arrivals by thread.
    typename Pipeline::Params pipeline_params;
    pipeline_params.role =
        warpgroup == 0 ? Pipeline::ThreadCategory::Producer : Pipeline::ThreadCategory::Consumer;
    if constexpr (kTmaKV) {
        pipeline_params.is_leader = threadIdx.x % cutlass::NumThreadsPerWarpGroup == 0;
        pipeline_params.num_consumers = kConsumerThreads;
    } else {
        pipeline_params.producer_arv_count = kProducerThreads;
        pipeline_params.consumer_arv_count = kConsumerThreads;
    }
    auto make_pipeline = [&](auto& barriers, uint32_t bytes) {
        if constexpr (kTmaKV) {
            pipeline_params.transaction_bytes = bytes;
            return Pipeline(barriers, pipeline_params, /*cluster_shape=*/Shape<_1, _1, _1>{});
        } else {
            return Pipeline(barriers, pipeline_params);
        }
    };
    // (The pipelines' constructors fence the barrier initialization above.)
    Pipeline pipeline_k = make_pipeline(storage.pipeline_k, stage_bytes<Mainloop, /*V=*/false>());
    if constexpr (kFp8) {  // V lands for the producer warpgroup, which transposes it
        pipeline_params.role = Pipeline::ThreadCategory::ProducerConsumer;
        pipeline_params.num_consumers = kProducerThreads;
    }
    Pipeline pipeline_v = make_pipeline(storage.pipeline_v, stage_bytes<Mainloop, /*V=*/true>());
    auto pipeline_vt = make_vt_pipeline<Mainloop>(storage, kProducerThreads, kConsumerThreads);
    Mainloop mainloop;
    Epilogue epilogue;
    __syncthreads();  // every barrier initialized before any role waits on one

    Scheduler scheduler;
    const int right = Causal ? RightWindow<decltype(mainloop_params.additional_params)>::of(
                                   mainloop_params.additional_params)
                             : 0;
    if (warpgroup == 0) {
        cutlass::arch::warpgroup_reg_dealloc<Registers::kProducer>();
        const int warp_in_group = __shfl_sync(0xffffffffu, (threadIdx.x / 32) % 4, 0);
        // One warp issues the TMA copies (FP8: all four transpose V).
        if (kTmaKV && !kFp8 && warp_in_group != 0) return;
        PipelineState write_k = cutlass::make_producer_start_state<Pipeline>();
        // 16-bit: V's write state. FP8: one state writes K and V, this one reads V for the transpose.
        PipelineState state_v = kFp8 ? PipelineState{} : cutlass::make_producer_start_state<Pipeline>();
        int work_idx = 0;
        for (auto work = scheduler.get_initial_work(scheduler_params); work.is_valid(scheduler_params);
             work = scheduler.template get_next_work</*is_producer=*/true>(scheduler_params, work)) {
            const auto block = work.get_block_coord(scheduler_params);
            const auto [q_tile, qo_head, kv_head, qo_start, kv_start, qo_len, kv_len, batch] = block;
            if (q_tile * kCtaQ >= qo_len) continue;
            if (mainloop.get_num_kv_tiles(mainloop_params, q_tile, qo_len - right, kv_len) <= 0) {
                scheduler.prefetch_next_work(scheduler_params, work);
                scheduler.broadcast_next_work(work);
                continue;
            }
            if constexpr (kFp8) {
                mainloop.template load<Window>(mainloop_params, pipeline_k, pipeline_v, pipeline_vt, write_k,
                                               state_v, storage, scheduler, scheduler_params, work,
                                               shift_diagonal(block, right), work_idx);
            } else {
                mainloop.template load<Window>(mainloop_params, pipeline_k, pipeline_v, write_k, state_v, storage,
                                               scheduler, scheduler_params, work, shift_diagonal(block, right),
                                               work_idx);
            }
            ++work_idx;
        }
        if constexpr (kFp8) {
            mainloop.load_tail(pipeline_k, pipeline_v, write_k);
        } else {
            mainloop.load_tail(pipeline_k, pipeline_v, write_k, state_v);
        }
        return;
    }

    cutlass::arch::warpgroup_reg_alloc<Registers::kConsumer>();
#if defined(FAS_SM90_SCHEDULER_BARRIER)
    // Variant builds: FlashInfer's ping-pong of the consumer warpgroups' GEMM issue forced on or off
    // (its rule: FP8 from head dim 128, 16-bit to 128). On at FP8 hd96: 1.04-1.07 of the time (fp8-speed.md).
    using Warps = flashinfer::WarpScheduler<Kernel, FAS_SM90_SCHEDULER_BARRIER != 0>;
#else
    using Warps = std::conditional_t<Registers::kOneConsumer, SoloConsumer<Kernel>, typename Mainloop::WarpScheduler>;
#endif
    const int consumer_thread = static_cast<int>(threadIdx.x) - kProducerThreads;
    typename Kernel::TiledMmaPV tiled_mma_pv;
    PipelineState read_k, read_v;  // a stage is released as it is read: one state serves both
    Warps::mma_init();
    scheduler.init_consumer();
    int work_idx = 0;
    CUTLASS_PRAGMA_NO_UNROLL
    for (auto work = scheduler.get_initial_work(scheduler_params); work.is_valid(scheduler_params);
         work = scheduler.template get_next_work</*is_producer=*/false>(scheduler_params, work)) {
        Tensor tOrO = partition_fragment_C(tiled_mma_pv, output_tile_shape<Kernel, kFp8>());
        if constexpr (kFp8) clear(tOrO);  // (as FlashInfer's FP8 body does)
        const auto block = work.get_block_coord(scheduler_params);
        const auto [q_tile, qo_head, kv_head, qo_start, kv_start, qo_len, kv_len, batch] = block;
        typename Kernel::AttentionVariant variant(mainloop_params, block);
        auto updater = variant.template GetAttentionUpdater<2 * (2 * kCtaQ / kConsumerThreads)>();
        if (q_tile * kCtaQ >= qo_len) continue;
        const int mask_qo_len = qo_len - right;  // the diagonal the masks see
        const int kv_tiles = mainloop.get_num_kv_tiles(mainloop_params, q_tile, mask_qo_len, kv_len);
        if (kv_tiles <= 0) {
            epilogue.store_zero(epilogue_params, storage, consumer_thread, block);
            continue;
        }
        int window_first_tile = 0, window_last_tile = -1;
        if constexpr (Window) {
            window_first_tile = flashinfer::get_swa_begin_kv_tile_idx<Kernel::CTA_Q, Kernel::CTA_KV>(
                mainloop_params.window_left, q_tile, mask_qo_len, kv_len);
            window_last_tile = flashinfer::get_swa_end_kv_tile_idx<Kernel::CTA_Q, Kernel::CTA_KV>(
                mainloop_params.window_left, q_tile, mask_qo_len, kv_len);
        }
        // Unqualified: argument-dependent lookup would find a consumer loop of ours taking the
        // variant's type (sm90-mainloop-plan.md, the takeover door), FlashInfer's otherwise.
        if constexpr (kFp8) {
            using flashinfer::mma_fp8;
            mma_fp8<Kernel, Window, Causal, Warps>(
                mainloop_params, variant, pipeline_k, pipeline_vt, read_k, read_v, tOrO, updater, kv_tiles,
                window_first_tile, window_last_tile, consumer_thread, work_idx, q_tile, storage, mask_qo_len, kv_len,
                qo_head, kv_head, batch);
        } else {
            using flashinfer::mma_f16;
            mma_f16<Kernel, Window, Causal, /*MULTIITEMSCORING=*/false, Warps>(
                mainloop_params, variant, pipeline_k, pipeline_v, read_k, read_v, tOrO, updater, kv_tiles,
                window_first_tile, window_last_tile, consumer_thread, work_idx, q_tile, storage, mask_qo_len, kv_len,
                qo_head, kv_head, /*prefix_len=*/0u, /*token_pos_in_items=*/nullptr);
        }
        epilogue.store(epilogue_params, tOrO, updater.get_lse(), storage, tiled_mma_pv, consumer_thread, block);
        ++work_idx;
    }
    epilogue.store_tail();
}

}  // namespace fas_sm90

#endif  // FAS_SM90_PREFILL_BODY_CUH
