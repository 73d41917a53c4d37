// Host-only planner of the SM90 (FA3-class) ragged prefill family, behind the light interface
// of sm90/schedule.h: lists the layout's query tiles, in the units and order our device-side work
// scheduler (sm90/tile_scheduler.cuh) deals to CTAs with every head. Host work grows with the
// tiles, not tiles x heads (FlashInfer's PrefillSM90Plan assigned every (tile, head) on the
// host: docs/design/plan-per-call.md). Holds no kernels and is built also when no SM90 kernel is.
#include "sm90/schedule.h"

#include <algorithm>
#include <new>
#include <sstream>
#include <vector>

#include "api/device_block.h"
#include "sm90/tiles.h"

namespace fas_sm90 {

struct Schedule {
    fas::DeviceBlock* block = nullptr;  // from the per-device cache of api/device_block.h
    int num_units = 0;
    int tiles_per_unit = 1;
    int num_ctas = 0;
};

namespace {

int query_tile_rows(const PlanLayout& layout) {
    return tile_shape(layout.fp8, layout.head_dim, layout.causal, layout.kv_lengths != nullptr).q_rows;
}

int32_t kv_length(const PlanLayout& layout, int i) {
    return layout.kv_lengths != nullptr ? layout.kv_lengths[i] : layout.cu_seqlens_k[i + 1] - layout.cu_seqlens_k[i];
}

// Where each sequence's keys start for the kernel: its first key row, or for a paged cache its
// first entry of the page list (CSR: the pages of the sequences before it).
std::vector<int32_t> kv_starts(const PlanLayout& layout) {
    std::vector<int32_t> starts(layout.batch_size);
    int64_t pages = 0;
    for (int i = 0; i < layout.batch_size; ++i) {
        if (layout.kv_lengths == nullptr) {
            starts[i] = layout.cu_seqlens_k[i];
            continue;
        }
        starts[i] = static_cast<int32_t>(pages);
        pages += (static_cast<int64_t>(layout.kv_lengths[i]) + layout.page_size - 1) / layout.page_size;
    }
    return starts;
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
    const auto kv_len = [&](int i) { return kv_length(layout, i); };
    const std::vector<int32_t> kv_start = kv_starts(layout);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return kv_len(a) > kv_len(b); });
    size_t at = 0;
    for (int i : order) {
        const int32_t qo_len = layout.cu_seqlens_q[i + 1] - layout.cu_seqlens_q[i];
        const int32_t tiles = (qo_len + rows - 1) / rows;
        const auto tile = [&](int32_t t) {
            // Under a left window a tile's keys start at the first one its first row sees: the
            // kernel's masks depend only on kv_len - qo_len, so the shorter range keeps them exact,
            // and no key tile left of the window is loaded (FlashInfer's own range starts one tile
            // early).
            const int64_t first_seen = static_cast<int64_t>(t) * rows + kv_len(i) - qo_len - layout.window_left;
            const int32_t skip = layout.window_left < 0 ? 0 : static_cast<int32_t>(std::max<int64_t>(0, first_seen));
            return TileWork{t, i, layout.cu_seqlens_q[i], kv_start[i] + skip, qo_len, kv_len(i) - skip, {0, 0}};
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
        const int64_t sk = kv_length(layout, i);
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
    cudaError_t error = fas::device_block_acquire(bytes, bytes, "SM90 schedule", &schedule->block, message);
    if (error == cudaSuccess) {
        try {
            fill_units(layout, static_cast<TileWork*>(schedule->block->staging));
        } catch (const std::bad_alloc&) {
            error = cudaErrorMemoryAllocation;
            *message = "out of host memory while listing the SM90 work";
        }
    }
    if (error == cudaSuccess) error = fas::device_block_upload(schedule->block, bytes, message);
    if (error != cudaSuccess) {
        cudaGetLastError();
        schedule_destroy(schedule);
        return error;
    }
    *out = schedule;
    return cudaSuccess;
}

cudaError_t schedule_prepare_run(Schedule* schedule, cudaStream_t stream) {
    return fas::device_block_prepare_run(schedule->block, stream);
}

void schedule_destroy(Schedule* schedule) {
    if (schedule == nullptr) return;
    fas::device_block_release(schedule->block);
    delete schedule;
}

cudaError_t schedule_retire(Schedule* schedule, cudaStream_t stream) {
    if (schedule == nullptr) return cudaSuccess;
    const cudaError_t error = fas::device_block_retire(schedule->block, stream);
    if (error != cudaSuccess) return error;  // the schedule stays whole; the caller still owns it
    delete schedule;
    return cudaSuccess;
}

size_t schedule_device_bytes(const Schedule* schedule) { return schedule->block->bytes; }

void schedule_fill_args(const Schedule* schedule, RaggedArgs* args) {
    args->tiles = static_cast<const TileWork*>(schedule->block->device_memory);
    args->num_units = schedule->num_units;
    args->tiles_per_unit = schedule->tiles_per_unit;
    args->num_ctas = schedule->num_ctas;
}

}  // namespace fas_sm90
