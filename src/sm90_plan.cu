// Host-only planner of the SM90 (FA3-class) ragged prefill family, behind the light interface
// of sm90/plan.h: our own work scheduler, writing the per-head persistent schedule that
// FlashInfer's kernels read, in the format and with the cost model of its PrefillSM90Plan.
// (With PrefillSM90Plan, fas_plan_create took 250-380 us of host time on an H200 machine; this
// one writes the arrays in place into the pinned staging buffer: no per-CTA vectors, no
// copies.) Holds no kernels and is built also when no SM90 kernel is.
#include "sm90/plan.h"

#include <algorithm>
#include <atomic>
#include <functional>
#include <mutex>
#include <new>
#include <numeric>
#include <queue>
#include <sstream>
#include <utility>
#include <vector>

namespace fas_sm90 {

namespace {

// Device memory for one schedule, its pinned staging twin and the event of its upload. Blocks
// outlive plans: fas_plan_destroy hands its block back to a small per-device cache, so making
// a plan usually costs no cudaMalloc / cudaMallocHost and destroying one no cudaFree.
struct ScheduleBlock {
    int device = 0;
    size_t bytes = 0;
    void* device_memory = nullptr;  // cudaMalloc
    void* staging = nullptr;        // cudaMallocHost, the source of the asynchronous upload
    cudaEvent_t uploaded = nullptr; // recorded on the creation stream after the upload
};

constexpr size_t kCachedBlocksPerDevice = 8;

std::mutex g_cache_mutex;
std::vector<ScheduleBlock> g_cache;  // free blocks of every device

void free_block(ScheduleBlock& block) {
    if (block.uploaded != nullptr) cudaEventDestroy(block.uploaded);
    if (block.staging != nullptr) cudaFreeHost(block.staging);
    if (block.device_memory != nullptr) cudaFree(block.device_memory);
    block = ScheduleBlock{};
}

// A cached block of this device holding at least `bytes` (the smallest such), else a new one.
cudaError_t acquire_block(int device, size_t bytes, ScheduleBlock* block, std::string* message) {
    {
        std::lock_guard<std::mutex> lock(g_cache_mutex);
        auto best = g_cache.end();
        for (auto it = g_cache.begin(); it != g_cache.end(); ++it) {
            if (it->device == device && it->bytes >= bytes && (best == g_cache.end() || it->bytes < best->bytes)) best = it;
        }
        if (best != g_cache.end()) {
            *block = *best;
            g_cache.erase(best);
            return cudaSuccess;
        }
    }
    // Round up so that blocks suit later layouts of similar size.
    size_t rounded = 4096;
    while (rounded < bytes) rounded *= 2;
    ScheduleBlock fresh;
    fresh.device = device;
    fresh.bytes = rounded;
    cudaError_t error = cudaMalloc(&fresh.device_memory, rounded);
    if (error != cudaSuccess) {
        *message = "cudaMalloc of the SM90 schedule (" + std::to_string(rounded) + " bytes)";
    } else if ((error = cudaMallocHost(&fresh.staging, rounded)) != cudaSuccess) {
        *message = "cudaMallocHost of the SM90 schedule staging buffer (" + std::to_string(rounded) + " bytes)";
    } else if ((error = cudaEventCreateWithFlags(&fresh.uploaded, cudaEventDisableTiming)) != cudaSuccess) {
        *message = "cudaEventCreateWithFlags for the SM90 schedule upload";
    }
    if (error != cudaSuccess) {
        free_block(fresh);
        return error;
    }
    *block = fresh;
    return cudaSuccess;
}

// Back to the cache (or freed when the cache is full). The upload must be over before the
// staging buffer serves another plan: a plan destroyed before any run may still be uploading.
void release_block(ScheduleBlock& block) {
    if (block.device_memory == nullptr) return;
    if (cudaEventQuery(block.uploaded) != cudaSuccess) cudaEventSynchronize(block.uploaded);
    cudaGetLastError();  // neither outcome is the caller's error
    {
        std::lock_guard<std::mutex> lock(g_cache_mutex);
        size_t same_device = 0;
        for (const ScheduleBlock& cached : g_cache) same_device += cached.device == block.device;
        if (same_device < kCachedBlocksPerDevice) {
            g_cache.push_back(block);
            block = ScheduleBlock{};
            return;
        }
    }
    free_block(block);
}

}  // namespace

// Byte offsets of the schedule arrays in a block: seven int32 arrays of one entry per work item
// and work_indptr (one per CTA, plus one), each 16-byte aligned.
struct ScheduleOffsets {
    size_t qo_tile_indices, qo_indptr, kv_indptr, qo_lens, kv_lens, head_indices, batch_indices, work_indptr, end;
};

struct Schedule {
    ScheduleBlock block;
    ScheduleOffsets offsets{};
    std::atomic<bool> upload_seen_complete{false};  // set by the first run that finds it done
};

namespace {

size_t round16(size_t value) { return (value + 15) & ~static_cast<size_t>(15); }

int64_t tiles_per_head(const PlanLayout& layout) {
    const int tile = cta_tile_q(layout.head_dim);
    int64_t tiles = 0;
    for (int i = 0; i < layout.batch_size; ++i) {
        const int64_t length = static_cast<int64_t>(layout.cu_seqlens_q[i + 1]) - layout.cu_seqlens_q[i];
        tiles += (length + tile - 1) / tile;
    }
    return tiles;
}

// PrefillSM90Plan's bound up to which it uses the per-head schedule; kept as this planner's
// limit (the kernels were never run on larger layouts).
int64_t max_works_per_head(const PlanLayout& layout) {
    const int tile = cta_tile_q(layout.head_dim);
    const int64_t total_rows =
        static_cast<int64_t>(layout.cu_seqlens_q[layout.batch_size]) - layout.cu_seqlens_q[0];
    return (total_rows + tile - 1) / tile + layout.batch_size - 1;
}

ScheduleOffsets schedule_offsets(int64_t works, int ctas) {
    const size_t per_work = round16(sizeof(int32_t) * static_cast<size_t>(works));
    ScheduleOffsets o{};
    size_t at = 0;
    for (size_t* field : {&o.qo_tile_indices, &o.qo_indptr, &o.kv_indptr, &o.qo_lens, &o.kv_lens, &o.head_indices,
                          &o.batch_indices}) {
        *field = at;
        at += per_work;
    }
    o.work_indptr = at;
    o.end = at + round16(sizeof(int32_t) * static_cast<size_t>(ctas + 1));
    return o;
}

// Keys a causal query tile still sees (bottom-right aligned mask), the cost model's KV length.
int64_t causal_kv_end(int64_t qo_len, int64_t kv_len, int64_t tile_index, int64_t tile_rows, int64_t tiles) {
    if (tile_index + 1 == tiles) return kv_len;
    return std::max<int64_t>(std::min(kv_len - qo_len + (tile_index + 1) * tile_rows, kv_len), 0);
}

// The per-head persistent schedule: every (head, sequence, query tile) is one work item, given
// greedily to the CTA with the least work so far (cost 2 * tile rows + KV length seen), heads
// outermost, longest KV first, last tile first; each CTA runs its items in that order. Writes
// the arrays into `out` at `o`.
void fill_schedule(const PlanLayout& layout, const ScheduleOffsets& o, unsigned char* out) {
    const int tile_rows = cta_tile_q(layout.head_dim);
    const int ctas = layout.sm_count;
    std::vector<int> order(layout.batch_size);
    std::iota(order.begin(), order.end(), 0);
    const auto kv_len = [&](int i) { return layout.cu_seqlens_k[i + 1] - layout.cu_seqlens_k[i]; };
    const auto qo_len = [&](int i) { return layout.cu_seqlens_q[i + 1] - layout.cu_seqlens_q[i]; };
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return kv_len(a) > kv_len(b); });

