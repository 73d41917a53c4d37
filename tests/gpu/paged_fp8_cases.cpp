// The e4m3-cache cases of the paged group (paged.cpp runs them with the 16-bit ones): the decode
// kernel's shapes over e4m3 K and V with per-head descales, with bf16/fp16 q and with e4m3 q.
#include "paged_case.h"
#include "reference.h"

namespace gpu_test {

std::vector<PagedCase> fp8_kv_cases(fas_dtype dtype, bool quick) {
    std::vector<PagedCase> cases;
    // FP8 KV caches (e4m3, per-head descales) on the decode kernel: decode with empty and long KVs, a split,
    // speculative queries on pages of 1, chunked prefill (16-row tiles), window + softcap, the long shape.
    for (int head_dim : {64, 128, 256}) {
        if (!has_kernel("paged_e4m3kv", dtype, head_dim, true)) continue;
        std::vector<PagedCase> fp8 = {
            {"fp8kv-decode", 16, 2, head_dim, true, 16, {1, 1, 1, 1}, {0, 1, 7, 4097}},
            {"fp8kv-decode-split", 16, 2, head_dim, true, 16, {1, 1}, {quick ? 20000 : 65536, 300}, true},
            {"fp8kv-spec-gqa7", 14, 2, head_dim, true, 1, {2, 1, 1}, {300, 1, 77}},
            {"fp8kv-chunked-prefill", 8, 2, head_dim, true, 48, {100, 0, 37}, {700, 64, 37}},
            {"fp8kv-window-softcap", 16, 2, head_dim, true, 32, {1, 1}, {5000, 30}, false, 0, FAS_FAMILY_PAGED, 1000,
             30.f},
        };
        // The dense shape (3 CTAs per SM) for a plan of one wave, the short one (2) for many CTAs;
        // pages of a multiple of 8 rows: a stream shape where the plan streams (below).
        fp8.push_back({"fp8kv-decode-wave-page16", 16, 2, head_dim, true, 16, std::vector<int>(40, 1),
                       std::vector<int>(40, quick ? 1000 : 4100), false, 3});
        fp8.push_back({"fp8kv-decode-dense", 16, 2, head_dim, true, 4, std::vector<int>(40, 1),
                       std::vector<int>(40, quick ? 1000 : 4100), false, 3});
        if (!quick) {
            fp8.push_back({"fp8kv-decode-many", 16, 2, head_dim, true, 4, std::vector<int>(400, 1),
                           std::vector<int>(400, 300), false, 2});
        }
        // FP8 plans (e4m3 q too) on the same kernel: decode, a split, speculative queries on pages
        // of 1, chunked prefill, both masks, and a wave of 40 (stream or dense shape).
        for (size_t i = 0; i < 6; ++i) {
            PagedCase c = fp8[i];
            c.name = "fp8q" + c.name.substr(5);
            c.fp8_q = true;
            fp8.push_back(c);
        }
        fp8.push_back({"fp8kv-decode-rounds", 16, 2, head_dim, true, 16, std::vector<int>(67, 1),
                       std::vector<int>(67, 2500)});
        fp8.push_back({"fp8kv-decode-sinks-split", 64, 8, head_dim, true, 16, {1, 1}, {20000, 0}, true});
        fp8.back().sinks = true;
        std::vector<int> lens(300);  // 600 items, 4-5 a persistent CTA: mixed lengths, some without keys
        for (size_t i = 0; i < lens.size(); ++i) lens[i] = i % 7 == 3 ? 0 : 1 + static_cast<int>(i * 97 % 1500);
        const struct { const char* name; bool sinks, fp8_q; } items[] = {
            {"fp8kv-decode-items", false, false}, {"fp8kv-decode-items-sinks", true, false},
            {"fp8q-decode-items", false, true}};
        for (const auto& item : items) {
            fp8.push_back({item.name, 16, 2, head_dim, true, 16, std::vector<int>(lens.size(), 1), lens});
            fp8.back().sinks = item.sinks;
            fp8.back().fp8_q = item.fp8_q;
        }
        for (PagedCase& c : fp8) c.fp8_kv = true;
        cases.insert(cases.end(), fp8.begin(), fp8.end());
    }
    return cases;
}

}  // namespace gpu_test
