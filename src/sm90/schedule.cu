// Host-only planner of the SM90 (FA3-class) ragged prefill family, behind the light interface
// of sm90/schedule.h: lists the layout's query tiles, in the units and order our device-side work
// scheduler (sm90/tile_scheduler.cuh) deals to CTAs with every head. Host work grows with the
// tiles, not tiles x heads (FlashInfer's PrefillSM90Plan assigned every (tile, head) on the
// host: docs/design/plan-per-call.md). Holds no kernels and is built also when no SM90 kernel is.
#include "sm90/schedule.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <new>
#include <sstream>
#include <vector>

#include "sm90/tiles.h"

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
    // Recorded on the creation stream after the upload; for a block retired on a stream
    // (schedule_retire), recorded again there: the block is free once it has completed.
    cudaEvent_t uploaded = nullptr;
};

// A caller that plans per batch without synchronizing keeps up to kRetiringBlocksPerDevice
// blocks waiting plus the live ones in circulation: the cache holds more than that, so that
// steady state neither frees (cudaFree / cudaFreeHost synchronize the device) nor allocates.
constexpr size_t kCachedBlocksPerDevice = 16;
constexpr size_t kRetiringBlocksPerDevice = 8;

std::mutex g_cache_mutex;
std::vector<ScheduleBlock> g_cache;     // free blocks of every device
std::vector<ScheduleBlock> g_retiring;  // retired on a stream that has not reached that point yet, oldest first

void free_block(ScheduleBlock& block) {
    if (block.uploaded != nullptr) cudaEventDestroy(block.uploaded);
    if (block.staging != nullptr) cudaFreeHost(block.staging);
    if (block.device_memory != nullptr) cudaFree(block.device_memory);
    block = ScheduleBlock{};
}

size_t count_on_device(const std::vector<ScheduleBlock>& blocks, int device) {
    size_t count = 0;
    for (const ScheduleBlock& block : blocks) count += block.device == device;
    return count;
}

// Into the cache, or freed when the cache holds enough of its device. Caller holds the mutex.
void cache_or_free_locked(ScheduleBlock& block) {
    if (count_on_device(g_cache, block.device) < kCachedBlocksPerDevice) {
        g_cache.push_back(block);
        block = ScheduleBlock{};
    } else {
        free_block(block);
    }
}

// Moves the retiring blocks of `device` whose stream has passed their retirement to the cache.
// With too many still retiring, waits for the oldest: this bounds the memory a caller that
// never synchronizes can tie up. Caller holds the mutex.
void collect_retired_locked(int device) {
    size_t retiring = 0;
    for (auto it = g_retiring.begin(); it != g_retiring.end();) {
        if (it->device != device) {
            ++it;
        } else if (cudaEventQuery(it->uploaded) == cudaSuccess) {
            cache_or_free_locked(*it);
            it = g_retiring.erase(it);
        } else {
            ++retiring, ++it;
        }
    }
    cudaGetLastError();  // cudaErrorNotReady is no error of the caller's
    if (retiring < kRetiringBlocksPerDevice) return;
    const auto oldest = std::find_if(g_retiring.begin(), g_retiring.end(),
                                     [device](const ScheduleBlock& block) { return block.device == device; });
    cudaEventSynchronize(oldest->uploaded);
    cudaGetLastError();
    cache_or_free_locked(*oldest);
    g_retiring.erase(oldest);
}

// The device's upload stream, made on first use and kept for the process. Uploads go there and
// not on the caller's stream, so that they overlap the kernels already queued there: a caller
// that plans per batch would otherwise put a copy between every two kernels. Runs wait for the
// upload's event (schedule_prepare_run).
cudaError_t upload_stream(int device, cudaStream_t* stream) {
    static std::mutex mutex;
    static std::vector<cudaStream_t> streams;
    std::lock_guard<std::mutex> lock(mutex);
    if (streams.size() <= static_cast<size_t>(device)) streams.resize(device + 1, nullptr);
    if (streams[device] == nullptr) {
        const cudaError_t error = cudaStreamCreateWithFlags(&streams[device], cudaStreamNonBlocking);
        if (error != cudaSuccess) {
            streams[device] = nullptr;
            return error;
        }
    }
    *stream = streams[device];
    return cudaSuccess;
}

