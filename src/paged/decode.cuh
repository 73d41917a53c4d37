// The project's own decode kernel over a paged KV cache (the paged_decode family): up to 16
// packed (query token, query head) rows of one KV head per CTA, against one KV chunk of one
// sequence, on the plan's schedule (paged.h's LaunchArgs, the same arrays as the FlashInfer
// kernel of paged_prefill, so both share planner and merge).
//
// Why our own: decode streams K and V once and does almost no math per byte, so its speed is
// how well each SM keeps its share of HBM bandwidth busy. FlashInfer's prefill kernel, run with
// 16-row tiles, waits for each K and V tile before it issues the next. Here a ring of cp.async
// stages stays kStages - 1 stages ahead of the math, every warp owns its own keys of a stage, so
// warps meet only at the one barrier per stage, and a thread's page ids for the next stage are
// loaded a stage early, so a page lookup never stalls an issue. Two shapes (paged.h): short, 16
// keys per warp at two CTAs per SM, and long, 32 keys per warp (two independent 16-key blocks
// until the softmax) at one CTA per SM, for long chunks. Variants measured and dropped (TMA bulk
// copies, a merge inside the kernel, L2 prefetch hints, 3 CTAs per SM): docs/design/decode-plan.md.
// FP8 e4m3 caches (KV = __nv_fp8_e4m3): the same kernel with stages of half the bytes, whose
// fragments are widened in registers (fp8_kv.cuh); the 16-bit code paths are unchanged.
#ifndef FAS_PAGED_DECODE_CUH
#define FAS_PAGED_DECODE_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include <flashinfer/cp_async.cuh>
#include <flashinfer/mma.cuh>

#include "paged/decode_math.cuh"
#include "paged/decode_shape.h"
#include "paged/decode_tma.cuh"
#include "paged/fp8_kv.cuh"
#include "paged/merge.cuh"
#include "paged/stage_layout.h"

namespace fas_paged {
namespace decode {

namespace cp_async = flashinfer::cp_async;
namespace mma = flashinfer::mma;

// 16 bytes global -> shared, zero-filled when !valid (then nothing is read).
template <typename T>
__device__ __forceinline__ void copy16(uint8_t* dst, const T* src, bool valid) {
    cp_async::pred_load_128b<cp_async::PrefetchMode::kNoPrefetch, cp_async::SharedMemFillMode::kFillZero>(
        reinterpret_cast<T*>(dst), src, valid);
}

// T: q and out; KV: the caches' element (T, or __nv_fp8_e4m3); QFp8: q is e4m3 instead (e4m3
// caches only; fp8::QStaging).
template <typename T, typename KV, int HeadDim, bool Causal, bool Long, bool QFp8>
__global__ void __launch_bounds__(Shape<HeadDim, Long, sizeof(KV)>::kThreads,
                                  Shape<HeadDim, Long, sizeof(KV)>::kCtasPerSm)
    kernel(const __grid_constant__ LaunchArgs a) {
    using S = Shape<HeadDim, Long, static_cast<int>(sizeof(KV))>;
    // The e4m3 kernel multiplies in fp16 whatever q's type: e4m3 widens to fp16 in one instruction
    // per pair (to bf16 it takes four), probabilities lose less in fp16, and bf16 q is rescaled by
    // a power of two into fp16's range (fp8::QStaging). Accumulators and out are as for 16-bit.
    constexpr bool kFp8 = sizeof(KV) == 1;
    const auto q_layout = [](int row, int chunk) { return layout::rows16<HeadDim>(row, chunk); };
    // Where a stage holds chunk `chunk` of cache row `row`.
    const auto stage_offset = [](int row, int chunk) {
        if constexpr (kFp8) return layout::rows8<HeadDim>(row, chunk);
        else return layout::rows16<HeadDim>(row, chunk);
    };
    extern __shared__ __align__(1024) uint8_t smem[];  // 1024: as decode_tma.cuh declares it (TMA swizzle atoms)
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    // KV heads vary fastest across the grid: the CTAs of one sequence's heads run together and
    // read the two halves of the same cache rows at about the same time.
    const int cta = blockIdx.x / a.num_heads_k, kv_head = blockIdx.x % a.num_heads_k;
    if (a.device_ctas != nullptr) {  // a device-length plan: its schedule is the update's, and may be shorter
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900)
        asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
        if (cta >= *a.device_ctas) return;
    }

