// The project's own decode kernel over a paged KV cache (the paged_decode family): up to 16
// packed (query token, query head) rows of one KV head per CTA, against one KV chunk of one
// sequence, on the plan's schedule (paged.h's LaunchArgs, the same arrays as the FlashInfer
// kernel of paged_prefill, so both share planner and merge).
//
// Why our own: decode streams K and V once and does almost no math per byte, so its speed is
// how many bytes each SM keeps in flight. Loads issued as per-thread cp.async (FlashInfer's
// prefill kernel, and the first version of this one) stall at about 80% of HBM bandwidth
// however deep the pipeline: an SM tracks only so many of them (docs/design/decode-plan.md).
// Here every K and V row of a stage is one bulk copy (cp.async.bulk, the TMA engine) that
// completes on the stage's mbarrier, kStages - 1 stages ahead of the math. Each warp owns 16
// keys of a stage, so warps meet only at the one barrier per stage, and a thread's page id for
// the next stage is loaded a stage early, so a page lookup never stalls an issue.
#ifndef FAS_PAGED_DECODE_CUH
#define FAS_PAGED_DECODE_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "paged/merge.cuh"

namespace fas_paged {
namespace decode {

template <int HeadDim>
struct Shape {
    static constexpr int kWarps = HeadDim == 256 ? 2 : 4;
    static constexpr int kThreads = 32 * kWarps;
    static constexpr int kKeys = 16 * kWarps;  // keys per stage; each warp computes 16
    static constexpr int kRowBytes = HeadDim * 2;
    // Rows padded by 16 bytes in shared memory: ldmatrix's 8 rows then start in 8 distinct
    // 16-byte bank groups (bulk copies cannot swizzle).
    static constexpr int kPitch = kRowBytes + 16;
    static constexpr int kTileBytes = kKeys * kPitch;
    static constexpr int kStageBytes = 2 * kTileBytes;  // K then V
    static constexpr int kQBytes = 16 * kPitch;
    // Two CTAs per SM, each with as many stages as fit in about half the SM's shared memory.
    static constexpr int kBudget = 110 * 1024 - kQBytes;
    static constexpr int kStages = kBudget / kStageBytes < 2 ? 2 : kBudget / kStageBytes > 8 ? 8 : kBudget / kStageBytes;
    static constexpr int kBarrierOffset = kQBytes + kStages * kStageBytes;
    static constexpr int kSmemBytes = kBarrierOffset + kStages * 8;
    static_assert(2 * kKeys == kThreads, "each thread copies one K or V row per stage");
    // The epilogue reuses the stages for every warp's (m, l, O).
    static_assert(kWarps * 16 * (HeadDim + 2) * 4 <= kStages * kStageBytes, "epilogue scratch must fit");
};

template <int HeadDim>
__device__ __forceinline__ uint32_t row_offset(int row, int chunk) {
    return static_cast<uint32_t>(row * Shape<HeadDim>::kPitch + chunk * 16);
}

__device__ __forceinline__ uint32_t smem_address(const void* pointer) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(pointer));
}

// 16 bytes global -> shared, zero-filled when !valid (then nothing is read).
__device__ __forceinline__ void copy16(uint32_t dst, const void* src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void wait_pending() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void barrier_init(uint32_t barrier, uint32_t count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(barrier), "r"(count));
}
__device__ __forceinline__ void barrier_expect(uint32_t barrier, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(barrier), "r"(bytes) : "memory");
}
__device__ __forceinline__ void barrier_wait(uint32_t barrier, uint32_t parity) {
    uint32_t done = 0;
    while (!done) {
        asm volatile(
            "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
            : "=r"(done)
            : "r"(barrier), "r"(parity)
            : "memory");
    }
}
// `bytes` global -> shared through the TMA engine; completion is counted on `barrier`.
__device__ __forceinline__ void bulk_copy(uint32_t dst, const void* src, uint32_t bytes, uint32_t barrier) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
                 "l"(src), "r"(bytes), "r"(barrier)
                 : "memory");
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t address) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(address));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t address) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(address));
}