    // Pass 1: the CTA of every item, in visiting order.
    using Load = std::pair<int64_t, int>;  // (cost so far, CTA): least cost first, then lowest CTA
    std::priority_queue<Load, std::vector<Load>, std::greater<Load>> least_loaded;
    for (int c = 0; c < ctas; ++c) least_loaded.push({0, c});
    std::vector<int32_t> cta_of;
    std::vector<int32_t> items_per_cta(ctas, 0);
    const auto visit = [&](auto&& on_item) {
        for (int head = 0; head < layout.num_heads_q; ++head) {
            for (int i : order) {
                const int64_t tiles = (qo_len(i) + tile_rows - 1) / tile_rows;
                for (int64_t t = tiles - 1; t >= 0; --t) on_item(head, i, t, tiles);
            }
        }
    };
    visit([&](int, int i, int64_t t, int64_t tiles) {
        const Load least = least_loaded.top();
        least_loaded.pop();
        const int64_t seen = layout.causal ? causal_kv_end(qo_len(i), kv_len(i), t, tile_rows, tiles) : kv_len(i);
        least_loaded.push({least.first + 2 * tile_rows + seen, least.second});
        cta_of.push_back(least.second);
        ++items_per_cta[least.second];
    });

    // Pass 2: CTA-major placement, each CTA's items in visiting order.
    const auto array = [out](size_t offset) { return reinterpret_cast<int32_t*>(out + offset); };
    int32_t* work_indptr = array(o.work_indptr);
    work_indptr[0] = 0;
    for (int c = 0; c < ctas; ++c) work_indptr[c + 1] = work_indptr[c] + items_per_cta[c];
    std::vector<int32_t> next(work_indptr, work_indptr + ctas);
    size_t item = 0;
    visit([&](int head, int i, int64_t t, int64_t) {
        const int32_t slot = next[cta_of[item++]]++;
        array(o.qo_tile_indices)[slot] = static_cast<int32_t>(t);
        array(o.qo_indptr)[slot] = layout.cu_seqlens_q[i];
        array(o.kv_indptr)[slot] = layout.cu_seqlens_k[i];
        array(o.qo_lens)[slot] = qo_len(i);
        array(o.kv_lens)[slot] = kv_len(i);
        array(o.head_indices)[slot] = head;
        array(o.batch_indices)[slot] = i;
    });
}

}  // namespace

