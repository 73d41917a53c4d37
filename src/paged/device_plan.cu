// Device-length plans (fas_plan_update, paged.h): the host planner's decode schedule
// (plan.cpp's build_schedule and choose_chunk) computed on the device from a step's KV lengths,
// into the plan's own arrays, so that a CUDA graph of (update, runs) replays for any lengths
// within the plan's capacity. The same rules give the same schedule: each work item's result
// depends only on the item, and the merge folds chunks in a fixed order, so a run after an update
// writes the bits a host plan of those lengths writes. One CTA: a batch of at most
// kMaxDeviceBatch sequences, kPerThread per thread (blocked: thread t holds t * kPerThread + j);
// 512 threads, not 1024, so that the radix sort's storage leaves it under 48 KiB of shared memory.
#include <cub/block/block_radix_sort.cuh>
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

#include "paged/paged.h"

namespace fas_paged {

namespace {

constexpr int kThreads = 512;
constexpr int kPerThread = kMaxDeviceBatch / kThreads;
static_assert(kPerThread * kThreads == kMaxDeviceBatch, "the batch limit is whole items per thread");

struct Shared {
    union {
        cub::BlockReduce<long long, kThreads>::TempStorage reduce;
        cub::BlockScan<int, kThreads>::TempStorage scan;
        cub::BlockRadixSort<int, kThreads, kPerThread, int>::TempStorage sort;
    } cub;
    long long total;
    int tiles[kMaxDeviceBatch];   // query tiles per sequence
    int chunks[kMaxDeviceBatch];  // KV chunks per sequence
};

// The CTA's values folded by op, in every thread.
template <typename Op>
__device__ long long block_all(Shared& sh, long long value, Op op) {
    const long long folded = cub::BlockReduce<long long, kThreads>(sh.cub.reduce).Reduce(value, op);
    if (threadIdx.x == 0) sh.total = folded;
    __syncthreads();
    const long long all = sh.total;
    __syncthreads();  // sh.total and the temp storage are reused
    return all;
}
struct Sum {
    __device__ long long operator()(long long a, long long b) const { return a + b; }
};
struct Max {
    __device__ long long operator()(long long a, long long b) const { return a > b ? a : b; }
};

__device__ int ceil_div(long long a, long long b) { return static_cast<int>((a + b - 1) / b); }

__global__ void __launch_bounds__(kThreads) update_kernel(const DeviceUpdate u, const int32_t* kv_lengths) {
    __shared__ Shared sh;
    const int tid = threadIdx.x;
    int span[kPerThread], qo[kPerThread];
    long long base = 0, longest = 0;
#pragma unroll
    for (int j = 0; j < kPerThread; ++j) {
        const int i = tid * kPerThread + j;
        span[j] = 0;
        qo[j] = 0;
        if (i >= u.batch) continue;
        // Beyond the capacity the plan's buffers end: a length is held to [0, capacity].
        const int len = min(max(kv_lengths[i], 0), u.capacity[i]);
        qo[j] = u.q_indptr[i + 1] - u.q_indptr[i];
        span[j] = len - window_start(len, qo[j], u.window_left);
        sh.tiles[i] = ceil_div(static_cast<long long>(qo[j]) * u.group, u.tile_q);
        // The kernels' kv_len = (pages - 1) * page_size + last_page_len with pages the table row's
        // stride (page_indptr[i] = i * stride): this last_page_len makes it len.
        u.last_page_len[i] = len - (u.table_stride - 1) * u.page_size;
        base += sh.tiles[i];
        longest = max(longest, static_cast<long long>(span[j]));
    }
    base = block_all(sh, base, Sum()) * u.num_heads_k;
    longest = block_all(sh, longest, Max());
    // choose_chunk (plan.cpp): the smallest chunk, in KV tiles, whose CTAs fit one wave.
    long long chunk = 0;
    if (base < u.wave && longest > u.kv_tile) {
        long long low = 1, high = ceil_div(longest, u.kv_tile);
        while (low < high) {
            const long long mid = (low + high) / 2;
            long long ctas = 0;
#pragma unroll
            for (int j = 0; j < kPerThread; ++j) {
                const int i = tid * kPerThread + j;
                if (i < u.batch) ctas += static_cast<long long>(sh.tiles[i]) * ceil_div(max(span[j], 1), mid * u.kv_tile);
            }
            if (block_all(sh, ctas, Sum()) * u.num_heads_k <= u.wave) high = mid; else low = mid + 1;
        }
        chunk = high * u.kv_tile >= longest ? 0 : high * u.kv_tile;
    }
#pragma unroll
    for (int j = 0; j < kPerThread; ++j) {
        const int i = tid * kPerThread + j;
        if (i < u.batch) sh.chunks[i] = chunk > 0 ? ceil_div(max(span[j], 1), chunk) : 1;
    }
    // Unsplit: every sequence one chunk of all its keys (the kernels then write out themselves).
    if (tid == 0) u.kv_chunk_size[0] = chunk > 0 ? static_cast<int32_t>(chunk) : kUnsplitChunk;

    // Partial rows (split): sequence i's query j, chunk c at o_indptr[i] + j * chunks[i] + c; the
    // merge's rows: merge_indptr[row] = o_indptr[i] + j * chunks[i] (one chunk each when unsplit).
    __syncthreads();
    int rows[kPerThread], row_offset[kPerThread];
#pragma unroll
    for (int j = 0; j < kPerThread; ++j) {
        const int i = tid * kPerThread + j;
        rows[j] = i < u.batch ? qo[j] * sh.chunks[i] : 0;
    }
    int partial_rows = 0;
    cub::BlockScan<int, kThreads>(sh.cub.scan).ExclusiveSum(rows, row_offset, partial_rows);
    __syncthreads();
#pragma unroll
    for (int j = 0; j < kPerThread; ++j) {
        const int i = tid * kPerThread + j;
        if (i >= u.batch) continue;
        u.o_indptr[i] = row_offset[j];
        const int first = u.q_indptr[i] - u.q_indptr[0];
        for (int q = 0; q < qo[j]; ++q) u.merge_indptr[first + q] = row_offset[j] + q * sh.chunks[i];
    }
    if (tid == 0) {
        u.o_indptr[u.batch] = partial_rows;
        u.merge_indptr[u.q_indptr[u.batch] - u.q_indptr[0]] = partial_rows;
    }

    // The work items, longest spans first (a stable sort, as the host's), each sequence's query
    // tiles times its chunks in that order.
    int key[kPerThread], value[kPerThread];
#pragma unroll
    for (int j = 0; j < kPerThread; ++j) {
        const int i = tid * kPerThread + j;
        key[j] = i < u.batch ? span[j] : -1;  // past the batch: after every sequence
        value[j] = i;
    }
    cub::BlockRadixSort<int, kThreads, kPerThread, int>(sh.cub.sort).SortDescending(key, value);
    __syncthreads();
    int items[kPerThread], item_offset[kPerThread];
#pragma unroll
    for (int j = 0; j < kPerThread; ++j) {
        items[j] = value[j] < u.batch ? sh.tiles[value[j]] * sh.chunks[value[j]] : 0;
    }
    int total = 0;
    cub::BlockScan<int, kThreads>(sh.cub.scan).ExclusiveSum(items, item_offset, total);
#pragma unroll
    for (int j = 0; j < kPerThread; ++j) {
        const int i = value[j];
        if (i >= u.batch) continue;
        int at = item_offset[j];
        for (int t = 0; t < sh.tiles[i]; ++t) {
            for (int c = 0; c < sh.chunks[i]; ++c, ++at) {
                if (at >= u.max_ctas) continue;  // the capacity bounds it; never written past
                u.requests[at] = i;
                u.qo_tiles[at] = t;
                u.kv_tiles[at] = c;
            }
        }
    }
    if (tid == 0) u.device_ctas[0] = min(total, u.max_ctas);
}

}  // namespace

cudaError_t launch_update(const DeviceUpdate& update, const int32_t* kv_lengths, cudaStream_t stream) {
    update_kernel<<<1, kThreads, 0, stream>>>(update, kv_lengths);
    return cudaGetLastError();
}

}  // namespace fas_paged
