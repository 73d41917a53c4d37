// Heavy half of the SM90 (FA3-class) ragged prefill family: our launcher for FlashInfer's Hopper
// kernels (warp-specialized, TMA, WGMMA), fp16/bf16 (StandardAttention math) and FP8 e4m3 inputs
// (StandardFP8Attention, per-head descales); the 16-bit varlen and paged kernels take a left
// window (FlashInfer's sliding-window mask and key-tile range), FP8 plans with one run on FP8
// kernels of their own (launch_ragged_fp8_window), and so do FP8 plans with a softcap
// (launch_ragged_fp8_softcap). What is ours: the tile shapes (sm90/tiles.h),
// the work scheduler (sm90/tile_scheduler.cuh), the race-free epilogues (sm90/ordered_epilogue.cuh;
// the 16-bit one also serves head dims narrower than the kernel's), the shared-memory layout
// (sm90/shared_storage.cuh), the FP8 producer (sm90/fp8_producer.cuh) and, where FlashInfer's 64 x 64
// transpose does not fit the head dim, the FP8 traits and V transpose (sm90/fp8_traits.cuh), the kernel body
// (sm90/prefill_body.cuh) and the arguments; the key loops and the other collectives are the
// pinned upstream's. Included only by the
// build-generated kernel translation units, each of which defines one
// launch_ragged<InputDtype, OutputDtype, HeadDim, Causal>, launch_ragged_fp8_window<OutputDtype,
// HeadDim, Causal>, launch_ragged_fp8_softcap<OutputDtype, HeadDim, Causal>,
// launch_ragged_softcap<Dtype, HeadDim, Causal> or launch_ragged_packed<Dtype, HeadDim, false>
// specialization.
#ifndef FAS_SM90_LAUNCH_CUH
#define FAS_SM90_LAUNCH_CUH

#include <atomic>
#include <cstdint>
#include <type_traits>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cutlass/numeric_types.h>

#include <flashinfer/attention/hopper/prefill_sm90.cuh>
#include <flashinfer/attention/hopper/quantization/prefill_sm90.cuh>

#include "sm90/fp8_producer.cuh"
#include "sm90/ordered_epilogue.cuh"
#include "sm90/packed_args.h"
#include "sm90/prefill_body.cuh"
#include "sm90/ragged_args.h"
#include "sm90/segment_mask.cuh"
#include "sm90/shared_storage.cuh"
#include "sm90/sinks.cuh"
#include "sm90/softmax.cuh"
#include "sm90/tile_scheduler.cuh"
#include "sm90/tiles.h"

namespace fas_sm90 {

// Attention-variant parameters of the plain 16-bit kernels: the softmax scale and the sinks
// (sm90/sinks.cuh; NULL: none). Members that the variants probe with DEFINE_HAS_MEMBER and that
// are left out (q/k/v scales, multi-item scoring) take the kernel's defaults (1, nullptr / 0).
// window_right: keys right of the diagonal that a causal kernel's rows see (0: causal; a right
// window, which our kernel body applies: sm90/prefill_body.cuh).
struct SoftmaxScaleAndSinks {
    float sm_scale;
    const float* sinks;
    int window_right;
};

// Of the softcap kernels (FlashInfer's LogitsSoftCap variant reads the first two).
struct SoftmaxScaleAndCap {
    float sm_scale;
    float logits_soft_cap;
    int window_right;
};

// FlashInfer's softcap variant (a tanh per score) with the kernels' softmax (sm90/softmax.cuh); Paged:
// the paged kernels' (their softmax choice may differ: sm90/softmax_choice.h).
template <int HeadDim, bool Paged = false>
struct SoftcapAttention : flashinfer::LogitsSoftCap {
    using flashinfer::LogitsSoftCap::LogitsSoftCap;

