// Light interface of the SM90 planner (src/sm90/schedule.cu): turns a varlen batch layout (host
// offsets) into the device-resident work schedule that the SM90 ragged prefill kernels read.
// No CUTLASS / FlashInfer types, so the API and plan code can use it without them.
// sm90/schedule.cu is compiled into every build, also when no SM90 kernel is built.
#ifndef FAS_SM90_SCHEDULE_H
#define FAS_SM90_SCHEDULE_H

#include <cstddef>
#include <cstdint>
#include <string>

#include <cuda_runtime_api.h>

#include "sm90/ragged_args.h"

namespace fas_sm90 {

struct PlanLayout {
    const int32_t* cu_seqlens_q;  // host, batch_size + 1 non-decreasing offsets (validated by the caller)
    const int32_t* cu_seqlens_k;  // host, likewise; NULL for a paged KV cache
    const int32_t* kv_lengths;    // host, batch_size (paged KV cache), else NULL
    int page_size;                // paged KV cache: a tile's kv_start is the sequence's first page entry
    int batch_size;
    int num_heads_q;
    int num_heads_k;
    int head_dim;  // the kernel's head dim (sm90/tiles.h), which may exceed the request's (round-up)
    bool causal;
    bool fp8;      // e4m3 inputs (the FP8 kernels' tile shapes)
    int sm_count;  // of the device the plan is made on (the current device)
    int window_left = -1;  // keys left of the diagonal a query sees (-1 = all): tiles skip the rest
    // Causal plans: keys right of the diagonal a query sees. 0: causal; > 0: a right window, which
    // the causal kernels serve with their diagonal moved right (sm90/prefill_body.cuh).
    int window_right = 0;
    // Short sequences share query tiles (sm90/packed_args.h); head_dim is the packed kernel's.
    // Set only where packs_pay() said so.
    bool packed = false;
    // Host, batch_size: each sequence's first key row where the sequences' keys are not laid out
    // one after another (fas_fwd's key split, api/fwd_split.h: chunks of sequences, with gaps);
    // cu_seqlens_k then gives only their lengths. NULL: cu_seqlens_k's offsets. Not packed.
    const int32_t* kv_starts = nullptr;
};

// Whether the layout (varlen, not FP8) runs faster packed: every sequence with queries fits one
// query tile and one key tile of the packed kernel of layout.head_dim, and the packs number at
// most three quarters of those sequences (any number where its tiles have fewer rows than the
// varlen kernel's).
bool packs_pay(const PlanLayout& layout);

// Empty when the SM90 kernels can run this layout, else why not (in words, for a message).
// Checks the layout-dependent limits: sequences with no key, causal sequences with more queries
// than keys (rows that see no key) and the 32-bit indexing of work items.
std::string layout_unsupported_reason(const PlanLayout& layout);

// Device-resident schedule; owned by the caller through schedule_destroy.
struct Schedule;

// Lists the layout's query tiles in the units and order sm90/tile_scheduler.cuh deals them in,
// into a schedule block (device memory, pinned staging, upload event) taken from a small
// per-device cache, or made with cudaMalloc / cudaMallocHost when none fits, and enqueues the
// upload on the library's upload stream of the current device without waiting for it. Host
// work: one pass over the tiles, none per head.
// On failure returns the CUDA error and sets *message; *out stays NULL.
cudaError_t schedule_create(const PlanLayout& layout, Schedule** out, std::string* message);

// Before each launch on stream: makes stream wait for the upload unless it is known complete
// (then it costs one atomic load; no CUDA call once a run has seen the upload finished).
cudaError_t schedule_prepare_run(Schedule* schedule, cudaStream_t stream);

// For a schedule whose runs have completed: its block returns to the cache (at most 16 per
// device; beyond that it is freed) once its upload is over, found by a later schedule_create.
// Never waits. NULL is a no-op.
void schedule_destroy(Schedule* schedule);
// Stream-ordered schedule_destroy: the block returns once stream has reached this point. At
// most 8 blocks per device wait so; with 8 waiting, the next schedule_create waits for the
// oldest. Returns without waiting. On a CUDA error the schedule is left as it was. NULL is a
// no-op.
cudaError_t schedule_retire(Schedule* schedule, cudaStream_t stream);

// Bytes of device memory the schedule holds (its block's size).
size_t schedule_device_bytes(const Schedule* schedule);

// Fills the schedule fields of *args (tiles, num_units, tiles_per_unit, num_ctas, heads_inner).
void schedule_fill_args(const Schedule* schedule, RaggedArgs* args);

}  // namespace fas_sm90

#endif  // FAS_SM90_SCHEDULE_H
