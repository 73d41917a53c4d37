// The stream shape's work items (decode_tma.cuh) as its warps walk them: an item's description from
// the plan's schedule (ItemStream: loads issued an item or two ahead of their use), and the page ids
// of the producer's stages (StageIds: loaded an id group of stages ahead). Both exist for one reason:
// a load issued behind a ring of copies in flight returns only after them (Little's law: ~3 stages,
// several microseconds, on an H200), and whatever waits for it waits with the copies' slots unfilled
// (docs/design/decode-producer.md).
#ifndef FAS_PAGED_DECODE_ITEMS_CUH
#define FAS_PAGED_DECODE_ITEMS_CUH

#include <cstdint>

#include "paged/paged.h"
#include "paged/tail.h"

namespace fas_paged {
namespace decode {

// Work items of the launch: its CTAs' schedule rows times the KV heads.
__device__ __forceinline__ int item_count(const LaunchArgs& a) {
    return (a.device_ctas != nullptr ? *a.device_ctas : a.num_ctas) * a.num_heads_k;
}

// One work item (a 16-row query tile x KV chunk x KV head): what producer and consumers agree on.
struct Item {
    int request, qo_tile, kv_tile, kv_head;
    int q_begin, qo_len, kv_len, kv_begin, kv_end;
    int first;       // the first stage's first key: kv_begin rounded down to a whole box
    int iterations;  // stages
    int num_chunks;
    int page_begin;
};

// An item's schedule loads, apart so that they can be issued an item or two ahead of its use: its
// row of the schedule, then (once that has landed) its sequence's bounds.
struct ItemRow {
    int request, qo_tile, kv_tile;
};
struct ItemSeq {
    int q_begin, q_end, page_begin, page_end, last_page_len;
};
__device__ __forceinline__ ItemRow load_row(const LaunchArgs& a, int index) {
    const int cta = index / a.num_heads_k;
    return {a.request_indices[cta], a.qo_tile_indices[cta], a.kv_tile_indices[cta]};
}
__device__ __forceinline__ ItemSeq load_seq(const LaunchArgs& a, int request) {
    return {a.q_indptr[request], a.q_indptr[request + 1], a.page_indptr[request], a.page_indptr[request + 1],
            a.last_page_len[request]};
}

// chunk: the plan's KV chunk (kv_chunk_size[0]) when split, else 0; read once per CTA.
template <int Keys>
__device__ __forceinline__ Item describe(const LaunchArgs& a, int index, const ItemRow& r, const ItemSeq& q, int chunk_size) {
    Item w;
    w.kv_head = index % a.num_heads_k;  // KV heads fastest: one sequence's heads read the same rows together
    w.request = r.request;
    w.qo_tile = r.qo_tile;
    w.kv_tile = r.kv_tile;
    w.q_begin = q.q_begin;
    w.qo_len = q.q_end - q.q_begin;
    w.page_begin = q.page_begin;
    const int pages = q.page_end - q.page_begin;
    w.kv_len = pages == 0 ? 0 : (pages - 1) * a.page_size + q.last_page_len;
    const int kv_start = window_start(w.kv_len, w.qo_len, a.window_left);
    const int span = w.kv_len - kv_start;
    const int chunk = a.split ? chunk_size : span;
    w.kv_begin = kv_start + (a.split ? min(w.kv_tile * chunk, span) : 0);
    w.kv_end = a.split ? min(w.kv_begin + chunk, w.kv_len) : w.kv_len;
    w.first = w.kv_begin >> a.box_shift << a.box_shift;
    w.iterations = w.kv_end > w.kv_begin ? (w.kv_end - w.first + Keys - 1) / Keys : 0;
    w.num_chunks = a.split ? (max(span, 1) + chunk - 1) / chunk : 1;
    return w;
}

template <int Keys>
__device__ __forceinline__ Item describe(const LaunchArgs& a, int index, int chunk_size) {
    const ItemRow r = load_row(a, index);
    return describe<Keys>(a, index, r, load_seq(a, r.request), chunk_size);
}

// A CTA's items (blockIdx.x, + gridDim.x, ...) in order, each described from loads issued ahead:
// its schedule row two items before, its sequence's bounds one item before. Described on the
// spot, an item's two dependent loads (L2 latency each, under a full memory pipe) held the
// producer between items with its freed slots unfilled, and the consumers with landed stages
// unread: the cost of many short items (docs/design/decode-producer.md).
template <int Keys>
struct ItemStream {
    int index;        // the next item take() returns
    int chunk;        // the plan's KV chunk, split plans (loaded here once, not per item)
    ItemRow row[2];   // of index and index + gridDim.x
    ItemSeq seq;      // of index
    // used: whether take() will be called (nothing is loaded ahead otherwise). The first row is
    // loaded whatever the launch's item count (a CTA's index is below the grid, which the plan's
    // schedule rows bound), beside a device-length plan's load of that count instead of after it:
    // a round trip less at every launch's start.
    __device__ __forceinline__ ItemStream(const LaunchArgs& a, int items, bool used)
        : index(blockIdx.x), chunk(a.split ? a.kv_chunk_size[0] : 0) {
        row[0] = used ? load_row(a, index) : ItemRow{};
        seq = used && index < items ? load_seq(a, row[0].request) : ItemSeq{};
        row[1] = used && index + static_cast<int>(gridDim.x) < items ? load_row(a, index + gridDim.x) : ItemRow{};
    }
    // Item `index` (which must be < items), then the loads of the two after it.
    __device__ __forceinline__ Item take(const LaunchArgs& a, int items) {
        const Item w = describe<Keys>(a, index, row[0], seq, chunk);
        index += gridDim.x;
        row[0] = row[1];
        seq = index < items ? load_seq(a, row[0].request) : ItemSeq{};
        row[1] = index + static_cast<int>(gridDim.x) < items ? load_row(a, index + gridDim.x) : ItemRow{};
        return w;
    }
};

// The tail. Round-robin over equal items, a launch of n items on g CTAs takes ceil(n / g) rounds
// while the last round busies only n % g CTAs: on an H200 rows of 66/64 the items (a multiple of
// its 132 SMs) ran in the same time, ~3% more TB/s. A CTA's rate is its ring's, so the idle SMs'
// bandwidth is lost, and giving CTAs runs of consecutive items instead cost 2.5-5% (a sequence's
// KV heads no longer read the same rows together: docs/design/decode-producer.md, "The tail").
// So the whole rounds stay round-robin and the n % g items after them are cut into pieces: their
// 16-key boxes (units) are dealt out in equal runs, from the last CTA down (whose round-robin
// items were the shortest), at most kTailMaxPieces pieces an item and runs of at least two
// stages. An item cut in several is folded by the CTA that stores its last piece. Only unsplit
// launches (tail_on): split plans already fill one wave with equal chunks.
__device__ __forceinline__ bool tail_on(const LaunchArgs& a, int chunk) {
    return a.tail_counts != nullptr && (!a.split || chunk == kUnsplitChunk);
}
// Items walked round-robin: all, or the whole rounds when a tail follows.
__device__ __forceinline__ int round_robin_items(int items, bool tail) {
    const int g = gridDim.x, m = items % g;
    return tail && items > g && m <= kTailMaxItems ? items - m : items;
}
// An item's units: boxes from its first to its last key (an item without keys counts one).
__device__ __forceinline__ int item_units(const Item& w, int box_shift) {
    return tail_item_units(w.kv_begin, w.kv_end, box_shift);  // w.first: kv_begin's box (describe)
}

// The tail's plan in shared memory, made by one warp (plan_tail) and read by every warp: the
// tail's items described (so that no piece waits for its description's loads), their units'
// running sum, the run of units per CTA, and this CTA's run [lo, hi) from item x0 on.
struct TailPlan {
    int unit, ctas;  // units per CTA; CTAs with tail work: the last `ctas` of the grid
    int lo, hi, x0;  // this CTA's run (lo == hi: none)
    int prefix[kTailMaxItems + 1];
    Item items[kTailMaxItems];
};

// The tail variant's dynamic shared memory beyond its shape's: the plan, then its mbarrier.
constexpr int kTailSmemBytes = static_cast<int>(sizeof(TailPlan)) + 16;
static_assert(sizeof(TailPlan) % 8 == 0, "the mbarrier after the plan is 8-byte aligned");

// The warp's plan of the tail of items [dp, items): every load issued before any is used (two
// round trips: the rows, then their sequences), then the sums (lane 0 writes the scalars).
// unit_bytes: K and V bytes of a unit (a box of rows of one KV head).
template <int Keys>
__device__ void plan_tail(const LaunchArgs& a, int dp, int items, int chunk, long long unit_bytes, TailPlan& t,
                          int lane) {
    constexpr int kPerLane = kTailMaxItems / 32;
    const int m = items - dp;
    ItemRow rows[kPerLane];
    ItemSeq seqs[kPerLane];
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) rows[j] = 32 * j + lane < m ? load_row(a, dp + 32 * j + lane) : ItemRow{};
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) seqs[j] = 32 * j + lane < m ? load_seq(a, rows[j].request) : ItemSeq{};
    int carry = 0, most = 0;
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) {
        const int x = 32 * j + lane;
        int u = 0;
        if (x < m) {
            t.items[x] = describe<Keys>(a, dp + x, rows[j], seqs[j], chunk);
            u = item_units(t.items[x], a.box_shift);
        }
        most = max(most, u);
        int sum = u;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const int v = __shfl_up_sync(0xffffffffu, sum, o);
            if (lane >= o) sum += v;
        }
        if (x < m) t.prefix[x + 1] = carry + sum;
        carry += __shfl_sync(0xffffffffu, sum, 31);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) most = max(most, __shfl_xor_sync(0xffffffffu, most, o));
    __syncwarp();
    if (lane == 0) {
        const int g = gridDim.x, p = g - 1 - static_cast<int>(blockIdx.x);
        t.prefix[0] = 0;
        t.unit = tail_unit(carry, g, most, Keys >> a.box_shift);
        t.ctas = (carry + t.unit - 1) / t.unit;
        t.lo = t.hi = t.x0 = 0;
        if (!tail_cuts(most, t.unit, unit_bytes)) {  // tail.h (a host plan would hold no tail then)
            t.unit = carry + 1;  // every item one piece, on the CTA round-robin gives it
            t.ctas = m;
            if (static_cast<int>(blockIdx.x) < m) {
                t.x0 = blockIdx.x;
                t.lo = t.prefix[blockIdx.x];
                t.hi = t.prefix[blockIdx.x + 1];
            }
        } else if (p < t.ctas) {
            t.lo = p * t.unit;
            t.hi = min(t.lo + t.unit, carry);
            int low = 0, high = m - 1;  // the last item starting at or before lo
            while (low < high) {
                const int mid = (low + high + 1) / 2;
                if (t.prefix[mid] <= t.lo) low = mid; else high = mid - 1;
            }
            t.x0 = low;
        }
    }
}

