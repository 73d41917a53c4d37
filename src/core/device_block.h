// Device memory for a plan's schedule, filled on the host through a pinned staging twin and
// uploaded without waiting, from a small per-device cache so that planning per batch usually
// allocates and frees nothing. Shared by the families whose plans keep device-side schedules.
#ifndef FAS_CORE_DEVICE_BLOCK_H
#define FAS_CORE_DEVICE_BLOCK_H

#include <cuda_runtime_api.h>

#include <atomic>
#include <cstddef>
#include <string>

namespace fas {

struct DeviceBlock {
    int device = 0;
    size_t bytes = 0;          // device memory
    size_t staging_bytes = 0;  // pinned host memory (may be less: only a prefix is uploaded)
    void* device_memory = nullptr;
    void* staging = nullptr;
    // Recorded after the upload; for a block retired on a stream, recorded again there: the
    // block is free once it has completed.
    cudaEvent_t uploaded = nullptr;
    std::atomic<bool> upload_seen_complete{false};  // set by the first run that finds it done
};

// A block of the current device with at least `bytes` of device memory and `staging_bytes` of
// pinned staging: a cached one (the smallest that fits) or a new one. `what` names it in
// *message on failure.
cudaError_t device_block_acquire(size_t bytes, size_t staging_bytes, const char* what, DeviceBlock** out,
                                 std::string* message);

// Enqueues the copy of the staging buffer's first `bytes` to the device on the library's upload
// stream of the block's device (one non-blocking stream per device, kept for the process), and
// records the block's event; does not wait.
cudaError_t device_block_upload(DeviceBlock* block, size_t bytes, std::string* message);

// Before a launch on stream: makes stream wait for the upload unless it is known complete (then
// one atomic load; no CUDA call once a run has seen the upload finished). A stream that captures
// a graph cannot wait for the upload's event: there the host waits for the upload instead.
cudaError_t device_block_prepare_run(DeviceBlock* block, cudaStream_t stream);

// For a block whose runs have completed: back to the cache (at most 16 per device; beyond that
// freed) once its upload is over. Never waits. NULL is a no-op.
void device_block_release(DeviceBlock* block);

// Stream-ordered release: the block returns once stream has reached this point. At most 8
// blocks per device wait so; with 8 waiting, the next acquire waits for the oldest. Retired on a
// stream that captures a graph, the block belongs to that graph (a user object of it) and
// returns when the graph and its executable graphs are destroyed. On a CUDA error the block is
// left as it was (the caller still owns it). NULL is a no-op.
cudaError_t device_block_retire(DeviceBlock* block, cudaStream_t stream);

}  // namespace fas

#endif  // FAS_CORE_DEVICE_BLOCK_H