template <typename T>
struct Mma;
template <>
struct Mma<half> {
    static __device__ __forceinline__ void run(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
            "{%0, %1, %2, %3};\n"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
    static __device__ __forceinline__ uint32_t pack(float x, float y) {
        const __half2 h = __floats2half2_rn(x, y);
        return *reinterpret_cast<const uint32_t*>(&h);
    }
};
template <>
struct Mma<nv_bfloat16> {
    static __device__ __forceinline__ void run(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
            "{%0, %1, %2, %3};\n"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
    static __device__ __forceinline__ uint32_t pack(float x, float y) {
        const __nv_bfloat162 h = __floats2bfloat162_rn(x, y);
        return *reinterpret_cast<const uint32_t*>(&h);
    }
};

template <typename T, int HeadDim, bool Causal>
__global__ void __launch_bounds__(Shape<HeadDim>::kThreads, 2) kernel(const __grid_constant__ LaunchArgs a) {
    using S = Shape<HeadDim>;
    constexpr int kDimBlocks = HeadDim / 8;  // n8 blocks of the output
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
    const int kv_len = pages == 0 ? 0 : (pages - 1) * page_size + a.last_page_len[request];
    const int chunk = a.split ? a.kv_chunk_size[0] : kv_len;
    const int kv_begin = a.split ? min(kv_tile * chunk, kv_len) : 0;
    const int kv_end = a.split ? min(kv_begin + chunk, kv_len) : kv_len;
    const int iterations = (kv_end - kv_begin + S::kKeys - 1) / S::kKeys;
    const int row0 = qo_tile * 16;

    const uint32_t q_smem = smem_address(smem);
    const uint32_t stage_smem = q_smem + S::kQBytes;

#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900)
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
    // Q tile -> shared (its own cp.async group); rows past the tile's queries read as zeros.
    constexpr int kChunks = HeadDim / 8;  // 16-byte chunks per row
    const T* q = static_cast<const T*>(a.q);
    for (int i = tid; i < 16 * kChunks; i += S::kThreads) {
        const int row = i / kChunks, column = i % kChunks;
        const int packed = row0 + row, token = packed / group, head = kv_head * group + packed % group;
        const bool valid = token < qo_len;
        const T* src = q + static_cast<int64_t>(q_begin + (valid ? token : 0)) * a.q_row_stride + head * HeadDim +
                       column * 8;
        copy16(q_smem + row_offset<HeadDim>(row, column), src, valid);
    }
    commit();

    // Each thread copies one row per stage: K row `tid` or V row `tid - kKeys`. Rows past the
    // chunk's end copy its last key again (finite data that the mask then weighs by zero).
    const uint32_t barriers = q_smem + S::kBarrierOffset;
    if (tid == 0) {
        for (int stage = 0; stage < S::kStages; ++stage) barrier_init(barriers + 8 * stage, 1);
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    const bool copies_v = tid >= S::kKeys;
    const int copy_row = copies_v ? tid - S::kKeys : tid;
    const T* cache = static_cast<const T*>(copies_v ? a.v_cache : a.k_cache) + kv_head * HeadDim;
    const int64_t page_stride = copies_v ? a.v_page_stride : a.k_page_stride;
    const int64_t row_stride = copies_v ? a.v_row_stride : a.k_row_stride;
    const int32_t* page_ids = a.page_indices + page_begin;
    const auto key_of = [&](int stage) { return min(kv_begin + stage * S::kKeys + copy_row, kv_end - 1); };
    int next_page = iterations > 0 ? page_ids[key_of(0) / page_size] : 0;
    // Thread 0 arms a stage's barrier with its byte count before a barrier (__syncthreads) that
    // every copy into it follows, so the count never runs ahead of the copies.
    const auto expect = [&](int stage) {
        if (tid == 0 && stage < iterations) {
            barrier_expect(barriers + 8 * (stage % S::kStages), S::kKeys * 2 * S::kRowBytes);
        }
    };
    auto issue = [&](int stage) {
        if (stage >= iterations) return;
        const uint32_t buffer = stage % S::kStages;
        const uint32_t barrier = barriers + 8 * buffer;
        const int key = key_of(stage);
        const T* src = cache + next_page * page_stride + static_cast<int64_t>(key % page_size) * row_stride;
        bulk_copy(stage_smem + buffer * S::kStageBytes + (copies_v ? S::kTileBytes : 0) + copy_row * S::kPitch, src,
                  S::kRowBytes, barrier);
        if (stage + 1 < iterations) next_page = page_ids[key_of(stage + 1) / page_size];
    };

    // Q fragments (A operand, 16 rows x HeadDim) stay in registers up to head dim 128; at 256
    // they would crowd out the output accumulators, so those re-read them from shared memory.
    constexpr bool kQInRegisters = HeadDim <= 128;
    wait_pending<0>();
#pragma unroll
    for (int stage = 0; stage < S::kStages - 1; ++stage) expect(stage);
    __syncthreads();  // Q and the armed barriers are visible to all
#pragma unroll
    for (int stage = 0; stage < S::kStages - 1; ++stage) issue(stage);
    uint32_t q_frag[kQInRegisters ? HeadDim / 16 : 1][4];
    const auto q_address = [&](int step) { return q_smem + row_offset<HeadDim>(lane % 16, 2 * step + lane / 16); };
    if constexpr (kQInRegisters) {
#pragma unroll
        for (int step = 0; step < HeadDim / 16; ++step) ldmatrix_x4(q_frag[step], q_address(step));
    }

    // Rows this thread holds: g and g + 8 of the tile (mma accumulator layout).
    const int g = lane / 4, t = lane % 4;
    const float scale_log2 = a.softmax_scale * kLog2e;
    int last_key[2];  // the last key each row may see (bottom-right causal), else kv_end - 1
#pragma unroll
    for (int j = 0; j < 2; ++j) {
        const int token = (row0 + g + 8 * j) / group;
        last_key[j] = Causal ? min(kv_end - 1, token + kv_len - qo_len) : kv_end - 1;
    }
    const int tile_last_key = Causal ? min(kv_end - 1, row0 / group + kv_len - qo_len) : kv_end - 1;

    float o[kDimBlocks][4];
#pragma unroll
    for (int d = 0; d < kDimBlocks; ++d) o[d][0] = o[d][1] = o[d][2] = o[d][3] = 0.f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};

    for (int it = 0; it < iterations; ++it) {
        barrier_wait(barriers + 8 * (it % S::kStages), (it / S::kStages) & 1);
        expect(it + S::kStages - 1);  // its buffer's previous stage (it - 1) has completed
        __syncthreads();  // every warp is done with stage it - 1, whose buffer the next issue refills
        issue(it + S::kStages - 1);

        const uint32_t k_tile = stage_smem + (it % S::kStages) * S::kStageBytes;
        const uint32_t v_tile = k_tile + S::kTileBytes;
        const int key0 = warp * 16;  // this warp's keys within the stage

        float s[2][4] = {};
#pragma unroll
        for (int step = 0; step < HeadDim / 16; ++step) {
            uint32_t k_frag[4];
            const int m8 = lane / 8;
            ldmatrix_x4(k_frag, k_tile + row_offset<HeadDim>(key0 + (m8 / 2) * 8 + lane % 8, 2 * step + m8 % 2));
            uint32_t(&q_step)[4] = q_frag[kQInRegisters ? step : 0];
            if constexpr (!kQInRegisters) ldmatrix_x4(q_step, q_address(step));
            Mma<T>::run(s[0], q_step, k_frag[0], k_frag[1]);
            Mma<T>::run(s[1], q_step, k_frag[2], k_frag[3]);
        }
        const int stage_key = kv_begin + it * S::kKeys + key0;
        if (stage_key + 15 > tile_last_key) {  // some key of this warp is past a row's end
#pragma unroll
            for (int n = 0; n < 2; ++n) {
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int key = stage_key + n * 8 + 2 * t + (e & 1);
                    if (key > last_key[e / 2]) s[n][e] = -INFINITY;
                }
            }
        }
        // Online softmax in the log2 domain, per row j (g, g + 8).
#pragma unroll
        for (int j = 0; j < 2; ++j) {
            float top = fmaxf(fmaxf(s[0][2 * j], s[0][2 * j + 1]), fmaxf(s[1][2 * j], s[1][2 * j + 1]));
            top = fmaxf(top, __shfl_xor_sync(0xffffffff, top, 1));
            top = fmaxf(top, __shfl_xor_sync(0xffffffff, top, 2));
            const float m_new = fmaxf(m[j], top * scale_log2);
            const float base = m_new == -INFINITY ? 0.f : m_new;  // rows with no key yet stay at 0
            const float correction = exp2f(m[j] - base);
            m[j] = m_new;
            l[j] *= correction;
#pragma unroll
            for (int n = 0; n < 2; ++n) {
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const float p = exp2f(s[n][2 * j + e] * scale_log2 - base);
                    s[n][2 * j + e] = p;
                    l[j] += p;
                }
            }
#pragma unroll
            for (int d = 0; d < kDimBlocks; ++d) {
                o[d][2 * j] *= correction;
                o[d][2 * j + 1] *= correction;
            }
        }
        // P (16 x 16 keys) as the A operand; V (16 keys x HeadDim) through transposing ldmatrix.
        const uint32_t p_frag[4] = {Mma<T>::pack(s[0][0], s[0][1]), Mma<T>::pack(s[0][2], s[0][3]),
                                    Mma<T>::pack(s[1][0], s[1][1]), Mma<T>::pack(s[1][2], s[1][3])};
#pragma unroll
        for (int pair = 0; pair < kDimBlocks / 2; ++pair) {
            uint32_t v_frag[4];
            const int m8 = lane / 8;
            ldmatrix_x4_trans(v_frag, v_tile + row_offset<HeadDim>(key0 + (m8 % 2) * 8 + lane % 8, 2 * pair + m8 / 2));
            Mma<T>::run(o[2 * pair], p_frag, v_frag[0], v_frag[1]);
            Mma<T>::run(o[2 * pair + 1], p_frag, v_frag[2], v_frag[3]);
        }
    }

#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900)
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
    // Combine the warps' partial softmax states through shared memory (every issued stage was
    // waited for, so no copy is in flight).
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
#pragma unroll
    for (int d = 0; d < kDimBlocks; ++d) {
#pragma unroll
        for (int j = 0; j < 2; ++j) {
            float2* at = reinterpret_cast<float2*>(partial + (warp * 16 + g + 8 * j) * HeadDim + d * 8 + 2 * t);
            *at = make_float2(o[d][2 * j], o[d][2 * j + 1]);
        }
    }
    __syncthreads();

