// How fast can one card stream a decode's KV bytes, and by which load path? A measuring tool
// for the decode kernel's design (docs/design/decode-roofline.md), not part of the library.
//
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -o stream_probe bench/stream_probe.cu
//   ./stream_probe            # prints a markdown table: card, ceilings, then each load path
//   ./stream_probe pages      # only the paged study: the table's order, the page size, where
//                             # the page ids are loaded, the decode kernel's 4D paged map
//
// Ceilings: a 2 GiB device-to-device copy (bytes read + written, as the copy counts them) and a
// plain read kernel (16-byte loads, many warps, one word written per CTA). Load paths: the
// decode's access pattern without its math. K and V caches [rows, heads, 128] bf16; a CTA owns
// one KV head and a run of keys and streams its 256-byte rows of K and V through shared memory
// in stages, with one of:
//   cpasync : every thread copies 16-byte chunks (cp.async), wait_group + barrier per stage
//   tensor  : one tensor-map copy (cp.async.bulk.tensor, the TMA engine) per box of rows per
//             64-column half, mbarrier per stage
//   pair    : one tensor-map copy per box of rows for both halves (a 3D map)
// over contiguous rows or shuffled pages, and touches every 16 bytes it loaded once, so nothing
// is optimized away. (One cp.async.bulk per 256-byte row was also tried: 1.1-2.2 TB/s on an H200,
// 2026-11-26, docs/design/decode-roofline.md.)
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "../src/paged/mbarrier.cuh"  // the decode kernel's mbarrier and tensor-copy primitives

namespace tma = fas_paged::decode::tma;

#define CHECK(call)                                                                                  \
    do {                                                                                             \
        cudaError_t e_ = (call);                                                                     \
        if (e_ != cudaSuccess) {                                                                     \
            std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
            std::exit(1);                                                                            \
        }                                                                                            \
    } while (0)

constexpr int kDim = 128;             // head dim, bf16: 256-byte rows per head
constexpr int kRowBytes = kDim * 2;

__device__ __forceinline__ void tensor_2d(void* dst, const CUtensorMap* map, int x, int y, uint64_t* bar) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];" ::"r"(
            tma::smem(dst)),
        "l"(map), "r"(tma::smem(bar)), "r"(x), "r"(y)
        : "memory");
}
// Starts moving a 2D box towards L2 (no shared memory, no completion).
__device__ __forceinline__ void prefetch_2d(const CUtensorMap* map, int x, int y) {
    asm volatile("cp.async.bulk.prefetch.tensor.2d.L2.global [%0, {%1, %2}];" ::"l"(map), "r"(x), "r"(y) : "memory");
}
// A 3D box (elements, rows, halves) at element 0 of row y, half z.
__device__ __forceinline__ void tensor_3d(void* dst, const CUtensorMap* map, int y, int z, uint64_t* bar) {
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5}], [%2];" ::"r"(
            tma::smem(dst)),
        "l"(map), "r"(tma::smem(bar)), "r"(0), "r"(y), "r"(z)
        : "memory");
}
__device__ __forceinline__ void cp16(void* dst, const void* src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(tma::smem(dst)), "l"(src) : "memory");
}

struct Work {
    const uint8_t* k;
    const uint8_t* v;
    int heads;         // KV heads (row stride = heads x 256 bytes)
    int chunk_keys;    // keys per CTA
    int page;          // rows per page; 0: contiguous
    const int* pages;  // page table: logical page -> physical page (shuffled)
    uint32_t* sink;
};

// Reads 16 bytes of every chunk a thread is given, so that the loads stay live.
__device__ __forceinline__ uint32_t touch(const uint8_t* smem, int bytes, int tid, int threads) {
    uint32_t x = 0;
    for (int i = tid * 16; i < bytes; i += threads * 16) x ^= *reinterpret_cast<const uint32_t*>(smem + i);
    return x;
}

__device__ __forceinline__ int64_t physical_row(const Work& w, int64_t key) {
    return w.page == 0 ? key : static_cast<int64_t>(w.pages[key / w.page]) * w.page + key % w.page;
}

// cpasync: every thread, 16 bytes a copy. tensor: one copy per box of Box rows per 64-column half;
// pair: one copy per box of Box rows for both halves (a 3D map: elements, rows, halves).
// ahead: tensor, each box's page id loaded one stage ahead (the decode kernel's producer loads it
// before waiting for the slot). paged4d: ahead, through the decode kernel's map of a paged cache
// (segment elements, segments, rows of a page, pages).
enum Mode { kCpAsync, kTensor, kPair, kAhead, kPaged4D };
constexpr int kStageKeys = 128, kThreads = 128;

