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

#include "core/device_block.h"
#include "sm90/packed_args.h"
#include "sm90/tile_keys.h"
#include "sm90/tile_units.h"
#include "sm90/tiles.h"

namespace fas_sm90 {

struct Schedule {
    fas::DeviceBlock* block = nullptr;  // from the per-device cache of core/device_block.h
    int num_units = 0;
    int tiles_per_unit = 1;
    int num_ctas = 0;
    bool heads_inner = false;
};

namespace {

// Packed plans run the non-causal kernel (its row table carries the masks).
TileShape layout_tile(const PlanLayout& layout) {
    const TileFor kind = layout.packed                 ? TileFor::kPacked
                         : layout.kv_lengths != nullptr ? TileFor::kPaged
                                                        : TileFor::kVarlen;
    return tile_shape(layout.fp8, layout.head_dim, layout.causal && !layout.packed, kind);
}

int query_tile_rows(const PlanLayout& layout) { return layout_tile(layout).q_rows; }

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
            starts[i] = layout.kv_starts != nullptr ? layout.kv_starts[i] : layout.cu_seqlens_k[i];
            continue;
        }
        starts[i] = static_cast<int32_t>(pages);
        pages += (static_cast<int64_t>(layout.kv_lengths[i]) + layout.page_size - 1) / layout.page_size;
    }
    return starts;
}

// Causal plans pair tiles so that every unit of a sequence costs the same (sm90/tile_scheduler.cuh).
int tiles_per_unit(const PlanLayout& layout) { return layout.causal && !layout.packed ? 2 : 1; }

// One work tile of a packed plan: sequences [first, last), their queries and keys contiguous.
struct Pack {
    int first = 0;
    int last = 0;
    int32_t qo_len = 0;
    int32_t kv_len = 0;
};

// Consecutive sequences grouped into packs of at most one query tile and one key tile; a
// sequence without queries lends its keys to the pack around it where they fit (they are masked
// out), else it ends the pack. Empty if a sequence with queries fits no tile.
std::vector<Pack> make_packs(const PlanLayout& layout) {
    const TileShape tile = tile_shape(false, layout.head_dim, false, TileFor::kPacked);
    std::vector<Pack> packs;
    Pack open;
    const auto close = [&] {
        if (open.qo_len > 0) packs.push_back(open);
        open = Pack{};
    };
    for (int i = 0; i < layout.batch_size; ++i) {
        const int32_t sq = layout.cu_seqlens_q[i + 1] - layout.cu_seqlens_q[i];
        const int32_t sk = kv_length(layout, i);
        if (sq > tile.q_rows || sk > tile.kv_rows) {
            if (sq > 0) return {};
            close();
            continue;
        }
        const bool fits = open.qo_len + sq <= tile.q_rows && open.kv_len + sk <= tile.kv_rows;
        if (!fits || (open.qo_len == 0 && sq == 0)) close();
        if (open.qo_len == 0 && sq == 0) continue;  // keys before any query of a pack: not loaded
        if (open.qo_len == 0) open.first = i;
        open.last = i + 1;
        open.qo_len += sq;
        open.kv_len += sk;
    }
    close();
    return packs;
}

int sequences_with_queries(const PlanLayout& layout) {
    int count = 0;
    for (int i = 0; i < layout.batch_size; ++i) count += layout.cu_seqlens_q[i + 1] > layout.cu_seqlens_q[i];
    return count;
}

// The packs in the order the kernel deals them (most keys first), and each row's keys into
// row_keys (sm90/packed_args.h): its sequence's keys, cut by the causal mask (bottom-right
// aligned) and the left window.
void fill_packs(const PlanLayout& layout, const std::vector<Pack>& packs, TileWork* out, uint32_t* row_keys) {
    std::vector<int> order(packs.size());
    for (size_t p = 0; p < packs.size(); ++p) order[p] = static_cast<int>(p);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return packs[a].kv_len > packs[b].kv_len; });
    size_t at = 0;
    for (int p : order) {
        const Pack& pack = packs[p];
        out[at++] = TileWork{0, pack.first, layout.cu_seqlens_q[pack.first], layout.cu_seqlens_k[pack.first],
                             pack.qo_len, pack.kv_len, {0, 0}};
    }
    for (const Pack& pack : packs) {
        int32_t kv_offset = 0;
        for (int i = pack.first; i < pack.last; ++i) {
            const int32_t sq = layout.cu_seqlens_q[i + 1] - layout.cu_seqlens_q[i];
            const int32_t sk = kv_length(layout, i);
            for (int32_t r = 0; r < sq; ++r) {
                const int32_t diagonal = r + sk - sq;
                const int32_t hi = layout.causal ? std::min(sk, diagonal + 1 + layout.window_right) : sk;
                const int32_t lo = layout.window_left < 0 ? 0 : std::max(0, diagonal - layout.window_left);
                row_keys[layout.cu_seqlens_q[i] + r] = pack_row_keys(kv_offset + lo, kv_offset + hi);
            }
            kv_offset += sk;
        }
    }
}