    template <int NUM_ROWS_PER_THREAD>
    __device__ auto GetAttentionUpdater() {
        return Softmax<NUM_ROWS_PER_THREAD, HeadDim, /*Fp8=*/false, /*Softcap=*/true, /*Packed=*/false, Paged>(
            post_tanh_scale);
    }
#if defined(FAS_SM90_DIAG) && FAS_SM90_DIAG == 3
    // Speed-only diagnostic (sm90/softmax.cuh's FAS_SM90_DIAG): the score scaled, not capped (no tanh).
    REGISTER_LOGITS_TRANSFORM(params, logits, batch_idx, qo_idx, kv_idx, qo_head_idx, kv_head_idx,
                              { return logits * pre_tanh_scale; })
#endif
};

// Of the FP8 kernels: the softmax scale and per-head descale factors (NULL pointer = the scalar);
// window_right as SoftmaxScaleAndSinks'.
struct Fp8Descales {
    float sm_scale;
    const float* maybe_scale_q;
    float scale_q_scalar;
    const float* maybe_scale_k;
    float scale_k_scalar;
    const float* maybe_scale_v;
    float scale_v_scalar;
    int window_right;
};

// Of the FP8 softcap kernels: the same and the cap (OrderedEpilogueFP8Attention<D, true> reads it).
struct Fp8DescalesAndCap : Fp8Descales {
    float logits_soft_cap;
};

// What a 16-bit kernel's attention variant does to the scores, each its own kernels so that the
// others pay nothing: plain softmax; a logits softcap (tanh per score); or the block-diagonal
// mask of packed plans (sm90/segment_mask.cuh), whose per-row table also carries the causal and
// window bounds (so its kernels are built non-causal and without the window template).
enum class Scores { kPlain, kSoftcap, kSegments };

// Whether a kernel TU's CuTe has its extended GMMA shapes exactly where its tile has a GEMM
// width without them (sm90/tiles.h): missing, the GEMM runs as narrower instructions; unneeded,
// the TU compiles ~40 s longer for nothing. Tuning builds (other tables) define them everywhere.
template <int CtaKV, int HeadDim>
constexpr bool extended_gmma_shapes_as_needed() {
    const bool needed = !gmma_width_without_extended_shapes(CtaKV) || !gmma_width_without_extended_shapes(HeadDim);
#if defined(FAS_SM90_TILES_OVERRIDE)
    return true;
#elif defined(CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED)
    return needed;
#else
    return !needed;
#endif
}
#define FAS_SM90_EXTENDED_SHAPES_MESSAGE                                                     \
    "a kernel TU defines CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED exactly where its tile needs " \
    "it (sm90/tiles.h; flashbuild kernel_sources.SM90_EXTENDED_GMMA_CAUSAL_HEAD_DIMS)"

// The upstream types one kernel is assembled from, per input family. Paged: K/V from a paged
// cache through FlashInfer's sparse mainloop (paged_launch.cuh), whose four producer warps gather
// each tile row by row through the page table (cp.async) instead of one TMA copy.
template <typename Input, typename Output, int HeadDim, bool Causal, int CtaQ, int CtaKV, int Stages,
          bool Paged = false, Scores S = Scores::kPlain, int CtasPerSm = 1>
struct Assembly16 {
    static_assert(S != Scores::kSegments || (!Causal && !Paged), "packed kernels are varlen and non-causal");
    // Varlen and paged kernels take a left window (a plan without one passes kNoWindow): the mask
    // costs a compare on the diagonal tiles only, and one kernel serves both.
    static constexpr bool kWindow = S != Scores::kSegments;
    static_assert(extended_gmma_shapes_as_needed<CtaKV, HeadDim>(), FAS_SM90_EXTENDED_SHAPES_MESSAGE);
    using Additional = std::conditional_t<S == Scores::kSoftcap, SoftmaxScaleAndCap,
                                          std::conditional_t<S == Scores::kSegments, SoftmaxScaleAndRowKeys,
                                                             SoftmaxScaleAndSinks>>;
    using Variant = std::conditional_t<S == Scores::kSoftcap, SoftcapAttention<HeadDim, Paged>,
                                       std::conditional_t<S == Scores::kSegments, SegmentMaskAttention<HeadDim>,
                                                          SinkAttention<HeadDim>>>;
    using Traits = flashinfer::AttentionKernelTraits</*USE_TMA_LOAD_KV=*/!Paged, HeadDim, HeadDim, CtaQ, CtaKV, Stages,
                                                     Input, Input, Output, int32_t, Variant>;
    using Kernel = KernelTraits<Traits, SeparateOStorage<Traits>, CtasPerSm>;
    using Mainloop = std::conditional_t<Paged, flashinfer::SparseCollectiveMainloop<Additional, Traits, Causal>,
                                        flashinfer::CollectiveMainloop<Additional, Traits, Causal>>;
    using Epilogue = Epilogue16<Traits>;
    static void* kernel() {
        // Our kernel body (sm90/prefill_body.cuh); FlashInfer's mainloop collectives inside it.
        return reinterpret_cast<void*>(&prefill_body<Mainloop, Epilogue, Kernel, kWindow, Causal, SerpentineTileScheduler>);
    }
    static Additional additional(const RaggedArgs& args) {
        if constexpr (S == Scores::kSoftcap) {
            return {args.softmax_scale, args.softcap, args.window_right};
        } else if constexpr (S == Scores::kSegments) {
            return {args.softmax_scale, packed_row_keys(args), args.sinks};
        } else {
            return {args.softmax_scale, args.sinks, args.window_right};
        }
    }
};

// Window: compiled with FlashInfer's left-window template (launch_ragged_fp8_window's and
// launch_ragged_fp8_softcap's kernels); Softcap: a tanh per score (launch_ragged_fp8_softcap).
template <typename Output, int HeadDim, bool Causal, int CtaQ, int CtaKV, int Stages, bool Window = false,
          bool Softcap = false>
struct AssemblyFp8 {
    static_assert(extended_gmma_shapes_as_needed<CtaKV, HeadDim>(), FAS_SM90_EXTENDED_SHAPES_MESSAGE);
    using Additional = std::conditional_t<Softcap, Fp8DescalesAndCap, Fp8Descales>;
    using Traits = Fp8Traits<HeadDim, CtaQ, CtaKV, Stages, Output, OrderedEpilogueFP8Attention<HeadDim, Softcap>>;
    using Kernel = KernelTraits<Traits, SeparateOStorageFp8<Traits>>;
    using Mainloop = Fp8PrefetchMainloop<Additional, Traits, Causal>;
    // Our epilogue (column-predicated: round-up) where smem_o has its own bytes; with the V^T
    // overlay (hd256) the upstream one, which copies whole rows with head_dim / 8 threads each.
    static constexpr bool kRoundsUp = Kernel::kSeparateO;
    static_assert(kRoundsUp == (HeadDim <= kFp8RoundUpMaxHeadDim), "kFp8RoundUpMaxHeadDim (sm90/ragged_args.h)");
    static_assert(kRoundsUp || Traits::NUM_MMA_THREADS % (HeadDim / 8) == 0,
                  "the upstream FP8 epilogue's row copy needs head_dim / 8 to divide the consumer threads");
    using Epilogue = std::conditional_t<kRoundsUp, Epilogue16<Traits>, flashinfer::FP8CollectiveEpilogue<Traits>>;
    static void* kernel() {
        // Our kernel body (sm90/prefill_body.cuh), as the 16-bit kernels'.
        return reinterpret_cast<void*>(&prefill_body<Mainloop, Epilogue, Kernel, Window, Causal, SerpentineTileScheduler>);
    }
    static Additional additional(const RaggedArgs& args) {
        const Fp8Descales descales{args.softmax_scale, args.q_descale, 1.0f, args.k_descale, 1.0f, args.v_descale, 1.0f,
                                   args.window_right};
        if constexpr (Softcap) {
            return {descales, args.softcap};
        } else {
            return descales;
        }
    }
};

template <typename Input>
constexpr bool kIsFp8 = std::is_same_v<Input, cutlass::float_e4m3_t>;

// window_left of a kernel with a left window when the plan has none: wider than any sequence
// (FlashInfer's masks subtract it from row + kv_len - qo_len: no overflow below 2^30 keys).
constexpr int kNoWindow = 1 << 30;

// The left window a kernel's mainloop takes: the plan's, or kNoWindow; a causal kernel serving a
// right window (RaggedArgs::window_right, 0 on every other kernel: the run functions check it) sees
// its diagonal that many keys further right (sm90/prefill_body.cuh), so the left window's width
// grows by as much and its edge stays put.
inline int window_left_param(const RaggedArgs& args) {
    return (args.window_left >= 0 ? args.window_left : kNoWindow) + args.window_right;
}

// Rows of `heads` contiguous heads of head_dim elements (the request's, <= the kernel's), row_stride
// elements apart.
inline auto gmem_layout(int64_t rows, int heads, int head_dim, int64_t row_stride) {
    return flashinfer::get_gmem_layout(static_cast<int>(rows), heads, head_dim, row_stride, head_dim);
}

// The epilogue's parameters: out in rows like q's, the LSE token-major.
template <typename Assembly, typename Output>
typename Assembly::Epilogue::Params epilogue_params(const RaggedArgs& args) {
    return Assembly::Epilogue::to_underlying_arguments(
        {static_cast<Output*>(args.out), gmem_layout(args.nnz_qo, args.num_qo_heads, args.head_dim, args.out_row_stride),
         args.lse, flashinfer::get_lse_gmem_layout(static_cast<int>(args.nnz_qo), args.num_qo_heads)});
}

// Launches an assembly's kernel with our scheduler over the plan's work list.
template <typename Assembly, typename MainloopParams, typename EpilogueParams>
cudaError_t launch(const MainloopParams& mainloop, const EpilogueParams& epilogue, const RaggedArgs& args,
                   cudaStream_t stream) {
    using Kernel = typename Assembly::Kernel;
    const SerpentineTileScheduler::Arguments scheduler_args{args.tiles,          args.num_units,
                                                            args.tiles_per_unit, args.num_ctas,
                                                            args.num_qo_heads,   args.num_qo_heads / args.num_kv_heads,
                                                            args.heads_inner != 0};
    const SerpentineTileScheduler::Params scheduler = SerpentineTileScheduler::to_underlying_arguments(scheduler_args);

    void* kernel = Assembly::kernel();
    constexpr int kSmemBytes = sizeof(typename Kernel::SharedStorage);
    // The shared-memory limit is a per-device attribute of the kernel: raise it at the first
    // launch on each device (devices 0-63; any other on every launch). Two threads may both
    // raise it; that is harmless.
    static std::atomic<uint64_t> raised_on_devices{0};
    const uint64_t device_bit = args.device >= 0 && args.device < 64 ? uint64_t{1} << args.device : 0;
    if (device_bit == 0 || (raised_on_devices.load(std::memory_order_acquire) & device_bit) == 0) {
        const cudaError_t error = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes);
        if (error != cudaSuccess) return error;
        raised_on_devices.fetch_or(device_bit, std::memory_order_release);
    }
    void* kernel_args[] = {const_cast<MainloopParams*>(&mainloop), const_cast<EpilogueParams*>(&epilogue),
                           const_cast<SerpentineTileScheduler::Params*>(&scheduler)};
    return cudaLaunchKernel(kernel, SerpentineTileScheduler::get_grid_dim(scheduler_args, 0),
                            dim3(Kernel::NUM_WARPS * cutlass::NumThreadsPerWarp), kernel_args, kSmemBytes, stream);
}

