// Packed SM90 plans (fas_plan_info.packed): short sequences that share query tiles, each row
// masked to its own sequence's keys. Cases where a packed kernel of the dtype is built: the
// Qwen2.5-VL vision tower's windows (head dim 80, round-up included), short causal prompts,
// prompts over cached keys (more keys than queries, a sequence with keys and no queries), a
// causal window, non-causal rows with fewer keys than queries, GQA 1/7/8, whole 64-patch windows
// (which pack even one to a tile on the hd96 kernel); and a batch whose sequences fill 128-row
// tiles alone, which must not pack. Results follow the reference's rule.
#include "gpu_test.h"

#include <cstring>

namespace gpu_test {

namespace {

// The smallest head dim >= at_least of a built kernel of `family` and dtype (0: none), of the
// causal variant (causal 1), the non-causal one (0) or either (-1).
int smallest_head_dim(const char* family, fas_dtype dtype, int at_least, int causal = -1) {
    int best = 0;
    for (int index = 0; index < fas_num_kernels(); ++index) {
        fas_kernel_info info;
        if (fas_get_kernel_info(index, &info) == FAS_SUCCESS && std::strcmp(info.family, family) == 0 &&
            info.dtype == dtype && info.head_dim >= at_least && (causal < 0 || info.causal == causal) &&
            (best == 0 || info.head_dim < best)) {
            best = info.head_dim;
        }
    }
    return best;
}

bool packed_kernel_built(fas_dtype dtype) { return smallest_head_dim("sm90_packed", dtype, 0) > 0; }

AttentionCase packed_case(std::string config, fas_dtype dtype, int heads_q, int heads_kv, int head_dim, bool causal,
                          std::vector<int> seqlens_q, std::vector<int> seqlens_k, bool packs) {
    AttentionCase c = varlen_case(std::move(config), dtype, heads_q, heads_kv, head_dim, causal, std::move(seqlens_q));
    c.seqlens_k = std::move(seqlens_k);
    c.use_plan = true;
    c.plan_runs = 2;
    c.expect_family = FAS_FAMILY_SM90;
    c.expect_packed = packs ? 1 : 0;
    return c;
}

// Windows of 8 x 8 patches over a height x width patch grid, row by row (partial at the edges).
std::vector<int> image_windows(int height, int width) {
    std::vector<int> windows;
    for (int top = 0; top < height; top += 8) {
        for (int left = 0; left < width; left += 8) windows.push_back(std::min(8, height - top) * std::min(8, width - left));
    }
    return windows;
}

}  // namespace

void add_packed_cases(fas_dtype dtype, bool quick, std::vector<AttentionCase>* cases) {
    if (!packed_kernel_built(dtype)) return;
    const std::vector<int> vision = quick ? image_windows(20, 28) : image_windows(60, 44);
    cases->push_back(packed_case("packed-vision-windows", dtype, 16, 16, 80, false, vision, vision, true));
    // Whole windows only: each fills the hd96 kernel's 64-row tile alone, which packs all the same
    // (fewer rows than the varlen kernel's 128: sm90/tiles.h); a 128-row kernel puts two in a tile.
    const std::vector<int> whole(quick ? 6 : 40, 64);
    cases->push_back(packed_case("packed-whole-windows", dtype, 16, 16, 80, false, whole, whole, true));
    const std::vector<int> prompts = quick ? std::vector<int>{17, 33, 64, 1, 100, 9, 3}
                                           : std::vector<int>{17, 33, 64, 100, 1, 50, 9, 120, 80, 3, 3, 3, 40, 127, 2};
    cases->push_back(packed_case("packed-prompts-causal", dtype, 16, 2, 128, true, prompts, prompts, true));
    AttentionCase sinks = packed_case("packed-prompts-sinks", dtype, 16, 2, 128, true, prompts, prompts, true);
    sinks.sinks = spread_sinks(16);
    cases->push_back(sinks);
    // Chunks over cached keys (bottom-right causal), one sequence with 30 keys and no query.
    cases->push_back(packed_case("packed-cached-causal", dtype, 14, 2, 128, true, {10, 20, 5, 30, 0, 12, 1, 9},
                                 {50, 20, 64, 90, 30, 12, 40, 9}, true));
    AttentionCase window = packed_case("packed-window-16/0", dtype, 8, 8, 128, true, {64, 37, 100, 5, 64, 64, 20},
                                       {64, 37, 100, 5, 64, 64, 90}, true);
    window.use_window = true;
    window.window_left = 16;
    window.window_right = 0;
    cases->push_back(window);
    // Right windows: the row table's last key moves right (with a left window, and alone).
    for (const int left : {16, -1}) {
        AttentionCase right = packed_case("packed-window-" + std::to_string(left) + "/8", dtype, 8, 8, 128, false,
                                          {64, 37, 100, 5, 64, 64, 20}, {64, 37, 100, 5, 64, 64, 90}, true);
        right.use_window = true;
        right.window_left = left;
        right.window_right = 8;
        cases->push_back(right);
    }
    // Non-causal rows with fewer keys than queries, and more; head dim 72 rounds up.
    cases->push_back(packed_case("packed-full-uneven", dtype, 16, 16, 72, false, {30, 5, 60, 1, 20},
                                 {20, 64, 40, 7, 1}, true));
    // Head dim 64 packs onto the smallest packed kernel at or above it (`minimal`: 96), while
    // fas_query_plan_support names the unpacked kernel (the header: PACKED PLANS).
    // Prompts of at most 64 tokens: they fit the 64-row tiles of the hd96 packed kernel too.
    const int packed_64 = smallest_head_dim("sm90_packed", dtype, 64);
    if (packed_64 > 0) {
        const std::vector<int> short_prompts{17, 33, 64, 1, 50, 9, 3, 40, 2};
        AttentionCase c =
            packed_case("packed-prompts-hd64", dtype, 16, 2, 64, true, short_prompts, short_prompts, true);
        c.expect_kernel_head_dim = packed_64;
        // The causal kernel's: a build may hold other head dims without the mask (dev libraries do).
        c.expect_query_head_dim = smallest_head_dim("sm90", dtype, 64, /*causal=*/1);
        cases->push_back(c);
    }
    // 100-token sequences fill 128-row tiles alone: packing would not pay.
    cases->push_back(packed_case("packed-not-paying", dtype, 16, 2, 128, true, {100, 100, 100, 100}, {100, 100, 100, 100},
                                 false));
}

}  // namespace gpu_test