// Packed plans, and plans whose sequences have at most this many keys, deal their work heads
// innermost (sm90/tile_scheduler.cuh): a unit's K/V is small, so the items running at once lose no
// K/V reuse by covering several units, and every head of a row arrives in shared DRAM bursts.
constexpr int32_t kHeadsInnerMaxKeys = 512;

bool heads_inner(const PlanLayout& layout) {
    if (layout.packed) return true;
    for (int i = 0; i < layout.batch_size; ++i) {
        if (kv_length(layout, i) > kHeadsInnerMaxKeys) return false;
    }
    return true;
}

// Where a sequence's keys are paged, the page size (tile_keys.h starts a tile at a whole page); 0.
int32_t paged_keys(const PlanLayout& layout) { return layout.kv_lengths != nullptr ? layout.page_size : 0; }

bool windowed_causal(const PlanLayout& layout) { return layout.causal && !layout.packed && layout.window_left >= 0; }

// The units of a causal plan under a left window, where most tiles cost the same (the window and a
// tile's rows) and only the first ones less: sm90/tile_units.h's pairing of each sequence's tiles
// by their keys, from a tile's first key (tile_keys.h) to its last row's diagonal, at most a query
// tile's keys more than the costliest tile. Sequence i's units are units[first[i] .. first[i + 1]).
// Built once per schedule (other plans list their units without allocating per sequence).
struct WindowUnits {
    std::vector<TileUnit> units;
    std::vector<size_t> first;
};

WindowUnits window_units(const PlanLayout& layout) {
    const int rows = query_tile_rows(layout);
    WindowUnits out;
    out.first.reserve(layout.batch_size + 1);
    std::vector<int64_t> costs;
    for (int i = 0; i < layout.batch_size; ++i) {
        out.first.push_back(out.units.size());
        const int32_t qo_len = layout.cu_seqlens_q[i + 1] - layout.cu_seqlens_q[i];
        const int32_t kv_len = kv_length(layout, i);
        costs.assign((qo_len + rows - 1) / rows, 0);
        for (int32_t t = 0; t < static_cast<int32_t>(costs.size()); ++t) {
            const TileKeys keys = tile_keys(t, rows, 0, kv_len, qo_len, layout.window_left, paged_keys(layout));
            const int64_t last = std::min<int64_t>(
                kv_len, static_cast<int64_t>(t + 1) * rows + kv_len - qo_len + layout.window_right);
            costs[t] = std::max<int64_t>(0, last - (kv_len - keys.length));
        }
        const std::vector<TileUnit> units = balanced_units(costs, rows);
        out.units.insert(out.units.end(), units.begin(), units.end());
    }
    out.first.push_back(out.units.size());
    return out;
}

// Units of a plan that pairs tiles by position (window_units lists the windowed causal ones) or,
// per_unit = 1, the plan's tiles: a bound on any plan's units.
int64_t count_units(const PlanLayout& layout, int per_unit) {
    const int rows = query_tile_rows(layout);
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
// under the bottom-right aligned mask; under a left window `windowed`'s units (window_units);
// otherwise one tile per unit, last tile first.
void fill_units(const PlanLayout& layout, const WindowUnits* windowed, TileWork* out) {
    const int rows = query_tile_rows(layout);
    std::vector<int> order(layout.batch_size);
    for (int i = 0; i < layout.batch_size; ++i) order[i] = i;
    const auto kv_len = [&](int i) { return kv_length(layout, i); };
    const std::vector<int32_t> kv_start = kv_starts(layout);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return kv_len(a) > kv_len(b); });
    size_t at = 0;
    for (int i : order) {
        const int32_t qo_len = layout.cu_seqlens_q[i + 1] - layout.cu_seqlens_q[i];
        const auto tile = [&](int32_t t) {
            // Under a left window only the keys from the tile's first row's first one (tile_keys.h;
            // FlashInfer's own range starts one key tile early).
            const TileKeys keys = tile_keys(t, rows, kv_start[i], kv_len(i), qo_len, layout.window_left,
                                            paged_keys(layout));
            return TileWork{t, i, layout.cu_seqlens_q[i], keys.start, qo_len, keys.length, {0, 0}};
        };
        const int32_t tiles = (qo_len + rows - 1) / rows;
        if (!layout.causal) {
            for (int32_t t = tiles - 1; t >= 0; --t) out[at++] = tile(t);
        } else if (windowed != nullptr) {
            for (size_t u = windowed->first[i]; u < windowed->first[i + 1]; ++u) {
                const TileUnit& unit = windowed->units[u];
                out[at++] = tile(unit.first);
                out[at++] = unit.second >= 0 ? tile(unit.second) : TileWork{-1, i, 0, 0, 0, 0, {0, 0}};
            }
        } else {
            for (int32_t j = 0; j < (tiles + 1) / 2; ++j) {
                out[at++] = tile(tiles - 1 - j);
                out[at++] = tiles - 1 - j != j ? tile(j) : TileWork{-1, i, 0, 0, 0, 0, {0, 0}};
            }
        }
    }
}

}  // namespace

