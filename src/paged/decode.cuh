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

#include <cstdint>
#include <type_traits>

#include <flashinfer/cp_async.cuh>
#include <flashinfer/math.cuh>
#include <flashinfer/mma.cuh>

#include "paged/decode_shape.h"
#include "paged/fp8_kv.cuh"
#include "paged/merge.cuh"

namespace fas_paged {
namespace decode {

// Byte offset of 16-byte chunk `chunk` of row `row` in a tile of rows of `HeadDim` elements:
// chunks XOR-swizzled by the row's low 3 bits, so that ldmatrix's 8 rows hit 8 distinct banks.
template <int HeadDim>
__device__ __forceinline__ uint32_t swizzle(int row, int chunk) {
    return static_cast<uint32_t>(row * HeadDim * 2 + ((chunk ^ (row & 7)) << 4));
}

namespace cp_async = flashinfer::cp_async;
namespace mma = flashinfer::mma;

// Two floats rounded to one 32-bit register of T pair (an mma operand, or two output elements).
template <typename T>
__device__ __forceinline__ uint32_t pack(float x, float y) {
    if constexpr (std::is_same_v<T, half>) {
        const __half2 h = __floats2half2_rn(x, y);
        return *reinterpret_cast<const uint32_t*>(&h);
    } else {
        const __nv_bfloat162 h = __floats2bfloat162_rn(x, y);
        return *reinterpret_cast<const uint32_t*>(&h);
    }
}

// 16 bytes global -> shared, zero-filled when !valid (then nothing is read).
template <typename T>
__device__ __forceinline__ void copy16(uint8_t* dst, const T* src, bool valid) {
    cp_async::pred_load_128b<cp_async::PrefetchMode::kNoPrefetch, cp_async::SharedMemFillMode::kFillZero>(
        reinterpret_cast<T*>(dst), src, valid);
}

// T: q and out; KV: the caches' element (T, or __nv_fp8_e4m3).
template <typename T, typename KV, int HeadDim, bool Causal, bool Long>
__global__ void __launch_bounds__(Shape<HeadDim, Long, sizeof(KV)>::kThreads,
                                  Shape<HeadDim, Long, sizeof(KV)>::kCtasPerSm)
    kernel(const __grid_constant__ LaunchArgs a) {
    using S = Shape<HeadDim, Long, static_cast<int>(sizeof(KV))>;
    constexpr bool kFp8 = sizeof(KV) == 1;
    // The e4m3 kernel multiplies in fp16 whatever q's type: e4m3 widens to fp16 in one instruction
    // per pair (to bf16 it takes four), probabilities lose less in fp16, and bf16 q is rescaled by
    // a power of two into fp16's range (fp8::QStaging). Accumulators and out are as for 16-bit.
    using M = std::conditional_t<kFp8, half, T>;
    // Where a stage holds chunk `chunk` of cache row `row`.
    const auto stage_offset = [](int row, int chunk) {
        if constexpr (kFp8) return fp8::swizzle<HeadDim>(row, chunk);
        else return swizzle<HeadDim>(row, chunk);
    };
    constexpr int kDimBlocks = HeadDim / 8;  // n8 blocks of the output (e4m3: even dims, odd dims per 16)
    constexpr float kLog2e = 1.4426950408889634f;
    extern __shared__ __align__(128) uint8_t smem[];
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    // KV heads vary fastest across the grid: the CTAs of one sequence's heads run together and
    // read the two halves of the same cache rows at about the same time.
    const int cta = blockIdx.x / a.num_heads_k, kv_head = blockIdx.x % a.num_heads_k;

    // The plan's own schedule: safe to read before the previous kernel on the stream finishes.
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
    fp8::QStaging<T, HeadDim, S::kThreads, kFp8> q_staging;
    if constexpr (kFp8) {
        q_staging.load(tid, [&](int row, bool* valid) {
            const int packed = row0 + row, token = packed / group, head = kv_head * group + packed % group;
            *valid = token < qo_len;
            return q + static_cast<int64_t>(q_begin + (*valid ? token : 0)) * a.q_row_stride + head * HeadDim;
        });
    } else {
        for (int i = tid; i < 16 * kQChunks; i += S::kThreads) {
            const int row = i / kQChunks, column = i % kQChunks;
            const int packed = row0 + row, token = packed / group, head = kv_head * group + packed % group;
            const bool valid = token < qo_len;
            const T* src = q + static_cast<int64_t>(q_begin + (valid ? token : 0)) * a.q_row_stride +
                           head * HeadDim + column * 8;
            copy16(q_smem + swizzle<HeadDim>(row, column), src, valid);
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
        q_scale = q_staging.scale(warp, lane, reinterpret_cast<float*>(stage_smem + S::kRingBytes - 64));
        q_staging.store(q_smem, tid, q_scale, [](int row, int chunk) { return swizzle<HeadDim>(row, chunk); });
    }

    // Q fragments (A operand, 16 rows x HeadDim) stay in registers up to head dim 128; at 256
    // they would crowd out the output accumulators, so those re-read them from shared memory.
    constexpr bool kQInRegisters = HeadDim <= 128;
    cp_async::wait_group<S::kStages - 1>();  // the Q group
    __syncthreads();
    uint32_t q_frag[kQInRegisters ? HeadDim / 16 : 1][4];
    const auto q_address = [&](int step) {
        return reinterpret_cast<T*>(q_smem + swizzle<HeadDim>(lane % 16, 2 * step + lane / 16));
    };
    if constexpr (kQInRegisters) {
#pragma unroll
        for (int step = 0; step < HeadDim / 16; ++step) mma::ldmatrix_m8n8x4(q_frag[step], q_address(step));
    }

    // Rows this thread holds: g and g + 8 of the tile (mma accumulator layout).
    const int g = lane / 4, t = lane % 4;
    // A softcap turns a score s into cap * tanh(s * scale / cap): tanh here, cap in the exp2 scale.
    // k_scale multiplies every raw q.k, so it joins the factor applied to those.
    const bool capped = a.softcap > 0.f;
    const float qk_scale = k_scale / q_scale;  // raw products -> q.k
    const float pre_tanh = capped ? a.softmax_scale / a.softcap * qk_scale : 0.f;
    const float scale_log2 = (capped ? a.softcap : a.softmax_scale * qk_scale) * kLog2e;
    // The keys each row may see: up to last_key (bottom-right causal, else kv_end - 1), from
    // first_key on (a left window, else 0). tile_*: the bounds every row of the tile obeys.
    const bool window = a.window_left >= 0;
    int last_key[2], first_key[2];
#pragma unroll
    for (int j = 0; j < 2; ++j) {
        const int token = (row0 + g + 8 * j) / group;
        last_key[j] = Causal ? min(kv_end - 1, token + kv_len - qo_len) : kv_end - 1;
        first_key[j] = window ? token + kv_len - qo_len - a.window_left : 0;
    }
    const int tile_last_key = Causal ? min(kv_end - 1, row0 / group + kv_len - qo_len) : kv_end - 1;
    const int tile_first_key = window ? (row0 + 15) / group + kv_len - qo_len - a.window_left : 0;

    float o[kDimBlocks][4];
#pragma unroll
    for (int d = 0; d < kDimBlocks; ++d) o[d][0] = o[d][1] = o[d][2] = o[d][3] = 0.f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};

    for (int it = 0; it < iterations; ++it) {
        cp_async::wait_group<S::kStages - 2>();
        __syncthreads();  // stage `it` is visible to all; stage it - 1's buffer is free again
        issue(it + S::kStages - 1);

        uint8_t* const k_tile = stage_smem + (it % S::kStages) * S::kStageBytes;
        uint8_t* const v_tile = k_tile + S::kTileBytes;
        const int key0 = warp * S::kWarpKeys;  // this warp's keys within the stage

        float s[S::kBlocks][2][4] = {};  // [16-key block][keys 0-7, 8-15][mma accumulator]
        if constexpr (kFp8) {
            fp8::scores<HeadDim>(s, k_tile, key0, lane, [&](int step, uint32_t(&frag)[4]) {
                if constexpr (kQInRegisters) {
#pragma unroll
                    for (int e = 0; e < 4; ++e) frag[e] = q_frag[step][e];
                } else {
                    mma::ldmatrix_m8n8x4(frag, q_address(step));
                }
            });
        } else {
#pragma unroll
            for (int step = 0; step < HeadDim / 16; ++step) {
                uint32_t(&q_step)[4] = q_frag[kQInRegisters ? step : 0];
                if constexpr (!kQInRegisters) mma::ldmatrix_m8n8x4(q_step, q_address(step));
#pragma unroll
                for (int b = 0; b < S::kBlocks; ++b) {
                    uint32_t k_frag[4];
                    const int m8 = lane / 8;
                    mma::ldmatrix_m8n8x4(k_frag, reinterpret_cast<T*>(k_tile + swizzle<HeadDim>(
                                                     key0 + b * 16 + (m8 / 2) * 8 + lane % 8, 2 * step + m8 % 2)));
                    mma::mma_sync_m16n16k16_row_col_f16f16f32<T>(&s[b][0][0], q_step, k_frag);  // keys 0-7 and 8-15
                }
            }
        }
        if (capped) {
#pragma unroll
            for (int b = 0; b < S::kBlocks; ++b) {
#pragma unroll
                for (int n = 0; n < 2; ++n) {
#pragma unroll
                    for (int e = 0; e < 4; ++e) s[b][n][e] = flashinfer::math::tanh(s[b][n][e] * pre_tanh);
                }
            }
        }
        const int stage_key = kv_begin + it * S::kKeys + key0;
        // Some key of this warp is past a row's end or before a row's window.
        if (stage_key + S::kWarpKeys - 1 > tile_last_key || stage_key < tile_first_key) {
#pragma unroll
            for (int b = 0; b < S::kBlocks; ++b) {
#pragma unroll
                for (int n = 0; n < 2; ++n) {
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        const int key = stage_key + b * 16 + n * 8 + 2 * t + (e & 1);
                        if (key > last_key[e / 2] || key < first_key[e / 2]) s[b][n][e] = -INFINITY;
                    }
                }
            }
        }
        // Online softmax in the log2 domain, per row j (g, g + 8).
#pragma unroll
        for (int j = 0; j < 2; ++j) {
            float top = -INFINITY;
#pragma unroll
            for (int b = 0; b < S::kBlocks; ++b) {
                top = fmaxf(top, fmaxf(fmaxf(s[b][0][2 * j], s[b][0][2 * j + 1]), fmaxf(s[b][1][2 * j], s[b][1][2 * j + 1])));
            }
            top = fmaxf(top, __shfl_xor_sync(0xffffffff, top, 1));
            top = fmaxf(top, __shfl_xor_sync(0xffffffff, top, 2));
            const float m_new = fmaxf(m[j], top * scale_log2);
            const float base = m_new == -INFINITY ? 0.f : m_new;  // rows with no key yet stay at 0
            const float correction = exp2f(m[j] - base);
            m[j] = m_new;
            l[j] *= correction;
#pragma unroll
            for (int b = 0; b < S::kBlocks; ++b) {
#pragma unroll
                for (int n = 0; n < 2; ++n) {
#pragma unroll
                    for (int e = 0; e < 2; ++e) {
                        const float p = exp2f(s[b][n][2 * j + e] * scale_log2 - base);
                        s[b][n][2 * j + e] = p;
                        l[j] += p;
                    }
                }
            }
#pragma unroll
            for (int d = 0; d < kDimBlocks; ++d) {
                o[d][2 * j] *= correction;
                o[d][2 * j + 1] *= correction;
            }
        }
        // P (16 rows x 16 keys per block) as the A operand; V (16 keys x HeadDim) through
        // transposing ldmatrix.
#pragma unroll
        for (int b = 0; b < S::kBlocks; ++b) {
            uint32_t p_frag[4] = {pack<M>(s[b][0][0], s[b][0][1]), pack<M>(s[b][0][2], s[b][0][3]),
                                  pack<M>(s[b][1][0], s[b][1][1]), pack<M>(s[b][1][2], s[b][1][3])};
            if constexpr (kFp8) {
                fp8::accumulate<HeadDim>(o, p_frag, v_tile, key0 + b * 16, lane);
            } else {
#pragma unroll
                for (int pair = 0; pair < kDimBlocks / 2; ++pair) {
                    uint32_t v_frag[4];
                    const int m8 = lane / 8;
                    mma::ldmatrix_m8n8x4_trans(v_frag, reinterpret_cast<T*>(v_tile + swizzle<HeadDim>(
                                                           key0 + b * 16 + (m8 % 2) * 8 + lane % 8,
                                                           2 * pair + m8 / 2)));
                    mma::mma_sync_m16n16k16_row_col_f16f16f32<T>(&o[2 * pair][0], p_frag, v_frag);  // 2 dim blocks
                }
            }
        }
    }

#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900)
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
    // Combine the warps' partial softmax states through shared memory (the stages are free now).
    cp_async::wait_group<0>();
    __syncthreads();
#pragma unroll
    for (int j = 0; j < 2; ++j) {
        l[j] += __shfl_xor_sync(0xffffffff, l[j], 1);
        l[j] += __shfl_xor_sync(0xffffffff, l[j], 2);
    }
    float* state = reinterpret_cast<float*>(smem);           // [warp][16 rows][m, l]
    float* partial = state + S::kWarps * 16 * 2;              // [warp][16 rows][HeadDim]
    if (t == 0) {
#pragma unroll
        for (int j = 0; j < 2; ++j) {
            state[(warp * 16 + g + 8 * j) * 2] = m[j];
            state[(warp * 16 + g + 8 * j) * 2 + 1] = l[j];
        }
    }
    if constexpr (kFp8) {
        fp8::store_partial<HeadDim>(partial + (warp * 16 + g) * HeadDim, o, t);
    } else {
#pragma unroll
        for (int d = 0; d < kDimBlocks; ++d) {
#pragma unroll
            for (int j = 0; j < 2; ++j) {
                float2* at = reinterpret_cast<float2*>(partial + (warp * 16 + g + 8 * j) * HeadDim + d * 8 + 2 * t);
                *at = make_float2(o[d][2 * j], o[d][2 * j + 1]);
            }
        }
    }
    __syncthreads();

