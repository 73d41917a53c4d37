// Host-only planner of the SM90 (FA3-class) ragged prefill family: FlashInfer's host scheduler
// (PrefillSM90Plan) behind the light interface of sm90/plan.h. Compiled with the SM90 include
// set; holds no kernels and is built also when no SM90 kernel is.
#include <flashinfer/attention/scheduler.cuh>

#include "sm90/plan.h"

#include <exception>
#include <new>
#include <sstream>
#include <vector>

namespace fas_sm90 {

struct Schedule {
    void* int_workspace = nullptr;  // device, cudaMalloc
    size_t int_workspace_bytes = 0;
    flashinfer::PrefillPlanSM90Info info;
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

// PrefillSM90Plan's bound that selects the schedule shared by all heads.
int64_t max_works_per_head(const PlanLayout& layout) {
    const int tile = cta_tile_q(layout.head_dim);
    const int64_t total_rows =
        static_cast<int64_t>(layout.cu_seqlens_q[layout.batch_size]) - layout.cu_seqlens_q[0];
    return (total_rows + tile - 1) / tile + layout.batch_size - 1;
}

// Exact int-workspace need of PrefillSM90Plan with enable_cuda_graph = false: seven arrays of
// total_works int32 and work_indptr of sm_count + 1, each 16-byte aligned.
size_t int_workspace_bytes(int64_t works, int sm_count) {
    return 7 * round16(sizeof(int32_t) * static_cast<size_t>(works)) +
           round16(sizeof(int32_t) * static_cast<size_t>(sm_count + 1));
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
            << " rows per head; above 4096 FlashInfer's planner switches to the schedule shared by all heads, "
               "whose kernels this library does not build (split the batch into plans of fewer tokens)";
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
    // Slack for the allocator's alignment of the base pointer (cudaMalloc gives 256 bytes anyway).
    schedule->int_workspace_bytes = int_workspace_bytes(works, layout.sm_count) + 256;
    // Pageable staging: pinning a fresh buffer per plan is a slow driver call (cudaMallocHost),
    // and a copy from pageable memory has consumed the buffer when cudaMemcpyAsync returns.
    std::vector<unsigned char> staging;
    cudaError_t error = cudaMalloc(&schedule->int_workspace, schedule->int_workspace_bytes);
    if (error != cudaSuccess) {
        *message = "cudaMalloc of the SM90 schedule workspace (" + std::to_string(schedule->int_workspace_bytes) +
                   " bytes)";
    } else {
        try {
            staging.resize(schedule->int_workspace_bytes);
        } catch (const std::bad_alloc&) {
            error = cudaErrorMemoryAllocation;
            *message = "out of host memory for the SM90 schedule staging buffer";
        }
    }
    if (error == cudaSuccess) {
        std::vector<int32_t> qo_indptr(layout.cu_seqlens_q, layout.cu_seqlens_q + layout.batch_size + 1);
        std::vector<int32_t> kv_indptr(layout.cu_seqlens_k, layout.cu_seqlens_k + layout.batch_size + 1);
        std::vector<int32_t> kv_len(layout.batch_size);
        for (int i = 0; i < layout.batch_size; ++i) kv_len[i] = kv_indptr[i + 1] - kv_indptr[i];
        try {
            error = flashinfer::PrefillSM90Plan<int32_t>(
                /*float_buffer=*/nullptr, /*float_workspace_size_in_bytes=*/0, schedule->int_workspace, staging.data(),
                schedule->int_workspace_bytes, schedule->info, qo_indptr.data(), kv_indptr.data(), kv_len.data(),
                static_cast<uint32_t>(qo_indptr[layout.batch_size] - qo_indptr[0]),
                static_cast<uint32_t>(layout.batch_size), static_cast<uint32_t>(layout.num_heads_q),
                static_cast<uint32_t>(layout.num_heads_k), static_cast<uint32_t>(layout.head_dim),
                static_cast<uint32_t>(layout.head_dim), /*page_size=*/1, layout.causal,
                /*enable_cuda_graph=*/false, /*sizeof_dtype_o=*/2, stream);
            if (error != cudaSuccess) *message = "flashinfer::PrefillSM90Plan (schedule upload)";
        } catch (const std::exception& exception) {
            error = cudaErrorInvalidValue;
            *message = std::string("flashinfer::PrefillSM90Plan refused the layout: ") + exception.what();
        }
        if (error == cudaSuccess && schedule->info.same_schedule_for_all_heads) {
            error = cudaErrorInvalidValue;  // layout_unsupported_reason should have caught it
            *message = "flashinfer::PrefillSM90Plan chose the schedule shared by all heads, which is not built";
        }
        // Runs may use other streams: the schedule must be on the device when this returns.
        const cudaError_t sync_error = cudaStreamSynchronize(stream);
        if (error == cudaSuccess && sync_error != cudaSuccess) {
            error = sync_error;
            *message = "cudaStreamSynchronize after the SM90 schedule upload";
        }
    }
    if (error != cudaSuccess) {
        schedule_destroy(schedule);
        return error;
    }
    *out = schedule;
    return cudaSuccess;
}

void schedule_destroy(Schedule* schedule) {
    if (schedule == nullptr) return;
    if (schedule->int_workspace != nullptr) cudaFree(schedule->int_workspace);
    delete schedule;
}

size_t schedule_device_bytes(const Schedule* schedule) { return schedule->int_workspace_bytes; }

void schedule_fill_args(const Schedule* schedule, RaggedArgs* args) {
    const char* base = static_cast<const char*>(schedule->int_workspace);
    const flashinfer::PrefillPlanSM90Info& info = schedule->info;
    const auto at = [base](int64_t offset) { return reinterpret_cast<const int32_t*>(base + offset); };
    args->qo_tile_indices = at(info.qo_tile_indices_offset);
    args->qo_indptr = at(info.qo_indptr_offset);
    args->kv_indptr = at(info.kv_indptr_offset);
    args->qo_lens = at(info.qo_len_offset);
    args->kv_lens = at(info.kv_len_offset);
    args->head_indices = at(info.head_indices_offset);
    args->work_indptr = at(info.work_indptr_offset);
    args->batch_indices = at(info.batch_indices_offset);
}

}  // namespace fas_sm90