    const int num_chunks = a.split ? (max(kv_len, 1) + chunk - 1) / chunk : 1;
    float* lse = a.split ? a.tmp_s : a.lse;
    for (int i = tid; i < 16 * kChunks; i += S::kThreads) {
        const int row = i / kChunks, chunk8 = i % kChunks;
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
        const float inverse = sum > 0.f ? 1.f / sum : 0.f;  // a row without keys writes zeros
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
            packed8.x = Mma<T>::pack(acc[0], acc[1]);
            packed8.y = Mma<T>::pack(acc[2], acc[3]);
            packed8.z = Mma<T>::pack(acc[4], acc[5]);
            packed8.w = Mma<T>::pack(acc[6], acc[7]);
            *reinterpret_cast<uint4*>(static_cast<T*>(a.out) + at) = packed8;
        }
        if (chunk8 == 0 && lse != nullptr) {
            lse[out_row * a.num_heads_q + head] = sum > 0.f ? log2f(sum) + top : -INFINITY;
        }
    }
}

}  // namespace decode

template <int Dtype, int HeadDim, bool Causal>
struct DecodeTraits {
    using T = typename Element<Dtype>::type;
    using Shape = decode::Shape<HeadDim>;
    static constexpr auto kernel = decode::kernel<T, HeadDim, Causal>;
};

