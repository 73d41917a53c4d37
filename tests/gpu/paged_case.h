// One paged test case (paged.cpp runs it: scattered pages, the contiguous reference) and the
// e4m3-cache cases (paged_fp8_cases.cpp), apart from the 16-bit ones so that each list stays one
// concern.
#ifndef GPU_TEST_PAGED_CASE_H
#define GPU_TEST_PAGED_CASE_H

#include <string>
#include <vector>

#include "flash_attn_standalone.h"

namespace gpu_test {

struct PagedCase {
    std::string name;
    int heads_q, heads_kv, head_dim;
    bool causal;
    int page_size;
    std::vector<int> seqlens_q, seqlens_k;
    bool expect_split = false;
    int expect_ctas_per_sm = 0;  // the decode kernel's shape (fas_plan_info.ctas_per_sm); 0: either
    int expect_family = -1;      // -1: SM90 for more than 8 queries where its paged kernel is built
    int window_left = -1;        // >= 0: a causal left window (use_window, right 0)
    float softcap = 0.f;
    int expect_decode_sequences = 0;  // > 0: a mixed plan whose decode part has this many sequences
    bool fp8_kv = false;  // e4m3 caches with per-head descales (FP8 KV CACHE); q and out stay dtype
    // An FP8 plan over the e4m3 caches: q e4m3 with per-head descales, out dtype (the kernel
    // rounds q * descale to fp16, so the reference reads q so rounded); kv_dtype left 0.
    bool fp8_q = false;
    int expect_tile_rows = 0;  // > 0: fas_plan_info.query_tile_rows
    bool sinks = false;        // use_sinks, with a random sink logit in [-2, 8] per query head
    int window_right = 0;      // > 0 with causal false: a right window (use_window; left window_left)
};

// FP8 KV caches (e4m3, per-head descales) and FP8 plans (e4m3 q) over them, every head dim whose
// e4m3-KV decode kernel is built.
std::vector<PagedCase> fp8_kv_cases(fas_dtype dtype, bool quick);

}  // namespace gpu_test

#endif  // GPU_TEST_PAGED_CASE_H
