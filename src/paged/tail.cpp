// The host planner's side of the tail (tail.h): the same units and run as the kernel's plan.
#include "paged/tail.h"

#include <algorithm>

namespace fas_paged {

bool host_tail_cuts(const PlanRequest& request, int window_left, const std::vector<int32_t>& rows, int num_heads_k,
                    int32_t chunk, int64_t wave, int box_shift, int stage_keys, long long unit_bytes) {
    const int64_t items = static_cast<int64_t>(rows.size()) * num_heads_k, grid = std::min(items, wave);
    const int64_t dp = chunk == 0 && items > grid ? items - items % grid : items;
    if (dp == items || items - dp > kTailMaxItems) return false;
    long long units = 0;
    int most = 0;
    for (int64_t index = dp; index < items; ++index) {  // a sequence's KV heads alike
        const int i = rows[static_cast<size_t>(index / num_heads_k)];
        const int kv_len = kv_length(request, i);
        const int qo_len = request.cu_seqlens_q[i + 1] - request.cu_seqlens_q[i];
        const int u = tail_item_units(window_start(kv_len, qo_len, window_left), kv_len, box_shift);
        units += u;
        most = std::max(most, u);
    }
    return tail_cuts(most, tail_unit(units, static_cast<int>(grid), most, stage_keys >> box_shift), unit_bytes);
}

}  // namespace fas_paged