// A varlen assembly's launch over contiguous K and V (the checks are its caller's).
template <typename Assembly, typename Input, typename Output>
cudaError_t launch_varlen(const RaggedArgs& args, cudaStream_t stream) {
    using Mainloop = typename Assembly::Mainloop;
    // Heads are contiguous in a row: head stride head_dim, row stride from the caller.
    const int64_t nnz_qo = args.nnz_qo;
    const int64_t nnz_kv = args.nnz_kv;
    const int d = args.head_dim;
    const typename Mainloop::Params mainloop = Mainloop::to_underlying_arguments(
        {static_cast<const Input*>(args.q), gmem_layout(nnz_qo, args.num_qo_heads, d, args.q_row_stride),
         static_cast<const Input*>(args.k), gmem_layout(nnz_kv, args.num_kv_heads, d, args.k_row_stride),
         static_cast<const Input*>(args.v), gmem_layout(nnz_kv, args.num_kv_heads, d, args.v_row_stride),
         window_left_param(args), Assembly::additional(args)});
    return launch<Assembly>(mainloop, epilogue_params<Assembly, Output>(args), args, stream);
}

// A varlen kernel's tile in this library's table (sm90/tiles.h).
template <typename Input, int HeadDim, bool Causal, Scores S>
constexpr TileShape kVarlenTile = tile_shape(kIsFp8<Input>, HeadDim, Causal,
                                             S == Scores::kSoftcap    ? TileFor::kSoftcap
                                             : S == Scores::kSegments ? TileFor::kPacked
                                                                      : TileFor::kVarlen);