    // A host plan's own schedule: safe to read before the previous kernel on the stream finishes.
    const int request = a.request_indices[cta], qo_tile = a.qo_tile_indices[cta], kv_tile = a.kv_tile_indices[cta];
    const int group = a.num_heads_q / a.num_heads_k;
    const int q_begin = a.q_indptr[request], qo_len = a.q_indptr[request + 1] - q_begin;
    const int page_begin = a.page_indptr[request];
    const int pages = a.page_indptr[request + 1] - page_begin;
    const int page_size = a.page_size;
    const int page_shift = __popc(page_size) == 1 ? __ffs(page_size) - 1 : -1;
    const int kv_len = pages == 0 ? 0 : (pages - 1) * page_size + a.last_page_len[request];
    // Under a left window the sequence's keys (and the plan's chunks of them) start at kv_start.
    const int kv_start = window_start(kv_len, qo_len, a.window_left);
    const int span = kv_len - kv_start;
    const int chunk = a.split ? a.kv_chunk_size[0] : span;
    const int kv_begin = kv_start + (a.split ? min(kv_tile * chunk, span) : 0);
    const int kv_end = a.split ? min(kv_begin + chunk, kv_len) : kv_len;
    const int iterations = (kv_end - kv_begin + S::kKeys - 1) / S::kKeys;
    const int row0 = qo_tile * 16;

    uint8_t* const q_smem = smem;
    uint8_t* const stage_smem = smem + S::kQBytes;

#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900)
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
    // Q tile -> shared (its own cp.async group); rows past the tile's queries read as zeros.
    // E4M3: through registers instead, permuted (fp8::QStaging); its cp.async group stays empty.
    constexpr int kQChunks = HeadDim / 8;  // 16-byte chunks of a q or out row
    const T* q = static_cast<const T*>(a.q);
    fp8::QStaging<T, HeadDim, S::kThreads, kFp8, QFp8> q_staging;
    if constexpr (kFp8) {
        q_staging.load(tid, a.q, a.q_descale, [&](int row, bool* valid, int* head) {
            const int packed = row0 + row, token = packed / group;
            *head = kv_head * group + packed % group;
            *valid = token < qo_len;
            return static_cast<int64_t>(q_begin + (*valid ? token : 0)) * a.q_row_stride + *head * HeadDim;
        });
    } else {
        for (int i = tid; i < 16 * kQChunks; i += S::kThreads) {
            const int row = i / kQChunks, column = i % kQChunks;
            const int packed = row0 + row, token = packed / group, head = kv_head * group + packed % group;
            const bool valid = token < qo_len;
            const T* src = q + static_cast<int64_t>(q_begin + (valid ? token : 0)) * a.q_row_stride +
                           head * HeadDim + column * 8;
            copy16(q_smem + layout::rows16<HeadDim>(row, column), src, valid);
        }
    }
    cp_async::commit_group();
    float k_scale = 1.f, v_scale = 1.f;  // e4m3 descales (16-bit caches: 1)
    if constexpr (kFp8) {
        if (a.k_descale != nullptr) k_scale = a.k_descale[kv_head];
        if (a.v_descale != nullptr) v_scale = a.v_descale[kv_head];
    }

    // Each thread loads one 16-byte column of kPasses rows per stage, for K and for V; rows past
    // the chunk's end read as zeros.
    const int column = tid % S::kChunks, first_row = tid / S::kChunks;
    constexpr int kChunkElements = 16 / static_cast<int>(sizeof(KV));
    const KV* k_base = static_cast<const KV*>(a.k_cache) + kv_head * HeadDim + column * kChunkElements;
    const KV* v_base = static_cast<const KV*>(a.v_cache) + kv_head * HeadDim + column * kChunkElements;
    const int32_t* page_ids = a.page_indices + page_begin;
    int page_of_row[S::kPasses];
    const auto fetch_pages = [&](int stage) {
#pragma unroll
        for (int p = 0; p < S::kPasses; ++p) {
            const int key = kv_begin + stage * S::kKeys + first_row + p * S::kRowsPerPass;
            page_of_row[p] = key < kv_end ? page_ids[page_shift >= 0 ? key >> page_shift : key / page_size] : 0;
        }
    };
    const auto issue = [&](int stage) {
        if (stage < iterations) {
            uint8_t* const k_tile = stage_smem + (stage % S::kStages) * S::kStageBytes;
            uint8_t* const v_tile = k_tile + S::kTileBytes;
#pragma unroll
            for (int p = 0; p < S::kPasses; ++p) {
                const int row = first_row + p * S::kRowsPerPass;
                const int key = kv_begin + stage * S::kKeys + row;
                const bool valid = key < kv_end;
                const int64_t page = page_of_row[p];
                const int in_page = !valid ? 0 : page_shift >= 0 ? key & (page_size - 1) : key % page_size;
                copy16(k_tile + stage_offset(row, column), k_base + page * a.k_page_stride + in_page * a.k_row_stride,
                       valid);
                copy16(v_tile + stage_offset(row, column), v_base + page * a.v_page_stride + in_page * a.v_row_stride,
                       valid);
            }
            fetch_pages(stage + 1);
        }
        cp_async::commit_group();  // always, so that group counts stay aligned with stages
    };

