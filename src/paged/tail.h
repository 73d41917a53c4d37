// The tail of a stream decode launch (decode_items.cuh: the items past the last whole round, cut
// into pieces over the CTAs): the arithmetic its planning warp and the host planner share, so
// that both decide alike whether a launch's leftover items are cut.
#ifndef FAS_PAGED_TAIL_H
#define FAS_PAGED_TAIL_H

#include <cstdint>
#include <vector>

#include "paged/paged.h"

namespace fas_paged {

// Cut only where it saves a CTA at least this many bytes of the last round's reads: on an H200 the
// pieces' folds and the plan cost ~5-8 us a launch (docs/design/decode-producer.md).
constexpr long long kTailMinSavedBytes = 512 * 1024;

// Units (boxes of rows) of an item of keys [kv_begin, kv_end): from the box holding kv_begin; an
// item without keys counts one.
__host__ __device__ inline int tail_item_units(int kv_begin, int kv_end, int box_shift) {
    const int first = kv_begin >> box_shift << box_shift;
    return kv_end > kv_begin ? (kv_end - first + (1 << box_shift) - 1) >> box_shift : 1;
}
// Units per CTA: the leftover items' `units` shared evenly over `grid`, at least a third of the
// longest item (so no item is cut into more than kTailMaxPieces) and two stages.
__host__ __device__ inline int tail_unit(long long units, int grid, int most, int stage_units) {
    const long long even = (units + grid - 1) / grid;
    const long long capped = (most + kTailMaxPieces - 2) / (kTailMaxPieces - 1);
    const long long unit = even > capped ? even : capped;
    return static_cast<int>(unit > 2 * stage_units ? unit : 2 * stage_units);
}
// Whether cutting saves a CTA kTailMinSavedBytes: the longest item against the run.
__host__ __device__ inline bool tail_cuts(int most, int unit, long long unit_bytes) {
    return static_cast<long long>(most - unit) * unit_bytes >= kTailMinSavedBytes;
}

// A plan's choice (plan.cpp): whether an unsplit stream launch of `rows`' schedule (num_heads_k
// items a row, KV heads fastest, on min(items, wave) CTAs) leaves items past its whole rounds that
// the kernel would cut. If not, the plan holds no tail buffers and launches the kernel without a
// tail. A device-length plan asks it of its capacity's schedule: on an H200 the variant cost rows
// it did not cut 2-5% (docs/design/decode-producer.md, "The tail as a variant").
bool host_tail_cuts(const PlanRequest& request, int window_left, const std::vector<int32_t>& rows, int num_heads_k,
                    int32_t chunk, int64_t wave, int box_shift, int stage_keys, long long unit_bytes);

}  // namespace fas_paged

#endif  // FAS_PAGED_TAIL_H