// Input: cutlass::half_t, bfloat16_t or float_e4m3_t; Output: the input type, or half_t /
// bfloat16_t for e4m3. The tile shape defaults to this library's table; other shapes are for
// tuning runs (the planner must then use the same query rows).
template <typename Input, typename Output, int HeadDim, bool Causal, Scores S = Scores::kPlain,
          int CtaQ = kVarlenTile<Input, HeadDim, Causal, S>.q_rows,
          int CtaKV = kVarlenTile<Input, HeadDim, Causal, S>.kv_rows,
          int Stages = kVarlenTile<Input, HeadDim, Causal, S>.stages,
          int CtasPerSm = kVarlenTile<Input, HeadDim, Causal, S>.ctas_per_sm>
cudaError_t run_ragged(const RaggedArgs& args, cudaStream_t stream) {
    static_assert(HeadDim % 32 == 0 && HeadDim <= 256, "FlashInfer's SM90 traits take head dims that are multiples of 32");
    static_assert(kIsFp8<Input> || std::is_same_v<Input, Output>, "16-bit kernels write their input dtype");
    // A narrower head dim is read through tensor maps of its width (TMA zero-fills the rest) and
    // written by the 16-bit epilogue's column predicate; the FP8 epilogue writes whole rows.
    static_assert(S == Scores::kPlain || !kIsFp8<Input>, "FP8 kernels are plain");
    static_assert(S != Scores::kSegments || CtaKV <= 256, "row bounds are 16-bit key indices within one tile");
    // Packed plans list one tile per work unit (sm90/packed_args.h); the others none of their table.
    if (args.head_dim > HeadDim || args.head_dim % 8 != 0 || (args.softcap > 0.f) != (S == Scores::kSoftcap) ||
        (args.sinks != nullptr && (kIsFp8<Input> || S == Scores::kSoftcap)) ||
        (kIsFp8<Input> && (!fp8_kernel_serves(HeadDim, args.head_dim) || args.window_left >= 0)) ||
        (args.window_right != 0 && (!Causal || S == Scores::kSegments)) ||
        (S == Scores::kSegments && args.tiles_per_unit != 1)) {
        return cudaErrorInvalidValue;
    }
    using Assembly =
        std::conditional_t<kIsFp8<Input>, AssemblyFp8<Output, HeadDim, Causal, CtaQ, CtaKV, Stages>,
                           Assembly16<Input, Output, HeadDim, Causal, CtaQ, CtaKV, Stages, /*Paged=*/false, S, CtasPerSm>>;
    return launch_varlen<Assembly, Input, Output>(args, stream);
}

