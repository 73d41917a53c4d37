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
constexpr int kWarps = kThreads / 32;
constexpr int kPerThread = kMaxDeviceBatch / kThreads;
static_assert(kPerThread * kThreads == kMaxDeviceBatch, "the batch limit is whole items per thread");
// The chunk search tries kProbes chunk sizes per round (one barrier), not one: 2048 candidates
// take 4 rounds instead of 11 halvings of three barriers each. A thread's CTA count is held under
// kCountCap, above any wave (at most 32 CTAs x the SMs), so a total past the wave stays past it.
constexpr int kProbes = 8;
constexpr int kCountCap = 1 << 21;

struct Shared {
    union {
        cub::BlockReduce<long long, kThreads>::TempStorage reduce;
        cub::BlockScan<int, kThreads>::TempStorage scan;
        cub::BlockRadixSort<unsigned, kThreads, kPerThread, int>::TempStorage sort;
        struct {
            int seq[kMaxDeviceBatch];         // by sorted position: the sequence
            int first_item[kMaxDeviceBatch];  // and its first work item
        } sorted;  // after the last scan
    } cub;
    long long total;
    int probe_ctas[2][kWarps][kProbes];  // by round parity: a round's writes never meet the last one's reads
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

// Each probe's CTA count summed over the CTA, in every thread (one barrier).
__device__ void block_sums(Shared& sh, int (&ctas)[kProbes], int parity) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll
    for (int k = 0; k < kProbes; ++k) {
        ctas[k] = __reduce_add_sync(0xffffffffu, ctas[k]);
        if (lane == 0) sh.probe_ctas[parity][warp][k] = ctas[k];
    }
    __syncthreads();
#pragma unroll
    for (int k = 0; k < kProbes; ++k) {
        int sum = 0;
        for (int w = 0; w < kWarps; ++w) sum += sh.probe_ctas[parity][w][k];
        ctas[k] = sum;
    }
}

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
    // choose_chunk (plan.cpp): the smallest chunk, in KV tiles, whose CTAs fit one wave (fewer CTAs
    // the larger the chunk; `high` fits: one chunk each). Each round tries kProbes chunks from low up
    // and keeps the range between the last that does not fit and the first that does.
    long long chunk = 0;
    if (base < u.wave && longest > u.kv_tile) {
        long long low = 1, high = ceil_div(longest, u.kv_tile);
        // Threads past the batch count nothing: whole warps of them skip the divisions instead of
        // issuing them predicated off beside the warps that count (a small batch's few warps).
        const bool counts = tid * kPerThread < u.batch;
        for (int round = 0; low < high; ++round) {
            long long probe[kProbes];
            int ctas[kProbes];
#pragma unroll
            for (int k = 0; k < kProbes; ++k) {
                probe[k] = low + (high - low) * k / kProbes;
                ctas[k] = 0;
            }
            if (counts) {
#pragma unroll
                for (int k = 0; k < kProbes; ++k) {
                    const unsigned keys = static_cast<unsigned>(probe[k] * u.kv_tile);  // <= longest + kv_tile < 2^32
                    long long count = 0;
#pragma unroll
                    for (int j = 0; j < kPerThread; ++j) {
                        const int i = tid * kPerThread + j;
                        if (i < u.batch) count += static_cast<long long>(sh.tiles[i]) * ((max(span[j], 1) - 1u) / keys + 1);
                    }
                    ctas[k] = static_cast<int>(min(count * u.num_heads_k, static_cast<long long>(kCountCap)));
                }
            }
            block_sums(sh, ctas, round % 2);
            int first = kProbes;  // the first probe that fits
            for (int k = kProbes - 1; k >= 0; --k) {
                if (ctas[k] <= u.wave) first = k;
            }
            if (first == 0) {
                high = low;
            } else {
                if (first < kProbes) high = probe[first];
                low = probe[first - 1] + 1;
            }
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
    // tiles times its chunks in that order. Past the batch a key of 0 sorts after every sequence
    // (stable: their indices are larger); only the bits of the longest span are sorted (radix
    // passes of 4 bits: 4 for spans under 64k instead of 8), and one sequence is not sorted at all.
    unsigned key[kPerThread];
    int value[kPerThread];
#pragma unroll
    for (int j = 0; j < kPerThread; ++j) {
        const int i = tid * kPerThread + j;
        key[j] = i < u.batch ? static_cast<unsigned>(span[j]) : 0u;
        value[j] = i;
    }
    if (u.batch > 1 && longest > 0) {
        const int bits = 64 - __clzll(longest);
        cub::BlockRadixSort<unsigned, kThreads, kPerThread, int>(sh.cub.sort).SortDescending(key, value, 0, bits);
    }
    __syncthreads();
    int items[kPerThread], item_offset[kPerThread];
#pragma unroll
    for (int j = 0; j < kPerThread; ++j) {
        items[j] = value[j] < u.batch ? sh.tiles[value[j]] * sh.chunks[value[j]] : 0;
    }
    int total = 0;
    cub::BlockScan<int, kThreads>(sh.cub.scan).ExclusiveSum(items, item_offset, total);
    __syncthreads();  // the scan's storage becomes the table of sorted sequences
#pragma unroll
    for (int j = 0; j < kPerThread; ++j) {
        sh.cub.sorted.seq[tid * kPerThread + j] = value[j];
        sh.cub.sorted.first_item[tid * kPerThread + j] = item_offset[j];
    }
    __syncthreads();
    // Every thread writes items g = tid, tid + kThreads, ... (at most the capacity's): item g
    // belongs to the last sorted sequence whose first item is <= g (sorted positions past the batch
    // hold none), as its query tile t and chunk c in t-major order. A thread per sequence writing
    // its own items was a serial chain of tiles x chunks stores (128 for one sequence of 128k).
    const int count = min(total, u.max_ctas);
    for (int g = tid; g < count; g += kThreads) {
        int low = 0, high = u.batch - 1;
        while (low < high) {
            const int mid = (low + high + 1) / 2;
            if (sh.cub.sorted.first_item[mid] <= g) low = mid; else high = mid - 1;
        }
        const int i = sh.cub.sorted.seq[low], local = g - sh.cub.sorted.first_item[low];
        u.requests[g] = i;
        u.qo_tiles[g] = local / sh.chunks[i];
        u.kv_tiles[g] = local % sh.chunks[i];
    }
    if (tid == 0) u.device_ctas[0] = count;
}

}  // namespace

cudaError_t launch_update(const DeviceUpdate& update, const int32_t* kv_lengths, cudaStream_t stream) {
    update_kernel<<<1, kThreads, 0, stream>>>(update, kv_lengths);
    return cudaGetLastError();
}

}  // namespace fas_paged