int cta_tile_q(int head_dim) { return head_dim == 64 ? 192 : 128; }

std::string layout_unsupported_reason(const PlanLayout& layout) {
    std::ostringstream why;
    for (int i = 0; i < layout.batch_size; ++i) {
        const int64_t sq = static_cast<int64_t>(layout.cu_seqlens_q[i + 1]) - layout.cu_seqlens_q[i];
        const int64_t sk = static_cast<int64_t>(layout.cu_seqlens_k[i + 1]) - layout.cu_seqlens_k[i];
        if (sq > 0 && sk == 0) {
            why << "sequence " << i << " has " << sq << " queries and no key";
            return why.str();
        }
        if (layout.causal && sq > sk) {
            why << "causal sequence " << i << " has more queries (" << sq << ") than keys (" << sk
                << "), so some rows see no key";
            return why.str();
        }
    }
    const int64_t per_head = max_works_per_head(layout);
    if (per_head > 4096) {
        why << "the layout has up to " << per_head << " query tiles of " << cta_tile_q(layout.head_dim)
            << " rows per head; the per-head schedule of this library's SM90 kernels is limited to 4096 (the "
               "kernels built for longer layouts share one schedule by all heads and are not built); split the "
               "batch into plans of fewer tokens";
        return why.str();
    }
    if (tiles_per_head(layout) * layout.num_heads_q > INT32_MAX / 8) {
        why << "the schedule would exceed 32-bit indexing (" << tiles_per_head(layout) * layout.num_heads_q
            << " work items)";
        return why.str();
    }
    return std::string();
}

cudaError_t schedule_create(const PlanLayout& layout, cudaStream_t stream, Schedule** out, std::string* message) {
    *out = nullptr;
    Schedule* schedule = new (std::nothrow) Schedule();
    if (schedule == nullptr) {
        *message = "out of host memory for the SM90 schedule";
        return cudaErrorMemoryAllocation;
    }
    const int64_t works = tiles_per_head(layout) * layout.num_heads_q;
    schedule->offsets = schedule_offsets(works, layout.sm_count);
    int device = 0;
    cudaError_t error = cudaGetDevice(&device);
    if (error != cudaSuccess) {
        *message = "cudaGetDevice";
    } else {
        error = acquire_block(device, schedule->offsets.end, &schedule->block, message);
    }
    if (error == cudaSuccess) {
        try {
            fill_schedule(layout, schedule->offsets, static_cast<unsigned char*>(schedule->block.staging));
        } catch (const std::bad_alloc&) {
            error = cudaErrorMemoryAllocation;
            *message = "out of host memory while scheduling the SM90 work";
        }
    }
    if (error == cudaSuccess) {
        error = cudaMemcpyAsync(schedule->block.device_memory, schedule->block.staging, schedule->offsets.end,
                                cudaMemcpyHostToDevice, stream);
        if (error != cudaSuccess) {
            *message = "cudaMemcpyAsync of the SM90 schedule";
        } else if ((error = cudaEventRecord(schedule->block.uploaded, stream)) != cudaSuccess) {
            *message = "cudaEventRecord after the SM90 schedule upload";
            cudaStreamSynchronize(stream);  // nothing may still read the staging buffer
        }
    }
    if (error != cudaSuccess) {
        cudaGetLastError();
        schedule_destroy(schedule);
        return error;
    }
    *out = schedule;
    return cudaSuccess;
}

cudaError_t schedule_prepare_run(Schedule* schedule, cudaStream_t stream) {
    if (schedule->upload_seen_complete.load(std::memory_order_acquire)) return cudaSuccess;
    const cudaError_t query = cudaEventQuery(schedule->block.uploaded);
    if (query == cudaSuccess) {
        schedule->upload_seen_complete.store(true, std::memory_order_release);
        return cudaSuccess;
    }
    if (query != cudaErrorNotReady) return query;
    return cudaStreamWaitEvent(stream, schedule->block.uploaded, 0);
}

void schedule_destroy(Schedule* schedule) {
    if (schedule == nullptr) return;
    release_block(schedule->block);
    delete schedule;
}

size_t schedule_device_bytes(const Schedule* schedule) { return schedule->block.bytes; }

void schedule_fill_args(const Schedule* schedule, RaggedArgs* args) {
    const char* base = static_cast<const char*>(schedule->block.device_memory);
    const ScheduleOffsets& o = schedule->offsets;
    const auto at = [base](size_t offset) { return reinterpret_cast<const int32_t*>(base + offset); };
    args->qo_tile_indices = at(o.qo_tile_indices);
    args->qo_indptr = at(o.qo_indptr);
    args->kv_indptr = at(o.kv_indptr);
    args->qo_lens = at(o.qo_lens);
    args->kv_lens = at(o.kv_lens);
    args->head_indices = at(o.head_indices);
    args->work_indptr = at(o.work_indptr);
    args->batch_indices = at(o.batch_indices);
}

}  // namespace fas_sm90
