// How a causal SM90 plan under a left window groups one sequence's query tiles into units of two
// (sm90/schedule.cu's fill_units): a pure function, so that the host tests can hold it to its
// promise (tests/test_sm90_tile_units.py). No CUDA types.
//
// The kernel deals units to its CTAs in a fixed order (sm90/tile_scheduler.cuh), so units of
// equal cost keep every SM busy to the end. Without a window, tile n-1-j with tile j makes every
// unit cost the same keys. Under a window most tiles cost the same (the window and a tile's
// rows) and only the first ones less, so that pairing made units of one to two tiles' cost:
// ncu on the H200 (32k tokens, a 16384-key window) showed the SMs active 80% of the kernel's
// cycles against 96% without a window, at the same cycles per key tile while active
// (docs/design/head-dims-and-masks.md).
#ifndef FAS_SM90_TILE_UNITS_H
#define FAS_SM90_TILE_UNITS_H

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <vector>

namespace fas_sm90 {

// Two query tiles of a sequence; second -1: the unit holds one tile.
struct TileUnit {
    int32_t first, second;
};

// costs[t]: the keys tile t loads. Tiles are taken costliest first (ties: the later tile first);
// each takes the cheapest tile left as its partner when the two cost at most the costliest tile
// plus `slack` keys, else it makes a unit alone. So no unit costs more than the costliest tile
// plus slack, and units come costliest first. On the costs of a causal plan without a window
// (tile t: (t + 1) x rows keys, slack rows) this is tile n-1-j with tile j.
inline std::vector<TileUnit> balanced_units(const std::vector<int64_t>& costs, int64_t slack) {
    std::vector<int32_t> order(costs.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
        return costs[a] != costs[b] ? costs[a] > costs[b] : a > b;
    });
    std::vector<TileUnit> units;
    if (order.empty()) return units;
    const int64_t cap = costs[order.front()] + slack;
    size_t hi = 0, lo = order.size();
    while (hi < lo) {
        const int32_t tile = order[hi++];
        if (hi < lo && costs[tile] + costs[order[lo - 1]] <= cap) {
            units.push_back({tile, order[--lo]});
        } else {
            units.push_back({tile, -1});
        }
    }
    return units;
}

}  // namespace fas_sm90

#endif  // FAS_SM90_TILE_UNITS_H
