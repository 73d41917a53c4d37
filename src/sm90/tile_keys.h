// The keys one SM90 query tile loads (sm90/schedule.cu's fill_units): a pure function, so that the
// host tests can hold it to its promise (tests/test_sm90_tile_keys.py). No CUDA types.
#ifndef FAS_SM90_TILE_KEYS_H
#define FAS_SM90_TILE_KEYS_H

#include <algorithm>
#include <cstdint>

namespace fas_sm90 {

// A tile's keys: `start` is where they begin for the kernel (a key row, or for a paged cache an
// entry of the page list), `length` how many it loads, counted to the sequence's end.
struct TileKeys {
    int32_t start, length;
};

// Query tile t (rows t * rows ..) of a sequence of qo_len queries over kv_len keys that begin at
// kv_start. Under a left window the tile's keys start at the first one its first row sees (queries
// are bottom-right aligned: row i sees from i + kv_len - qo_len - window_left on): the kernel's
// masks depend only on its kv_len - qo_len, so the shorter range keeps them exact and no key left
// of the window is loaded. A paged tile (page_size > 0) starts at the page that holds that key,
// up to a page early: its start counts page entries. window_left < 0: every key.
inline TileKeys tile_keys(int32_t t, int32_t rows, int32_t kv_start, int32_t kv_len, int32_t qo_len,
                          int32_t window_left, int32_t page_size) {
    const int64_t first_seen = static_cast<int64_t>(t) * rows + kv_len - qo_len - window_left;
    int32_t skip = window_left < 0 ? 0 : static_cast<int32_t>(std::max<int64_t>(0, first_seen));
    if (page_size > 0) skip -= skip % page_size;
    return TileKeys{kv_start + (page_size > 0 ? skip / page_size : skip), kv_len - skip};
}

}  // namespace fas_sm90

#endif  // FAS_SM90_TILE_KEYS_H