// Whether tail item x has a piece in this CTA's run (x from t.x0 on).
__device__ __forceinline__ bool in_run(const TailPlan& t, int x, int m) { return x < m && t.prefix[x] < t.hi; }

// Tail item x cut to this CTA's run (num_chunks: the item's pieces; kv_tile: this one's).
template <int Keys>
__device__ __forceinline__ Item tail_piece(const TailPlan& t, int x, int box_shift) {
    Item w = t.items[x];
    const int begin = t.prefix[x], end = t.prefix[x + 1], from = max(t.lo, begin);
    w.num_chunks = (end - 1) / t.unit - begin / t.unit + 1;
    w.kv_tile = from / t.unit - begin / t.unit;
    if (w.kv_end > w.kv_begin) {
        const int item_first = w.first;
        w.first = item_first + ((from - begin) << box_shift);
        w.kv_begin = max(w.kv_begin, w.first);
        w.kv_end = min(w.kv_end, item_first + ((min(t.hi, end) - begin) << box_shift));
        w.iterations = (w.kv_end - w.first + Keys - 1) / Keys;
    }
    return w;
}

// An id group: the page ids of a run of the producer's stages, in one register of each lane: lane
// j holds the id of box j % B of stage first + j / B of an item (B boxes a stage, 32 / B stages a
// group). The producer loads an item's next group when it takes one, a group (4 stages of 128 keys
// at pages of 16) ahead of its use, and the next item's first group a group before the item's end.
// Loaded at each stage instead, a stage's copies waited for its ids whenever they missed L1 (every
// 32 pages): pages of 16 ran 5-12% slower than contiguous keys, in order as slowly as shuffled, and
// as fast as them with the ids not loaded at all (a diagnostic build; docs/design/decode-producer.md).
template <int Keys>
struct StageIds {
    static constexpr int kKeysShift =
        Keys == 512 ? 9 : Keys == 256 ? 8 : Keys == 128 ? 7 : Keys == 64 ? 6 : Keys == 32 ? 5 : 4;
    static_assert(1 << kKeysShift == Keys, "stages of 16 to 512 keys");
    int index = -1;  // the item's (-1: none)
    int first = 0;   // its first stage
    int id = 0;
    // The group of item w (index) from stage `first` on; boxes of 1 << box_shift rows.
    __device__ __forceinline__ void load(const LaunchArgs& a, const Item& w, int item, int from, int box_shift,
                                         int page_shift, int lane) {
        const int per_stage_shift = kKeysShift - box_shift;  // log2 B
        const int stage = from + (lane >> per_stage_shift);
        const int key = w.first + stage * Keys + ((lane & ((1 << per_stage_shift) - 1)) << box_shift);
        index = item;
        first = from;
        id = 0;
        if (stage < w.iterations && key < w.kv_end) {
            id = a.page_indices[w.page_begin + (page_shift >= 0 ? key >> page_shift : key / a.page_size)];
        }
    }
    // Lane `box`'s id at stage `stage` of the group (every lane takes part).
    __device__ __forceinline__ int at(int stage, int box, int box_shift) const {
        return __shfl_sync(0xffffffffu, id, ((stage - first) << (kKeysShift - box_shift)) + box);
    }
};

}  // namespace decode
}  // namespace fas_paged

#endif  // FAS_PAGED_DECODE_ITEMS_CUH