// Prefetch > 0 (tensor): also prefetch to L2 the boxes of the stage Prefetch stages beyond the ring.
template <Mode M, int Box, int Stages, int Prefetch = 0>
__global__ void __launch_bounds__(kThreads) stream(const __grid_constant__ Work w, const __grid_constant__ CUtensorMap k_map,
                                                   const __grid_constant__ CUtensorMap v_map) {
    extern __shared__ __align__(1024) uint8_t smem[];
    constexpr int kTile = kStageKeys * kRowBytes, kStage = 2 * kTile;
    __shared__ uint64_t full[Stages];
    const int tid = threadIdx.x;
    const int head = blockIdx.x % w.heads, chunk = blockIdx.x / w.heads;
    const int64_t row0 = static_cast<int64_t>(chunk) * w.chunk_keys;
    const int64_t row_stride = static_cast<int64_t>(w.heads) * kRowBytes;
    const int iterations = w.chunk_keys / kStageKeys;
    if (M != kCpAsync && tid == 0) {
        for (int s = 0; s < Stages; ++s) tma::init(&full[s], 1);
        asm volatile("fence.mbarrier_init.release.cluster;\nfence.proxy.async.shared::cta;" ::: "memory");
    }
    __syncthreads();
    // kAhead / kPaged4D: lane b's page id of box b of the next stage issued (-1: none).
    int next_page = -1;
    const auto page_of = [&](int it) {
        const int64_t key = row0 + static_cast<int64_t>(it) * kStageKeys + tid * Box;
        return it < iterations && tid < kStageKeys / Box ? (w.page == 0 ? 0 : w.pages[key / w.page]) : -1;
    };
    if (M == kAhead || M == kPaged4D) next_page = page_of(0);
    const auto issue = [&](int it) {
        if (it >= iterations) {
            if (M == kCpAsync) asm volatile("cp.async.commit_group;" ::: "memory");
            return;
        }
        uint8_t* kt = smem + (it % Stages) * kStage;
        uint8_t* vt = kt + kTile;
        const int64_t first = row0 + static_cast<int64_t>(it) * kStageKeys;
        if constexpr (M == kCpAsync) {
            for (int i = tid; i < kStageKeys * 16; i += kThreads) {
                const int row = i / 16, col = i % 16;
                const int64_t at = physical_row(w, first + row) * row_stride + head * kRowBytes + col * 16;
                const int dst = row * kRowBytes + ((col ^ (row & 7)) << 4);
                cp16(kt + dst, w.k + at);
                cp16(vt + dst, w.v + at);
            }
            asm volatile("cp.async.commit_group;" ::: "memory");
        } else if (M == kAhead || M == kPaged4D) {
            if (tid < 32) {
                const int page = next_page;
                next_page = page_of(it + 1);  // its latency hides behind this stage's wait
                if (tid == 0) tma::arrive_expect(&full[it % Stages], kStage);
                __syncwarp();
                if (tid < kStageKeys / Box) {
                    const int64_t key = first + tid * Box;
                    const int in_page = w.page == 0 ? 0 : static_cast<int>(key % w.page);
                    for (int half = 0; half < 2; ++half) {
                        const int at = half * kStageKeys * 128 + tid * Box * 128;
                        if constexpr (M == kAhead) {
                            const int y = w.page == 0 ? static_cast<int>(key) : page * w.page + in_page;
                            tensor_2d(kt + at, &k_map, head * kDim + half * 64, y, &full[it % Stages]);
                            tensor_2d(vt + at, &v_map, head * kDim + half * 64, y, &full[it % Stages]);
                        } else {
                            tma::copy(kt + at, &k_map, 0, head * 2 + half, in_page, page, &full[it % Stages]);
                            tma::copy(vt + at, &v_map, 0, head * 2 + half, in_page, page, &full[it % Stages]);
                        }
                    }
                }
            }
        } else if (tid < 32) {
            if (tid == 0) tma::arrive_expect(&full[it % Stages], kStage);
            __syncwarp();
            for (int b = tid; b < kStageKeys / Box; b += 32) {
                const int y = static_cast<int>(physical_row(w, first + b * Box));
                if constexpr (M == kTensor) {
                    for (int half = 0; half < 2; ++half) {
                        const int at = half * kStageKeys * 128 + b * Box * 128;
                        tensor_2d(kt + at, &k_map, head * kDim + half * 64, y, &full[it % Stages]);
                        tensor_2d(vt + at, &v_map, head * kDim + half * 64, y, &full[it % Stages]);
                    }
                    if (Prefetch > 0 && it + Prefetch < iterations) {
                        const int ahead = static_cast<int>(physical_row(w, first + Prefetch * kStageKeys + b * Box));
                        for (int half = 0; half < 2; ++half) {
                            prefetch_2d(&k_map, head * kDim + half * 64, ahead);
                            prefetch_2d(&v_map, head * kDim + half * 64, ahead);
                        }
                    }
                } else {
                    tensor_3d(kt + b * Box * kRowBytes, &k_map, y, head * 2, &full[it % Stages]);
                    tensor_3d(vt + b * Box * kRowBytes, &v_map, y, head * 2, &full[it % Stages]);
                }
            }
        }
    };
    for (int s = 0; s < Stages - 1; ++s) issue(s);
    uint32_t acc = 0;
    for (int it = 0; it < iterations; ++it) {
        if constexpr (M == kCpAsync) {
            asm volatile("cp.async.wait_group %0;" ::"n"(Stages - 2) : "memory");
            __syncthreads();
        } else {
            tma::wait(&full[it % Stages], (it / Stages) & 1);
            __syncthreads();  // every thread is past stage it - 1: its slot may be refilled
        }
        issue(it + Stages - 1);
        acc ^= touch(smem + (it % Stages) * kStage, kStage, tid, kThreads);
    }
    if (acc == 0x12345678u) w.sink[blockIdx.x] = acc;  // practically never: keeps the reads
}