    fetch_pages(0);
#pragma unroll
    for (int stage = 0; stage < S::kStages - 1; ++stage) issue(stage);
    float q_scale = 1.f;  // the e4m3 kernel's q in fp16 = q * q_scale (bf16 q: a power of two)
    if constexpr (kFp8) {
        q_scale = q_staging.scale(warp, lane, reinterpret_cast<float*>(stage_smem + S::kRingBytes - 64),
                                  [] { __syncthreads(); });
        q_staging.store(q_smem, tid, q_scale, q_layout);
    }

    // Q fragments (A operand, 16 rows x HeadDim) stay in registers up to head dim 128; at 256
    // they would crowd out the output accumulators, so those re-read them from shared memory.
    constexpr bool kQInRegisters = HeadDim <= 128;
    cp_async::wait_group<S::kStages - 1>();  // the Q group
    __syncthreads();
    uint32_t q_frag[kQInRegisters ? HeadDim / 16 : 1][4];
    const uint32_t q_part = q_layout(lane % 16, lane / 16);  // this thread's part (stage_layout.h)
    const auto q_address = [&](int step) {
        return reinterpret_cast<T*>(q_smem + layout::at(q_layout, q_part, 0, 2 * step));
    };
    if constexpr (kQInRegisters) {
#pragma unroll
        for (int step = 0; step < HeadDim / 16; ++step) mma::ldmatrix_m8n8x4(q_frag[step], q_address(step));
    }

    const int g = lane / 4;  // this thread holds rows g and g + 8 of the tile (mma accumulator layout)
    const ScoreScale sc(a.softmax_scale, a.softcap, k_scale, q_scale);
    const KeyBounds bounds = key_bounds<Causal>(row0, g, group, kv_len, qo_len, kv_begin, kv_end, a.window_left);
    const auto q_step = [&](int step, uint32_t(&frag)[4]) {
        if constexpr (kQInRegisters) {
#pragma unroll
            for (int e = 0; e < 4; ++e) frag[e] = q_frag[step][e];
        } else {
            mma::ldmatrix_m8n8x4(frag, q_address(step));
        }
    };
    WarpState<HeadDim> st;
    st.init();

    for (int it = 0; it < iterations; ++it) {
        cp_async::wait_group<S::kStages - 2>();
        __syncthreads();  // stage `it` is visible to all; stage it - 1's buffer is free again
        issue(it + S::kStages - 1);
        const uint8_t* k_tile = stage_smem + (it % S::kStages) * S::kStageBytes;
        const int key0 = warp * S::kWarpKeys;  // this warp's keys within the stage
        warp_stage<T, KV, HeadDim, S::kBlocks>(st, k_tile, k_tile + S::kTileBytes, key0,
                                               kv_begin + it * S::kKeys + key0, bounds, sc, stage_offset, q_step, lane,
                                               row0 + 8 < qo_len * group);
    }

#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900)
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
    // Combine the warps' partial softmax states through shared memory (the stages are free now).
    cp_async::wait_group<0>();
    __syncthreads();
    float* state = reinterpret_cast<float*>(smem);  // [warp][16 rows][m, l], then [warp][16 rows][HeadDim]
    const int num_chunks = a.split ? (max(span, 1) + chunk - 1) / chunk : 1;
    const TileOutput tile{request, qo_tile, kv_tile, kv_head, qo_len, group, num_chunks};
    finish_tile<T, KV, HeadDim, S::kWarps>(st, state, state + S::kWarps * 16 * 2, a, tile, v_scale, tid,
                                            [] { __syncthreads(); });
    __shared__ int fold_flag;
    fold_if_last<T, HeadDim>(a, tile, tid, S::kThreads, &fold_flag, [] { __syncthreads(); });
}

}  // namespace decode