// Called at plan creation on the plan's device (opts the kernel into its shared memory there).
template <int Dtype, int HeadDim, bool Causal>
cudaError_t occupancy_decode(int* ctas_per_sm) {
    using Traits = DecodeTraits<Dtype, HeadDim, Causal>;
    cudaError_t error = cudaFuncSetAttribute(Traits::kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             Traits::Shape::kSmemBytes);
    if (error != cudaSuccess) return error;
    return cudaOccupancyMaxActiveBlocksPerMultiprocessor(ctas_per_sm, Traits::kernel, Traits::Shape::kThreads,
                                                         Traits::Shape::kSmemBytes);
}

template <int Dtype, int HeadDim, bool Causal>
cudaError_t run_decode(const LaunchArgs& a, cudaStream_t stream) {
    using Traits = DecodeTraits<Dtype, HeadDim, Causal>;
    cudaLaunchAttribute overlap{};
    overlap.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    overlap.val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t config{};
    config.gridDim = dim3(static_cast<unsigned>(a.num_ctas) * a.num_heads_k);  // the plan bounds it
    config.blockDim = dim3(Traits::Shape::kThreads);
    config.dynamicSmemBytes = Traits::Shape::kSmemBytes;
    config.stream = stream;
    config.attrs = &overlap;
    config.numAttrs = 1;
    cudaError_t error = cudaLaunchKernelEx(&config, Traits::kernel, a);
    if (error != cudaSuccess || !a.split) return error;
    return launch_merge<float, typename Traits::T, HeadDim>(a, stream);
}

}  // namespace fas_paged

#endif  // FAS_PAGED_DECODE_CUH