    const int num_chunks = a.split ? (max(span, 1) + chunk - 1) / chunk : 1;
    float* lse = a.split ? a.tmp_s : a.lse;
    for (int i = tid; i < 16 * kQChunks; i += S::kThreads) {
        const int row = i / kQChunks, chunk8 = i % kQChunks;
        const int packed = row0 + row, token = packed / group, head = kv_head * group + packed % group;
        if (token >= qo_len) continue;
        float top = -INFINITY;
#pragma unroll
        for (int w = 0; w < S::kWarps; ++w) top = fmaxf(top, state[(w * 16 + row) * 2]);
        const float base = top == -INFINITY ? 0.f : top;
        float sum = 0.f, acc[8] = {};
#pragma unroll
        for (int w = 0; w < S::kWarps; ++w) {
            const float weight = exp2f(state[(w * 16 + row) * 2] - base);
            sum += weight * state[(w * 16 + row) * 2 + 1];
            const float4* from = reinterpret_cast<const float4*>(partial + (w * 16 + row) * HeadDim + chunk8 * 8);
            const float4 lo = from[0], hi = from[1];
            acc[0] += weight * lo.x, acc[1] += weight * lo.y, acc[2] += weight * lo.z, acc[3] += weight * lo.w;
            acc[4] += weight * hi.x, acc[5] += weight * hi.y, acc[6] += weight * hi.z, acc[7] += weight * hi.w;
        }
        float inverse = sum > 0.f ? 1.f / sum : 0.f;  // a row without keys writes zeros
        if constexpr (kFp8) inverse *= v_scale;         // split partials too: the merge is linear in V
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[e] *= inverse;
        const int64_t out_row = a.o_indptr[request] + (a.split ? token * num_chunks + kv_tile : token);
        const int64_t at = (out_row * a.num_heads_q + head) * HeadDim + chunk8 * 8;
        if (a.split) {  // fp32 partials: the merge rounds once, not once per chunk
            float4* to = reinterpret_cast<float4*>(static_cast<float*>(a.tmp_v) + at);
            to[0] = make_float4(acc[0], acc[1], acc[2], acc[3]);
            to[1] = make_float4(acc[4], acc[5], acc[6], acc[7]);
        } else {
            uint4 packed8;
            packed8.x = pack<T>(acc[0], acc[1]);
            packed8.y = pack<T>(acc[2], acc[3]);
            packed8.z = pack<T>(acc[4], acc[5]);
            packed8.w = pack<T>(acc[6], acc[7]);
            *reinterpret_cast<uint4*>(static_cast<T*>(a.out) + at) = packed8;
        }
        if (chunk8 == 0 && lse != nullptr) {
            lse[out_row * a.num_heads_q + head] = sum > 0.f ? log2f(sum) + top : -INFINITY;
        }
    }
}

}  // namespace decode