// One decode kernel with its shape: the stream shape's grid is persistent (at most one CTA per SM).
template <typename Kernel, typename Shape, bool Persistent>
struct DecodeLaunch {
    Kernel kernel;
    cudaError_t occupancy(int* ctas_per_sm) const {
        const cudaError_t error =
            cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Shape::kSmemBytes);
        if (error != cudaSuccess) return error;
        return cudaOccupancyMaxActiveBlocksPerMultiprocessor(ctas_per_sm, kernel, Shape::kThreads, Shape::kSmemBytes);
    }
    cudaError_t launch(const LaunchArgs& a, cudaStream_t stream) const {
        const int items = a.num_ctas * a.num_heads_k;  // the plan bounds it
        const dim3 grid(static_cast<unsigned>(Persistent ? std::max(1, std::min(items, a.sm_count)) : items));
        return launch_overlapped(kernel, grid, dim3(Shape::kThreads), Shape::kSmemBytes, stream, a);
    }
};

// A stream shape with a tail variant (decode_items.cuh): launches whose plan holds tail buffers
// take it (a warp more, kTailSmemBytes more), the others the plain kernel; creation opts both
// into their shared memory and reports the smaller CTAs per SM.
template <typename Kernel, typename Shape>
struct TailStreamLaunch {
    Kernel kernel, tail;
    static constexpr int kTailSmem = Shape::kSmemBytes + decode::kTailSmemBytes;
    cudaError_t occupancy(int* ctas_per_sm) const {
        int tail_ctas = 0;
        cudaError_t error = DecodeLaunch<Kernel, Shape, true>{kernel}.occupancy(ctas_per_sm);
        if (error == cudaSuccess) error = cudaFuncSetAttribute(tail, cudaFuncAttributeMaxDynamicSharedMemorySize, kTailSmem);
        if (error == cudaSuccess) {
            error = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&tail_ctas, tail, Shape::kThreads + 32, kTailSmem);
        }
        *ctas_per_sm = std::min(*ctas_per_sm, tail_ctas);
        return error;
    }
    cudaError_t launch(const LaunchArgs& a, cudaStream_t stream) const {
        if (a.tail_counts == nullptr) return DecodeLaunch<Kernel, Shape, true>{kernel}.launch(a, stream);
        const int items = a.num_ctas * a.num_heads_k;
        const dim3 grid(static_cast<unsigned>(std::max(1, std::min(items, a.sm_count))));
        return launch_overlapped(tail, grid, dim3(Shape::kThreads + 32), kTailSmem, stream, a);
    }
};

template <int Dtype, int KvDtype, int HeadDim, bool Causal, DecodeShape S, bool QFp8>
constexpr auto decode_launch() {
    static_assert(KvDtype == Dtype || KvDtype == FAS_DTYPE_E4M3, "caches hold q's type or e4m3");
    static_assert(!QFp8 || KvDtype == FAS_DTYPE_E4M3, "e4m3 q only over e4m3 caches");
    using T = typename Element<Dtype>::type;
    using KV = typename Element<KvDtype>::type;
    constexpr int kBytes = static_cast<int>(sizeof(KV));
    if constexpr (is_stream(S)) {
        constexpr bool kWide = S == kWideStream;
        constexpr int kRowBlocks = S == kPairStream ? 2 : 1;
        constexpr bool kFine = S == kFineStream;
        constexpr auto kernel = decode::stream_kernel<T, KV, HeadDim, Causal, kWide, QFp8, kRowBlocks, kFine>;
        using Shape = decode::StreamShape<HeadDim, kBytes, kWide, kRowBlocks, kFine>;
        if constexpr ((S == kStream || S == kFineStream) && KvDtype == Dtype) {  // the tail's shapes (plan.cpp)
            constexpr auto tail = decode::stream_kernel<T, KV, HeadDim, Causal, kWide, QFp8, kRowBlocks, kFine, true>;
            return TailStreamLaunch<decltype(kernel), Shape>{kernel, tail};
        } else {
            return DecodeLaunch<decltype(kernel), Shape, true>{kernel};
        }
    } else {
        constexpr auto kernel = decode::kernel<T, KV, HeadDim, Causal, S == kLong, QFp8>;
        return DecodeLaunch<decltype(kernel), decode::Shape<HeadDim, S == kLong, kBytes>, false>{kernel};
    }
}