__global__ void read_kernel(const uint4* data, int64_t n, uint32_t* sink) {
    uint32_t acc = 0;
    const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
    int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    for (; i + 3 * stride < n; i += 4 * stride) {
        const uint4 a = data[i], b = data[i + stride], c = data[i + 2 * stride], d = data[i + 3 * stride];
        acc ^= a.x ^ b.y ^ c.z ^ d.w;
    }
    for (; i < n; i += stride) acc ^= data[i].x;
    if (acc == 0x12345678u) sink[blockIdx.x] = acc;
}

using EncodeFn = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                              const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                              CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

// pair = false: 2D (all columns of a row, rows), boxes of 64 columns x box_rows; pair = true: 3D
// (64 elements, rows, 64-column halves 128 bytes apart), boxes of 64 x box_rows x 2.
CUtensorMap make_map(EncodeFn encode, const void* base, int64_t rows, int heads, int box_rows, bool pair,
                     CUtensorMapL2promotion promotion) {
    CUtensorMap map{};
    const cuuint64_t dims[3] = {pair ? 64u : static_cast<cuuint64_t>(heads) * kDim, static_cast<cuuint64_t>(rows),
                                static_cast<cuuint64_t>(heads) * 2};
    const cuuint64_t strides[2] = {static_cast<cuuint64_t>(heads) * kRowBytes, 128};
    const cuuint32_t box[3] = {64, static_cast<cuuint32_t>(box_rows), 2};
    const cuuint32_t elem[3] = {1, 1, 1};
    const CUresult r = encode(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, pair ? 3 : 2, const_cast<void*>(base), dims,
                              strides, box, elem, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                              promotion, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS) {
        std::fprintf(stderr, "cuTensorMapEncodeTiled failed (%d)\n", static_cast<int>(r));
        std::exit(1);
    }
    return map;
}

// The decode kernel's map of a paged cache: (64 segment elements, segments, rows of a page, pages),
// boxes of 64 x 1 x box_rows x 1.
CUtensorMap make_paged_map(EncodeFn encode, const void* base, int64_t rows, int heads, int page, int box_rows,
                           CUtensorMapL2promotion promotion) {
    CUtensorMap map{};
    const cuuint64_t row_bytes = static_cast<cuuint64_t>(heads) * kRowBytes;
    const cuuint64_t dims[4] = {64, static_cast<cuuint64_t>(heads) * 2, static_cast<cuuint64_t>(page),
                                static_cast<cuuint64_t>(rows / page)};
    const cuuint64_t strides[3] = {128, row_bytes, row_bytes * page};
    const cuuint32_t box[4] = {64, 1, static_cast<cuuint32_t>(box_rows), 1};
    const cuuint32_t elem[4] = {1, 1, 1, 1};
    const CUresult r = encode(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 4, const_cast<void*>(base), dims, strides, box,
                              elem, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, promotion,
                              CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS) {
        std::fprintf(stderr, "cuTensorMapEncodeTiled (4D) failed (%d)\n", static_cast<int>(r));
        std::exit(1);
    }
    return map;
}