bool packs_pay(const PlanLayout& layout) {
    if (layout.fp8 || layout.kv_lengths != nullptr || layout.kv_starts != nullptr) return false;
    const size_t packs = make_packs(layout).size();
    // A packed tile of fewer rows than the varlen kernel's (hd96: 64 against 128) computes fewer
    // scores even with one sequence a tile (sm90/tiles.h).
    const int packed_rows = tile_shape(false, layout.head_dim, false, TileFor::kPacked).q_rows;
    if (packed_rows < tile_shape(false, layout.head_dim, false).q_rows) return packs > 0;
    return packs > 0 && packs * 4 <= static_cast<size_t>(sequences_with_queries(layout)) * 3;
}

std::string layout_unsupported_reason(const PlanLayout& layout) {
    std::ostringstream why;
    for (int i = 0; i < layout.batch_size; ++i) {
        const int64_t sq = static_cast<int64_t>(layout.cu_seqlens_q[i + 1]) - layout.cu_seqlens_q[i];
        const int64_t sk = kv_length(layout, i);
        if (sq > 0 && sk == 0) {
            why << "sequence " << i << " has " << sq << " queries and no key";
            return why.str();
        }
        if (layout.causal && sq > sk + layout.window_right) {
            why << "causal sequence " << i << " has more queries (" << sq << ") than keys (" << sk << ")";
            if (layout.window_right > 0) why << " plus the right window (" << layout.window_right << ")";
            why << ", so some rows see no key";
            return why.str();
        }
    }
    // Work items are (tile, head) pairs counted in int32 by the kernel's scheduler, with room for
    // one round of CTAs past the end.
    // Packs never outnumber the sequences with queries, nor a windowed causal plan's units its tiles:
    // those bounds serve the limit without packing or pairing here.
    const int64_t units = layout.packed             ? sequences_with_queries(layout)
                          : windowed_causal(layout) ? count_units(layout, 1)
                                                    : count_units(layout, tiles_per_unit(layout));
    const int64_t items = units * layout.num_heads_q;
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
    std::vector<Pack> packs;
    WindowUnits windowed;
    int64_t units = 0;
    try {
        if (layout.packed) {
            packs = make_packs(layout);
            units = static_cast<int64_t>(packs.size());
        } else if (windowed_causal(layout)) {
            windowed = window_units(layout);  // listed once, for the count and the list
            units = static_cast<int64_t>(windowed.units.size());
        } else {
            units = count_units(layout, tiles_per_unit(layout));
        }
    } catch (const std::bad_alloc&) {
        schedule_destroy(schedule);
        *message = "out of host memory while packing the SM90 work";
        return cudaErrorMemoryAllocation;
    }
    schedule->num_units = static_cast<int>(units);
    schedule->tiles_per_unit = tiles_per_unit(layout);
    schedule->heads_inner = heads_inner(layout);
    const int64_t resident = static_cast<int64_t>(layout.sm_count) * layout_tile(layout).ctas_per_sm;
    schedule->num_ctas = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(resident, units * layout.num_heads_q)));
    const size_t entries = static_cast<size_t>(std::max<int64_t>(1, units * schedule->tiles_per_unit));
    // Packed plans: the row table after the tiles (sm90/packed_args.h), one entry per query row.
    const size_t tiles_bytes = sizeof(TileWork) * entries;
    const size_t bytes =
        tiles_bytes + (layout.packed ? sizeof(uint32_t) * static_cast<size_t>(layout.cu_seqlens_q[layout.batch_size]) : 0);
    cudaError_t error = fas::device_block_acquire(bytes, bytes, "SM90 schedule", &schedule->block, message);
    if (error == cudaSuccess) {
        try {
            TileWork* tiles = static_cast<TileWork*>(schedule->block->staging);
            if (layout.packed) {
                fill_packs(layout, packs, tiles,
                           reinterpret_cast<uint32_t*>(static_cast<char*>(schedule->block->staging) + tiles_bytes));
            } else {
                fill_units(layout, windowed_causal(layout) ? &windowed : nullptr, tiles);
            }
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
    args->heads_inner = schedule->heads_inner ? 1 : 0;
}

}  // namespace fas_sm90