// A cached block of this device holding at least `bytes` (the smallest such), else a new one.
cudaError_t acquire_block(int device, size_t bytes, ScheduleBlock* block, std::string* message) {
    {
        std::lock_guard<std::mutex> lock(g_cache_mutex);
        collect_retired_locked(device);
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

// Onto the retiring list, free once its event has completed (collect_retired_locked). For a plan
// destroyed after its runs that event is the upload's, which may still be in flight when no run
// came; schedule_retire records it again on the caller's stream first.
void retire_block(ScheduleBlock& block) {
    if (block.device_memory == nullptr) return;
    std::lock_guard<std::mutex> lock(g_cache_mutex);
    g_retiring.push_back(block);
    block = ScheduleBlock{};
}

}  // namespace

struct Schedule {
    ScheduleBlock block;
    int num_units = 0;
    int tiles_per_unit = 1;
    int num_ctas = 0;
    std::atomic<bool> upload_seen_complete{false};  // set by the first run that finds it done
};

namespace {

int query_tile_rows(const PlanLayout& layout) {
    return tile_shape(layout.fp8, layout.head_dim, layout.causal).q_rows;
}

// Causal plans pair tiles so that every unit of a sequence costs the same (sm90/tile_scheduler.cuh).
int tiles_per_unit(const PlanLayout& layout) { return layout.causal ? 2 : 1; }

int64_t count_units(const PlanLayout& layout) {
    const int rows = query_tile_rows(layout);
    const int per_unit = tiles_per_unit(layout);
    int64_t units = 0;
    for (int i = 0; i < layout.batch_size; ++i) {
        const int64_t length = static_cast<int64_t>(layout.cu_seqlens_q[i + 1]) - layout.cu_seqlens_q[i];
        const int64_t tiles = (length + rows - 1) / rows;
        units += (tiles + per_unit - 1) / per_unit;
    }
    return units;
}

// The units in the order the kernel deals them: sequences with the most keys first (the
// costliest units), each sequence's units together. Causal: tile n-1-j with tile j (the middle
// tile of an odd count alone, its second slot empty), so each unit sees the same number of keys
// under the bottom-right aligned mask; otherwise one tile per unit, last tile first.
void fill_units(const PlanLayout& layout, TileWork* out) {
    const int rows = query_tile_rows(layout);
    std::vector<int> order(layout.batch_size);
    for (int i = 0; i < layout.batch_size; ++i) order[i] = i;
    const auto kv_len = [&](int i) { return layout.cu_seqlens_k[i + 1] - layout.cu_seqlens_k[i]; };
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return kv_len(a) > kv_len(b); });
    size_t at = 0;
    for (int i : order) {
        const int32_t qo_len = layout.cu_seqlens_q[i + 1] - layout.cu_seqlens_q[i];
        const int32_t tiles = (qo_len + rows - 1) / rows;
        const auto tile = [&](int32_t t) {
            return TileWork{t, i, layout.cu_seqlens_q[i], layout.cu_seqlens_k[i], qo_len, kv_len(i), {0, 0}};
        };
        if (!layout.causal) {
            for (int32_t t = tiles - 1; t >= 0; --t) out[at++] = tile(t);
            continue;
        }
        for (int32_t j = 0; j < (tiles + 1) / 2; ++j) {
            out[at++] = tile(tiles - 1 - j);
            out[at++] = tiles - 1 - j != j ? tile(j) : TileWork{-1, i, 0, 0, 0, 0, {0, 0}};
        }
    }
}

}  // namespace

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
    // Work items are (tile, head) pairs counted in int32 by the kernel's scheduler, with room for
    // one round of CTAs past the end.
    const int64_t items = count_units(layout) * layout.num_heads_q;
    if (items > INT32_MAX / 2) {
        why << "the layout has " << items << " (query tile unit, head) work items; the SM90 scheduler indexes at most "
            << INT32_MAX / 2 << "; split the batch into plans of fewer tokens";
        return why.str();
    }
    return std::string();
}

cudaError_t schedule_create(const PlanLayout& layout, Schedule** out, std::string* message) {
    *out = nullptr;
    Schedule* schedule = new (std::nothrow) Schedule();
    if (schedule == nullptr) {
        *message = "out of host memory for the SM90 schedule";
        return cudaErrorMemoryAllocation;
    }
    const int64_t units = count_units(layout);
    schedule->num_units = static_cast<int>(units);
    schedule->tiles_per_unit = tiles_per_unit(layout);
    schedule->num_ctas = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(layout.sm_count, units * layout.num_heads_q)));
    const size_t entries = static_cast<size_t>(std::max<int64_t>(1, units * schedule->tiles_per_unit));
    const size_t bytes = sizeof(TileWork) * entries;
    int device = 0;
    cudaStream_t stream = nullptr;
    cudaError_t error = cudaGetDevice(&device);
    if (error != cudaSuccess) {
        *message = "cudaGetDevice";
    } else if ((error = upload_stream(device, &stream)) != cudaSuccess) {
        *message = "cudaStreamCreateWithFlags for the SM90 schedule uploads";
    } else {
        error = acquire_block(device, bytes, &schedule->block, message);
    }
    if (error == cudaSuccess) {
        try {
            fill_units(layout, static_cast<TileWork*>(schedule->block.staging));
        } catch (const std::bad_alloc&) {
            error = cudaErrorMemoryAllocation;
            *message = "out of host memory while listing the SM90 work";
        }
    }
    if (error == cudaSuccess) {
        error = cudaMemcpyAsync(schedule->block.device_memory, schedule->block.staging, bytes,
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
    retire_block(schedule->block);
    delete schedule;
}

cudaError_t schedule_retire(Schedule* schedule, cudaStream_t stream) {
    if (schedule == nullptr) return cudaSuccess;
    ScheduleBlock& block = schedule->block;
    // The upload may have been enqueued on another stream: order it before the retirement too.
    cudaError_t error = cudaStreamWaitEvent(stream, block.uploaded, 0);
    if (error == cudaSuccess) error = cudaEventRecord(block.uploaded, stream);
    if (error != cudaSuccess) return error;  // the schedule stays whole; the caller still owns it
    schedule_destroy(schedule);
    return cudaSuccess;
}

size_t schedule_device_bytes(const Schedule* schedule) { return schedule->block.bytes; }

void schedule_fill_args(const Schedule* schedule, RaggedArgs* args) {
    args->tiles = static_cast<const TileWork*>(schedule->block.device_memory);
    args->num_units = schedule->num_units;
    args->tiles_per_unit = schedule->tiles_per_unit;
    args->num_ctas = schedule->num_ctas;
}

}  // namespace fas_sm90