template <typename Launch>
float time_ms(Launch&& launch, int repeats = 20) {
    cudaEvent_t a, b;
    CHECK(cudaEventCreate(&a));
    CHECK(cudaEventCreate(&b));
    for (int i = 0; i < 3; ++i) launch();
    CHECK(cudaGetLastError());
    std::vector<float> t;
    for (int i = 0; i < repeats; ++i) {
        CHECK(cudaEventRecord(a));
        launch();
        CHECK(cudaEventRecord(b));
        CHECK(cudaEventSynchronize(b));
        float ms = 0;
        CHECK(cudaEventElapsedTime(&ms, a, b));
        t.push_back(ms);
    }
    CHECK(cudaGetLastError());
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
}

struct Probe {
    EncodeFn encode;
    uint8_t *k, *v;
    uint32_t* sink;
    int sms;
    int64_t bytes_per_cache;  // per K or V buffer
};

// How a paged cache's page table orders the physical pages: shuffled over the whole cache, in
// order (paged indexing over contiguous rows), or shuffled only within each 2 MiB of the cache.
enum Table { kShuffled, kInOrder, kShuffled2MiB };

// One CTA per SM (KV heads x chunks), 128 threads, stages of 128 keys.
template <Mode M, int Box, int Stages, int Prefetch = 0>
void run_path(const Probe& p, const char* name, int heads, int page,
              CUtensorMapL2promotion promotion = CU_TENSOR_MAP_L2_PROMOTION_L2_256B, Table table = kShuffled) {
    constexpr int kSmem = Stages * 2 * kStageKeys * kRowBytes;
    auto kernel = stream<M, Box, Stages, Prefetch>;
    CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
    const int64_t rows = p.bytes_per_cache / (static_cast<int64_t>(heads) * kRowBytes);
    const int chunks = p.sms / heads;
    const int chunk_keys = static_cast<int>(rows / chunks) / kStageKeys * kStageKeys;
    int* pages = nullptr;  // a shuffled page table over the whole cache
    if (page != 0) {
        std::vector<int> order(rows / page);
        for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
        std::mt19937 rng(7);
        const size_t group = table == kShuffled2MiB ? (size_t{2} << 20) / (static_cast<size_t>(page) * heads * kRowBytes)
                                                    : order.size();
        for (size_t at = 0; table != kInOrder && at < order.size(); at += group) {
            std::shuffle(order.begin() + at, order.begin() + std::min(order.size(), at + group), rng);
        }
        CHECK(cudaMalloc(&pages, order.size() * sizeof(int)));
        CHECK(cudaMemcpy(pages, order.data(), order.size() * sizeof(int), cudaMemcpyHostToDevice));
    }
    Work w{p.k, p.v, heads, chunk_keys, page, pages, p.sink};
    CUtensorMap km{}, vm{};
    if (M == kPaged4D) {
        km = make_paged_map(p.encode, p.k, rows, heads, page == 0 ? Box : page, Box, promotion);
        vm = make_paged_map(p.encode, p.v, rows, heads, page == 0 ? Box : page, Box, promotion);
    } else if (M != kCpAsync) {
        km = make_map(p.encode, p.k, rows, heads, Box, M == kPair, promotion);
        vm = make_map(p.encode, p.v, rows, heads, Box, M == kPair, promotion);
    }
    const int grid = heads * chunks;
    const double moved = 2.0 * grid * chunk_keys * kRowBytes;  // K and V bytes read
    const float ms = time_ms([&] { kernel<<<grid, kThreads, kSmem>>>(w, km, vm); });
    static const char* const kTables[] = {"shuffled pages of ", "pages in order of ", "pages shuffled within 2 MiB of "};
    std::printf("| %s | %d | %s | %d rows | %d x %d KiB | %.2f TB/s |\n", name, heads,
                page ? (kTables[table] + std::to_string(page)).c_str() : "contiguous", Box, Stages,
                2 * kStageKeys * kRowBytes / 1024, moved / (ms * 1e-3) / 1e12);
    if (pages != nullptr) CHECK(cudaFree(pages));
}