// FP8 plans on the FP8 assembly with FlashInfer's left-window template: with a left window and no
// softcap (Softcap false: launch_ragged_fp8_window's kernels), or with a softcap, window or not
// (launch_ragged_fp8_softcap's; a plan without a window passes kNoWindow, as the 16-bit kernels do).
template <typename Output, int HeadDim, bool Causal, bool Softcap>
cudaError_t run_ragged_fp8_windowed(const RaggedArgs& args, cudaStream_t stream) {
    constexpr TileShape kTile = tile_shape(true, HeadDim, Causal);
    if (!fp8_kernel_serves(HeadDim, args.head_dim) || args.sinks != nullptr || (args.softcap > 0.f) != Softcap ||
        (!Softcap && args.window_left < 0) || (args.window_right != 0 && !Causal)) {
        return cudaErrorInvalidValue;
    }
    // At head dim 256 softcap plans without a window take a kernel without the window template,
    // which spills less (4% faster on the H200; no difference at 128: head-dims-and-masks.md).
    if constexpr (Softcap && HeadDim >= 256) {
        if (args.window_left < 0) {
            using Unwindowed = AssemblyFp8<Output, HeadDim, Causal, kTile.q_rows, kTile.kv_rows, kTile.stages,
                                           /*Window=*/false, Softcap>;
            return launch_varlen<Unwindowed, cutlass::float_e4m3_t, Output>(args, stream);
        }
    }
    using Assembly =
        AssemblyFp8<Output, HeadDim, Causal, kTile.q_rows, kTile.kv_rows, kTile.stages, /*Window=*/true, Softcap>;
    return launch_varlen<Assembly, cutlass::float_e4m3_t, Output>(args, stream);
}

}  // namespace fas_sm90

#endif  // FAS_SM90_LAUNCH_CUH