template <int Dtype, int KvDtype, int HeadDim, bool Causal, bool Long>
struct DecodeTraits {
    static_assert(KvDtype == Dtype || KvDtype == FAS_DTYPE_E4M3, "caches hold q's type or e4m3");
    using T = typename Element<Dtype>::type;
    using KV = typename Element<KvDtype>::type;
    using Shape = decode::Shape<HeadDim, Long, static_cast<int>(sizeof(KV))>;
    static constexpr auto kernel = decode::kernel<T, KV, HeadDim, Causal, Long>;

    static cudaError_t occupancy(int* ctas_per_sm) {
        const cudaError_t error =
            cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Shape::kSmemBytes);
        if (error != cudaSuccess) return error;
        return cudaOccupancyMaxActiveBlocksPerMultiprocessor(ctas_per_sm, kernel, Shape::kThreads, Shape::kSmemBytes);
    }
    static cudaError_t launch(const LaunchArgs& a, cudaStream_t stream) {
        const dim3 grid(static_cast<unsigned>(a.num_ctas) * a.num_heads_k);  // the plan bounds it
        return launch_overlapped(kernel, grid, dim3(Shape::kThreads), Shape::kSmemBytes, stream, a);
    }
};

// Called at plan creation on the plan's device (opts the shape into its shared memory there).
template <int Dtype, int KvDtype, int HeadDim, bool Causal, int TileQ>
cudaError_t occupancy_decode(bool long_shape, int* ctas_per_sm) {
    static_assert(TileQ == 16, "the decode kernel packs 16 rows per tile");
    if (!long_shape) return DecodeTraits<Dtype, KvDtype, HeadDim, Causal, false>::occupancy(ctas_per_sm);
    if constexpr (has_long_decode(HeadDim, TileQ, KvDtype == FAS_DTYPE_E4M3)) {
        return DecodeTraits<Dtype, KvDtype, HeadDim, Causal, true>::occupancy(ctas_per_sm);
    }
    *ctas_per_sm = 0;
    return cudaSuccess;
}

template <int Dtype, int KvDtype, int HeadDim, bool Causal, int TileQ>
cudaError_t run_decode(const LaunchArgs& a, cudaStream_t stream) {
    static_assert(TileQ == 16, "the decode kernel packs 16 rows per tile");
    cudaError_t error = cudaErrorInvalidValue;  // a long-shape plan for a head dim without one
    if (!a.long_shape) {
        error = DecodeTraits<Dtype, KvDtype, HeadDim, Causal, false>::launch(a, stream);
    } else if constexpr (has_long_decode(HeadDim, TileQ, KvDtype == FAS_DTYPE_E4M3)) {
        error = DecodeTraits<Dtype, KvDtype, HeadDim, Causal, true>::launch(a, stream);
    }
    if (error != cudaSuccess || !a.split) return error;
    return launch_merge<float, typename Element<Dtype>::type, HeadDim>(a, stream);
}

}  // namespace fas_paged

#endif  // FAS_PAGED_DECODE_CUH