int main(int argc, char** argv) {
    const bool pages_only = argc > 1 && std::string(argv[1]) == "pages";  // only the page-table study
    cudaDeviceProp prop{};
    CHECK(cudaGetDeviceProperties(&prop, 0));
    Probe p{};
    p.sms = prop.multiProcessorCount;
    cudaDriverEntryPointQueryResult q{};
    void* fn = nullptr;
    CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q));
    p.encode = reinterpret_cast<EncodeFn>(fn);
    p.bytes_per_cache = int64_t{1} << 30;  // 1 GiB each of K and V: 20x the L2
    CHECK(cudaMalloc(&p.k, p.bytes_per_cache));
    CHECK(cudaMalloc(&p.v, p.bytes_per_cache));
    CHECK(cudaMalloc(&p.sink, 1 << 20));
    CHECK(cudaMemset(p.k, 0x3c, p.bytes_per_cache));  // not zeros
    CHECK(cudaMemset(p.v, 0x3d, p.bytes_per_cache));
    std::printf("GPU: %s, %d SMs, L2 %d MiB, %d-bit memory bus\n\n", prop.name, p.sms, prop.l2CacheSize >> 20,
                prop.memoryBusWidth);

    const int64_t n = p.bytes_per_cache;
    const float copy_ms = time_ms([&] { CHECK(cudaMemcpyAsync(p.v, p.k, n, cudaMemcpyDeviceToDevice)); });
    const float read_ms = time_ms([&] {
        read_kernel<<<p.sms * 8, 256>>>(reinterpret_cast<const uint4*>(p.k), n / 16, p.sink);
    });
    std::printf("| ceiling | TB/s |\n| --- | --- |\n");
    std::printf("| copy 1 GiB device to device (read + write) | %.2f |\n", 2.0 * n / (copy_ms * 1e-3) / 1e12);
    std::printf("| read 1 GiB (16-byte loads, %d CTAs x 256) | %.2f |\n\n", p.sms * 8, n / (read_ms * 1e-3) / 1e12);
    CHECK(cudaMemset(p.v, 0x3d, p.bytes_per_cache));

    std::printf("One CTA per SM, 128 threads, stages of 128 keys (K and V).\n\n");
    std::printf("| path | KV heads | cache | rows per copy | stages | K+V read |\n");
    std::printf("| --- | --- | --- | --- | --- | --- |\n");
    const auto l2_128 = CU_TENSOR_MAP_L2_PROMOTION_L2_128B;
    if (pages_only) {  // where shuffled pages lose against contiguous rows: the lookup, the map, the order
        for (int heads : {1, 2, 8}) {
            run_path<kTensor, 16, 3>(p, "tensor, 128B", heads, 0, l2_128);
            run_path<kAhead, 16, 3>(p, "tensor, 128B, page ids a stage ahead", heads, 0, l2_128);
            for (int page : {16, 32}) {
                for (Table table : {kShuffled, kInOrder}) {
                    run_path<kTensor, 16, 3>(p, "tensor, 128B", heads, page, l2_128, table);
                    run_path<kAhead, 16, 3>(p, "tensor, 128B, page ids a stage ahead", heads, page, l2_128, table);
                    run_path<kPaged4D, 16, 3>(p, "paged 4D map, 128B, page ids a stage ahead", heads, page, l2_128, table);
                }
            }
        }
        return 0;
    }
    for (int heads : {2, 8}) {
        for (int page : {0, 16}) {
            run_path<kCpAsync, 128, 3>(p, "cpasync", heads, page);
            run_path<kTensor, 128, 3>(p, "tensor", heads, page == 0 ? 0 : 128);
            run_path<kTensor, 16, 3>(p, "tensor", heads, page);
            run_path<kPair, 16, 3>(p, "pair", heads, page);
            run_path<kTensor, 16, 3>(p, "tensor, no L2 promotion", heads, page, CU_TENSOR_MAP_L2_PROMOTION_NONE);
            run_path<kTensor, 16, 3>(p, "tensor, 128-byte L2 promotion", heads, page, l2_128);
            run_path<kTensor, 16, 3, 3>(p, "tensor, 128B, L2 prefetch 1 stage past the ring", heads, page, l2_128);
            run_path<kTensor, 16, 3, 4>(p, "tensor, 128B, L2 prefetch 2 stages past the ring", heads, page, l2_128);
            run_path<kTensor, 16, 3, 6>(p, "tensor, 128B, L2 prefetch 4 stages past the ring", heads, page, l2_128);
        }
    }
    return 0;
}
