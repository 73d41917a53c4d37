// The per-device cache of schedule blocks behind core/device_block.h.
#include "core/device_block.h"

#include "core/capture.h"

#include <algorithm>
#include <mutex>
#include <new>
#include <vector>

namespace fas {

namespace {

// A caller that plans per batch without synchronizing keeps up to kRetiringBlocksPerDevice
// blocks waiting plus the live ones in circulation: the cache holds more than that, so that
// steady state neither frees (cudaFree / cudaFreeHost synchronize the device) nor allocates.
constexpr size_t kCachedBlocksPerDevice = 16;
constexpr size_t kRetiringBlocksPerDevice = 8;

std::mutex g_cache_mutex;
std::vector<DeviceBlock*> g_cache;     // free blocks of every device
std::vector<DeviceBlock*> g_retiring;  // retired on a stream that has not reached that point yet, oldest first

void free_block(DeviceBlock* block) {
    if (block->uploaded != nullptr) cudaEventDestroy(block->uploaded);
    if (block->staging != nullptr) cudaFreeHost(block->staging);
    if (block->device_memory != nullptr) cudaFree(block->device_memory);
    delete block;
}

size_t count_on_device(const std::vector<DeviceBlock*>& blocks, int device) {
    return static_cast<size_t>(
        std::count_if(blocks.begin(), blocks.end(), [device](const DeviceBlock* block) { return block->device == device; }));
}

// Into the cache (the back: the cache runs from least to most recently returned); with the cache
// full of its device's blocks, the least recently returned of them is freed instead, so that a
// new layout's larger blocks replace an earlier layout's rather than being allocated and freed
// every call (docs/design/fa2-routing.md). Caller holds the mutex.
void cache_or_free_locked(DeviceBlock* block) {
    if (count_on_device(g_cache, block->device) >= kCachedBlocksPerDevice) {
        const auto oldest = std::find_if(g_cache.begin(), g_cache.end(),
                                         [block](const DeviceBlock* cached) { return cached->device == block->device; });
        free_block(*oldest);
        g_cache.erase(oldest);
    }
    g_cache.push_back(block);
}

// Moves the retiring blocks of `device` whose stream has passed their retirement to the cache.
// With too many still retiring, waits for the oldest: this bounds the memory a caller that
// never synchronizes can tie up. Caller holds the mutex.
void collect_retired_locked(int device) {
    size_t retiring = 0;
    for (auto it = g_retiring.begin(); it != g_retiring.end();) {
        if ((*it)->device != device) {
            ++it;
        } else if (cudaEventQuery((*it)->uploaded) == cudaSuccess) {
            cache_or_free_locked(*it);
            it = g_retiring.erase(it);
        } else {
            ++retiring, ++it;
        }
    }
    cudaGetLastError();  // cudaErrorNotReady is no error of the caller's
    if (retiring < kRetiringBlocksPerDevice) return;
    const auto oldest = std::find_if(g_retiring.begin(), g_retiring.end(),
                                     [device](const DeviceBlock* block) { return block->device == device; });
    cudaEventSynchronize((*oldest)->uploaded);
    cudaGetLastError();
    cache_or_free_locked(*oldest);
    g_retiring.erase(oldest);
}

// The device's upload stream, made on first use and kept for the process. Uploads go there and
// not on the caller's stream, so that they overlap the kernels already queued there: a caller
// that plans per batch would otherwise put a copy between every two kernels. Runs wait for the
// upload's event (device_block_prepare_run).
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

size_t round_up_pow2(size_t bytes) {
    size_t rounded = 4096;
    while (rounded < bytes) rounded *= 2;
    return rounded;
}

}  // namespace

cudaError_t device_block_acquire(size_t bytes, size_t staging_bytes, const char* what, DeviceBlock** out,
                                 std::string* message) {
    *out = nullptr;
    int device = 0;
    cudaError_t error = cudaGetDevice(&device);
    if (error != cudaSuccess) {
        *message = "cudaGetDevice";
        return error;
    }
    {
        std::lock_guard<std::mutex> lock(g_cache_mutex);
        collect_retired_locked(device);
        auto best = g_cache.end();
        for (auto it = g_cache.begin(); it != g_cache.end(); ++it) {
            const DeviceBlock* block = *it;
            if (block->device == device && block->bytes >= bytes && block->staging_bytes >= staging_bytes &&
                (best == g_cache.end() || block->bytes < (*best)->bytes)) {
                best = it;
            }
        }
        if (best != g_cache.end()) {
            *out = *best;
            g_cache.erase(best);
            (*out)->upload_seen_complete.store(false, std::memory_order_relaxed);
            return cudaSuccess;
        }
    }
    DeviceBlock* fresh = new (std::nothrow) DeviceBlock();
    if (fresh == nullptr) {
        *message = std::string("out of host memory for the ") + what;
        return cudaErrorMemoryAllocation;
    }
    // Round up so that blocks suit later layouts of similar size.
    fresh->device = device;
    fresh->bytes = round_up_pow2(bytes);
    fresh->staging_bytes = round_up_pow2(staging_bytes);
    if ((error = cudaMalloc(&fresh->device_memory, fresh->bytes)) != cudaSuccess) {
        *message = std::string("cudaMalloc of the ") + what + " (" + std::to_string(fresh->bytes) + " bytes)";
    } else if ((error = cudaMallocHost(&fresh->staging, fresh->staging_bytes)) != cudaSuccess) {
        *message = std::string("cudaMallocHost of the ") + what + " staging buffer (" +
                   std::to_string(fresh->staging_bytes) + " bytes)";
    } else if ((error = cudaEventCreateWithFlags(&fresh->uploaded, cudaEventDisableTiming)) != cudaSuccess) {
        *message = std::string("cudaEventCreateWithFlags for the ") + what + " upload";
    }
    if (error != cudaSuccess) {
        free_block(fresh);
        cudaGetLastError();
        return error;
    }
    *out = fresh;
    return cudaSuccess;
}

cudaError_t device_block_upload(DeviceBlock* block, size_t bytes, std::string* message) {
    cudaStream_t stream = nullptr;
    cudaError_t error = upload_stream(block->device, &stream);
    if (error != cudaSuccess) {
        *message = "cudaStreamCreateWithFlags for the schedule uploads";
        return error;
    }
    if (bytes > 0 &&
        (error = cudaMemcpyAsync(block->device_memory, block->staging, bytes, cudaMemcpyHostToDevice, stream)) !=
            cudaSuccess) {
        *message = "cudaMemcpyAsync of the schedule";
        return error;
    }
    if ((error = cudaEventRecord(block->uploaded, stream)) != cudaSuccess) {
        *message = "cudaEventRecord after the schedule upload";
        cudaStreamSynchronize(stream);  // nothing may still read the staging buffer
    }
    return error;
}

cudaError_t device_block_prepare_run(DeviceBlock* block, cudaStream_t stream) {
    if (block->upload_seen_complete.load(std::memory_order_acquire)) return cudaSuccess;
    cudaError_t error = cudaSuccess;
    if (capturing_graph(stream) != nullptr) {
        // A captured stream cannot wait for an event recorded outside its capture: the host does.
        RelaxedCaptureScope relaxed;
        error = cudaEventSynchronize(block->uploaded);
    } else {
        error = cudaEventQuery(block->uploaded);
    }
    if (error == cudaSuccess) {
        block->upload_seen_complete.store(true, std::memory_order_release);
        return cudaSuccess;
    }
    if (error != cudaErrorNotReady) return error;
    return cudaStreamWaitEvent(stream, block->uploaded, 0);
}

namespace {

// What a graph's user object holds: the block, released by the object's destructor (where no
// CUDA call may be made) into the retiring list once the graph and its launches are gone.
struct GraphHeld {
    DeviceBlock* block;
};

void CUDART_CB release_from_graph(void* held) {
    const GraphHeld* owned = static_cast<GraphHeld*>(held);
    if (owned->block != nullptr) device_block_release(owned->block);
    delete owned;
}

// The capturing graph holds the block: back for reuse when the graph (and every executable graph
// made from it) is destroyed and its launches have completed. On failure the caller keeps it.
cudaError_t hand_to_graph(DeviceBlock* block, cudaGraph_t graph) {
    GraphHeld* held = new (std::nothrow) GraphHeld{block};
    if (held == nullptr) return cudaErrorMemoryAllocation;
    cudaUserObject_t object = nullptr;
    cudaError_t error = cudaUserObjectCreate(&object, held, release_from_graph, 1, cudaUserObjectNoDestructorSync);
    if (error != cudaSuccess) {
        delete held;
        return error;
    }
    error = cudaGraphRetainUserObject(graph, object, 1, cudaGraphUserObjectMove);
    if (error != cudaSuccess) {
        held->block = nullptr;  // the caller keeps the block; the destructor only frees `held`
        cudaUserObjectRelease(object, 1);
    }
    return error;
}

}  // namespace

// Onto the retiring list, free once its event has completed (collect_retired_locked). For a plan
// destroyed after its runs that event is the upload's, which may still be in flight when no run
// came; device_block_retire records it again on the caller's stream first.
void device_block_release(DeviceBlock* block) {
    if (block == nullptr) return;
    std::lock_guard<std::mutex> lock(g_cache_mutex);
    g_retiring.push_back(block);
}

cudaError_t device_block_retire(DeviceBlock* block, cudaStream_t stream) {
    if (block == nullptr) return cudaSuccess;
    // Retired while `stream` captures a graph: the graph's replays keep using the block, so the
    // graph owns it (an event recorded in a capture could not be queried for its release anyway).
    if (const cudaGraph_t graph = capturing_graph(stream); graph != nullptr) return hand_to_graph(block, graph);
    // The upload may have been enqueued on another stream: order it before the retirement too.
    cudaError_t error = cudaStreamWaitEvent(stream, block->uploaded, 0);
    if (error == cudaSuccess) error = cudaEventRecord(block->uploaded, stream);
    if (error != cudaSuccess) return error;
    device_block_release(block);
    return cudaSuccess;
}

}  // namespace fas