// Whether the kernel has a shape (kShort and kStream: always).
template <int KvDtype, int HeadDim, int TileQ>
constexpr bool has_shape(DecodeShape shape) {
    constexpr bool kFp8Kv = KvDtype == FAS_DTYPE_E4M3;
    return shape == kLong          ? has_long_decode(HeadDim, TileQ, kFp8Kv)
           : shape == kWideStream ? has_wide_stream(HeadDim, kFp8Kv)
           : shape == kPairStream ? has_pair_stream(HeadDim, kFp8Kv)
           : shape == kFineStream ? has_fine_stream(HeadDim, kFp8Kv)
                                  : true;
}

// fn(launch) with the decode_launch of a shape; cudaErrorInvalidValue for a shape the kernel lacks.
template <int Dtype, int KvDtype, int HeadDim, bool Causal, bool QFp8, typename Fn>
cudaError_t with_shape(DecodeShape shape, const Fn& fn) {
    switch (shape) {
        case kShort: return fn(decode_launch<Dtype, KvDtype, HeadDim, Causal, kShort, QFp8>());
        case kStream: return fn(decode_launch<Dtype, KvDtype, HeadDim, Causal, kStream, QFp8>());
        case kLong:
            if constexpr (has_shape<KvDtype, HeadDim, 16>(kLong)) {
                return fn(decode_launch<Dtype, KvDtype, HeadDim, Causal, kLong, QFp8>());
            }
            break;
        case kWideStream:
            if constexpr (has_shape<KvDtype, HeadDim, 16>(kWideStream)) {
                return fn(decode_launch<Dtype, KvDtype, HeadDim, Causal, kWideStream, QFp8>());
            }
            break;
        case kPairStream:
            if constexpr (has_shape<KvDtype, HeadDim, 16>(kPairStream) && !QFp8) {
                return fn(decode_launch<Dtype, KvDtype, HeadDim, Causal, kPairStream, QFp8>());
            }
            break;
        case kFineStream:
            if constexpr (has_shape<KvDtype, HeadDim, 16>(kFineStream) && !QFp8) {
                return fn(decode_launch<Dtype, KvDtype, HeadDim, Causal, kFineStream, QFp8>());
            }
            break;
    }
    return cudaErrorInvalidValue;
}

// Called at plan creation on the plan's device (opts the shape into its shared memory there).
// e4m3 caches: the e4m3-q kernels too (their launch bounds give both the same CTAs per SM; the
// smaller count is reported should they differ).
template <int Dtype, int KvDtype, int HeadDim, bool Causal, int TileQ>
cudaError_t occupancy_decode(DecodeShape shape, int* ctas_per_sm) {
    static_assert(TileQ == 16, "the decode kernel packs 16 rows per tile");
    *ctas_per_sm = 0;
    if (!has_shape<KvDtype, HeadDim, TileQ>(shape)) return cudaSuccess;
    const auto occupancy = [&](const auto& launch) { return launch.occupancy(ctas_per_sm); };
    cudaError_t error = with_shape<Dtype, KvDtype, HeadDim, Causal, false>(shape, occupancy);
    if constexpr (KvDtype == FAS_DTYPE_E4M3) {
        int fp8_q_ctas = 0;
        if (error == cudaSuccess) {
            error = with_shape<Dtype, KvDtype, HeadDim, Causal, true>(
                shape, [&](const auto& launch) { return launch.occupancy(&fp8_q_ctas); });
        }
        *ctas_per_sm = std::min(*ctas_per_sm, fp8_q_ctas);
    }
    return error;
}

template <int Dtype, int KvDtype, int HeadDim, bool Causal, int TileQ>
cudaError_t run_decode(const LaunchArgs& a, cudaStream_t stream) {
    static_assert(TileQ == 16, "the decode kernel packs 16 rows per tile");
    const auto launch = [&](const auto& shape_launch) { return shape_launch.launch(a, stream); };
    cudaError_t error = cudaErrorInvalidValue;  // a plan this kernel cannot run
    if (!a.q_fp8) {
        error = with_shape<Dtype, KvDtype, HeadDim, Causal, false>(a.shape, launch);
    } else if constexpr (KvDtype == FAS_DTYPE_E4M3) {
        error = with_shape<Dtype, KvDtype, HeadDim, Causal, true>(a.shape, launch);
    }
    if (error != cudaSuccess || !a.split || a.fold_counts != nullptr) return error;  // folded in the kernel
    return launch_merge_decode<typename Element<Dtype>::type, HeadDim>(a, stream);
}

}  // namespace fas_paged

#endif  // FAS_PAGED_DECODE_CUH
