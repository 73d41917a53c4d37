// The default case list of test_varlen_inference (driver.cpp runs it): the varlen inference
// shapes of Qwen2.5-VL-3B (language model and vision tower), masks, softcaps, and one small case
// per compiled kernel, for one dtype.
#include "gpu_test.h"

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

namespace gpu_test {
namespace {

// A varlen case through the plan API, run twice (the runs must agree bit for bit), on `family`.
AttentionCase plan_case(std::string config, fas_dtype dtype, int heads_q, int heads_kv, int head_dim, bool causal,
                        std::vector<int> seqlens, fas_family family) {
    AttentionCase c = varlen_case(std::move(config), dtype, heads_q, heads_kv, head_dim, causal, std::move(seqlens));
    c.use_plan = true;
    c.plan_runs = 2;
    c.expect_family = family;
    return c;
}

}  // namespace

std::vector<AttentionCase> default_cases(fas_dtype dtype, bool quick, Tally* tally) {
    std::vector<AttentionCase> cases;
    // Qwen2.5-VL-3B language model: 16 query heads, 2 KV heads, head dim 128, causal prefill.
    const std::vector<std::vector<int>> llm_batches =
        quick ? std::vector<std::vector<int>>{{1, 17, 129, 1029}}
              : std::vector<std::vector<int>>{{1, 17, 129, 1029, 333, 64}, {1500, 2, 999, 255, 1, 700},
                                              {77, 1, 1030, 511, 383, 1}};
    if (fas_query_support(dtype, 128, 1, nullptr) == FAS_SUCCESS) {
        for (const std::vector<int>& seqlens : llm_batches) {
            cases.push_back(varlen_case("qwen2.5-vl-3b-llm", dtype, 16, 2, 128, true, seqlens));
        }
    } else {  // a build without FA2 kernels (e.g. hopper-check): fas_fwd cannot serve it
        std::printf("[SKIP] qwen2.5-vl-3b-llm      %s hdim=128 (fas_fwd): %s\n", dtype_name(dtype), fas_get_last_error());
        ++tally->skipped;
    }
    // Qwen2.5-VL vision tower: 16 heads, head dim 80, bidirectional attention over windows
    // (64 patches) and whole images; served by a larger kernel head dim where 80 is not built.
    if (fas_query_support(dtype, 80, 0, nullptr) == FAS_SUCCESS) {
        const std::vector<int> seqlens = quick ? std::vector<int>{64, 64, 3, 200}
                                               : std::vector<int>{64, 64, 64, 64, 576, 1036, 3};
        AttentionCase vision = varlen_case("qwen2.5-vl-vision", dtype, 16, 16, 80, false, seqlens);
        vision.pass_workspace = false;
        cases.push_back(vision);
    } else {
        std::printf("[SKIP] qwen2.5-vl-vision     %s hdim=80: %s\n", dtype_name(dtype), fas_get_last_error());
        ++tally->skipped;
    }
    // The vision tower through the plan API where an SM90 kernel serves head dim 80 (round-up):
    // windows of 64 patches and whole images.
    fas_family vision_family = FAS_FAMILY_FA2;
    if (fas_query_plan_support(dtype, 80, 0, &vision_family, nullptr) == FAS_SUCCESS &&
        vision_family == FAS_FAMILY_SM90) {
        cases.push_back(plan_case("qwen2.5-vl-vision-plan", dtype, 16, 16, 80, false,
                                  quick ? std::vector<int>{64, 64, 3, 200}
                                        : std::vector<int>{64, 64, 64, 64, 576, 1296, 3},
                                  FAS_FAMILY_SM90));
    }
    // The LLM config through the plan API when an SM90 kernel serves it: one plan, several runs
    // that must agree bit for bit.
    fas_family llm_family = FAS_FAMILY_FA2;
    if (fas_query_plan_support(dtype, 128, 1, &llm_family, nullptr) == FAS_SUCCESS && llm_family == FAS_FAMILY_SM90) {
        AttentionCase llm = varlen_case("qwen2.5-vl-3b-llm-plan", dtype, 16, 2, 128, true,
                                        quick ? std::vector<int>{1, 17, 129, 1029}
                                              : std::vector<int>{1500, 2, 999, 255, 1, 700, 4097});
        llm.use_plan = true;
        llm.plan_runs = quick ? 2 : 4;
        llm.expect_family = FAS_FAMILY_SM90;
        cases.push_back(llm);
    }
    // Local windows through plans (FlashAttention's window_size, bottom-right aligned): widths 0, 1,
    // 64 and 4096 on sequences shorter and longer than the window, causal (right 0) and not
    // (right -1), GQA 1, 7 and 8; SM90 serves them where its head dim 128 kernel is built, FA2
    // everything where SM90 cannot. Right windows (> 0) run on SM90's causal kernel, its diagonal
    // moved right: 1, 8 and 16 keys (within a key tile), 130 and 150 (past one; 200 queries, so
    // some rows are limited), alone or with a left window; one that reaches every row's last key
    // (300 over at most 200 queries) is no limit, the non-causal kernel's.
    if (fas_query_plan_support(dtype, 128, 1, nullptr, nullptr) == FAS_SUCCESS) {
        const struct {
            int left, right, heads_q, heads_kv;
        } windows[] = {{0, 0, 8, 8},     {1, 0, 14, 2},   {64, 0, 16, 2},   {4096, 0, 8, 8},   {0, -1, 14, 2},
                       {1, -1, 16, 2},   {64, -1, 8, 8},  {4096, -1, 14, 2}, {64, 16, 16, 2},  {-1, 8, 8, 8},
                       {0, 1, 14, 2},    {64, 150, 16, 2}, {-1, 130, 8, 8},  {300, 130, 16, 2}, {-1, 300, 14, 2}};
        const std::vector<int> lengths = quick ? std::vector<int>{1, 37, 200, 129}
                                               : std::vector<int>{1, 37, 200, 129, 5000, 64};
        const int max_length = *std::max_element(lengths.begin(), lengths.end());
        for (const auto& w : windows) {
            const bool causal = w.right == 0;
            // The kernel that serves it: the causal one for right >= 0 windows that limit some row.
            const bool causal_kernel = w.right >= 0 && w.right < max_length - 1;
            fas_family family = FAS_FAMILY_FA2;
            if (fas_query_plan_support(dtype, 128, causal_kernel, &family, nullptr) != FAS_SUCCESS) {
                family = FAS_FAMILY_FA2;
                if (w.right > 0 && fas_query_support(dtype, 128, 0, nullptr) != FAS_SUCCESS) continue;  // neither
            }
            AttentionCase local = plan_case("window-" + std::to_string(w.left) + "/" + std::to_string(w.right), dtype,
                                            w.heads_q, w.heads_kv, 128, causal, lengths, family);
            local.use_window = true;
            local.window_left = w.left;
            local.window_right = w.right;
            cases.push_back(local);
        }
    }
    // Logits softcap 30 and 50 (Grok, Gemma 2), alone and with a left window (causal and not),
    // head dims 128, 80 and 256 (Gemma 2's); SM90 where a softcap kernel serves the head dim
    // (sm90_softcap: built at it or above it), else FA2, else skipped. Lengths of one to three
    // 128-key tiles (37, 200, 300). Caps 2 and 4 put scores (about N(0, 1) here) past the cap, where
    // tanh saturates (at 30 and 50 random scores stay on its linear part).
    const auto sm90_softcap_serves = [dtype](int head_dim) {
        for (int index = 0; index < fas_num_kernels(); ++index) {
            fas_kernel_info info;
            if (fas_get_kernel_info(index, &info) == FAS_SUCCESS && std::strcmp(info.family, "sm90_softcap") == 0 &&
                info.dtype == dtype && info.head_dim >= head_dim) {
                return true;
            }
        }
        return false;
    };
    const struct {
        float cap;
        int head_dim, left, heads_q, heads_kv;
        bool causal;
    } capped[] = {{30.f, 128, -1, 16, 2, true}, {50.f, 128, -1, 8, 8, false}, {50.f, 128, 64, 14, 2, true},
                  {50.f, 128, 64, 8, 8, false}, {30.f, 80, -1, 16, 16, false}, {50.f, 256, -1, 8, 4, true},
                  {50.f, 256, 300, 8, 4, true}, {2.f, 128, -1, 8, 8, false}, {4.f, 128, -1, 8, 8, false}};
    for (const auto& cap : capped) {
        const bool sm90_softcap = sm90_softcap_serves(cap.head_dim);
        if (!sm90_softcap && fas_query_support(dtype, cap.head_dim, cap.causal && cap.left < 0, nullptr) != FAS_SUCCESS) {
            continue;  // neither an SM90 softcap kernel nor FA2 in this build
        }
        AttentionCase soft = plan_case("softcap-" + std::to_string(static_cast<int>(cap.cap)), dtype, cap.heads_q,
                                       cap.heads_kv, cap.head_dim, cap.causal,
                                       quick ? std::vector<int>{1, 37, 200, 129, 300}
                                             : std::vector<int>{1, 37, 200, 129, 300, 1500, 64},
                                       sm90_softcap ? FAS_FAMILY_SM90 : FAS_FAMILY_FA2);
        soft.softcap = cap.cap;
        soft.use_window = cap.left >= 0;
        soft.window_left = cap.left;
        cases.push_back(soft);
    }
    // A right window on the causal softcap kernel (its diagonal moved right, as the plain kernels').
    if (has_kernel("sm90_softcap", dtype, 128, true)) {
        AttentionCase soft = plan_case("softcap-50-window-64/100", dtype, 16, 2, 128, false,
                                       quick ? std::vector<int>{1, 37, 200, 129, 300}
                                             : std::vector<int>{1, 37, 200, 129, 300, 1500, 64},
                                       FAS_FAMILY_SM90);
        soft.softcap = 50.f;
        soft.use_window = true;
        soft.window_left = 64;
        soft.window_right = 100;
        cases.push_back(soft);
    }
    // Sinks (gpt-oss: head dim 64, GQA 64/8, layers alternating a causal window of 128 keys with
    // full causal attention) on the SM90 kernels of head dims 64 and 128 where built.
    for (int head_dim : {64, 128}) {
        fas_family family = FAS_FAMILY_FA2;
        if (fas_query_plan_support(dtype, head_dim, 1, &family, nullptr) != FAS_SUCCESS || family != FAS_FAMILY_SM90) {
            continue;
        }
        for (int left : {128, -1}) {
            AttentionCase sinks = plan_case("sinks-hd" + std::to_string(head_dim) + (left < 0 ? "-causal" : "-window128"),
                                            dtype, 64, 8, head_dim, true,
                                            quick ? std::vector<int>{1, 37, 300, 129}
                                                  : std::vector<int>{1, 37, 300, 129, 2000, 64},
                                            FAS_FAMILY_SM90);
            sinks.sinks = spread_sinks(64);
            sinks.use_window = left >= 0;
            sinks.window_left = left;
            sinks.window_right = 0;
            cases.push_back(sinks);
        }
    }
    add_packed_cases(dtype, quick, &cases);
    // Every compiled kernel once, GQA ratio 4, padded row strides.
    int last_paged_head_dim = 0;
    for (int index = 0; index < fas_num_kernels(); ++index) {
        fas_kernel_info info;
        if (fas_get_kernel_info(index, &info) != FAS_SUCCESS || info.out_dtype != dtype) continue;
        const std::string config = std::string("kernel-") + (info.split_kv ? "splitkv" : "plain");
        const bool fp8 = info.dtype == FAS_DTYPE_E4M3;
        // Chunked prefill over pages, with or without a softcap: paged.cpp.
        if (std::strcmp(info.family, "sm90_paged") == 0 || std::strcmp(info.family, "sm90_paged_softcap") == 0) continue;
        if (std::strcmp(info.family, "sm90_softcap") == 0) continue;  // the softcap cases above
        if (std::strcmp(info.family, "sm90_packed") == 0) continue;   // packed.cpp
        if (std::strcmp(info.family, "paged") == 0) {
            // Paged-KV plans: paged.cpp. Here the contiguous (varlen) KV of a decode-shaped plan,
            // which the plan describes as pages itself; once per head dim (the 16-row kernel).
            if (info.causal == 0 || info.head_dim == last_paged_head_dim) continue;
            last_paged_head_dim = info.head_dim;
            AttentionCase decode{"plan-decode-contiguous", dtype, 16, 2, info.head_dim, true, true,
                                 {1, 1, 3, 1, 8}, {1, 4097, 77, 0, 300}};
            decode.use_plan = true;
            decode.plan_runs = 2;
            decode.expect_family = FAS_FAMILY_PAGED;
            cases.push_back(decode);
            // fas_fwd's decode-shaped batch requests run there too (a plan made in the call): one
            // query with the LSE (split keys, folded), 4 queries without it and with it (reordered
            // from the plan's token-major layout).
            AttentionCase fwd{"fwd-decode-paged", dtype, 16, 2, info.head_dim, true, false, {1, 1, 1}, {4097, 4097, 4097}};
            cases.push_back(fwd);
            AttentionCase fwd_spec{"fwd-decode-paged-4q", dtype, 16, 2, info.head_dim, true, false, {4, 4}, {300, 300}};
            fwd_spec.expect_forward_plan = true;
            cases.push_back(fwd_spec);
            fwd_spec.config = "fwd-decode-paged-4q-lse";
            fwd_spec.seqlens_k = {5000, 5000};
            fwd_spec.forward_plan_lse = true;
            cases.push_back(fwd_spec);
            // 4 queries x GQA 8: 32-row tiles of the decode kernel up to head dim 128.
            AttentionCase pair = decode;
            pair.config = "plan-decode-contiguous-pair";
            pair.seqlens_q = {1, 4, 3, 1};
            pair.seqlens_k = {1, 4097, 77, 300};
            cases.push_back(pair);
            // The same with a causal window of 64 keys and softcap 30, on the decode kernel too.
            decode.config = "plan-decode-contiguous-window-softcap";
            decode.heads_q = 8;
            decode.heads_kv = 4;
            decode.use_window = true;
            decode.window_left = 64;
            decode.window_right = 0;
            decode.softcap = 30.f;
            cases.push_back(decode);
            // Sinks at gpt-oss's GQA 64/8 (up to 2 queries: 16 rows).
            decode.config = "plan-decode-contiguous-sinks";
            decode.heads_q = 64;
            decode.heads_kv = 8;
            decode.seqlens_q = {1, 1, 2, 1, 2};
            decode.use_window = false;
            decode.softcap = 0.f;
            decode.sinks = spread_sinks(64);
            cases.push_back(decode);
            continue;
        }
        const bool fp8_window = std::strcmp(info.family, "sm90_fp8_window") == 0;
        if (fp8_window || std::strcmp(info.family, "sm90_fp8_softcap") == 0) {
            // The FP8 kernels with the window template, over one to four key tiles and a long
            // sequence, right 0 on the causal kernel and -1 on the other. Windows: left widths 0,
            // 64 and 300. Softcap: 50 alone (Gemma 2's global layers) and 30 with left windows of 0
            // and 300 keys (its local ones are 4096).
            for (const int left : fp8_window ? std::vector<int>{0, 64, 300} : std::vector<int>{-1, 0, 300}) {
                const std::string name = fp8_window ? "kernel-sm90-fp8-window-" + std::to_string(left)
                                         : left < 0 ? std::string("kernel-sm90-fp8-softcap")
                                                    : "kernel-sm90-fp8-softcap-window-" + std::to_string(left);
                AttentionCase c = plan_case(name, dtype, 16, 2, info.head_dim, info.causal != 0, {1, 37, 200, 500, 2000},
                                            FAS_FAMILY_SM90);
                c.fp8 = true;
                c.softcap = fp8_window ? 0.f : left < 0 ? 50.f : 30.f;
                c.use_window = left >= 0;
                c.window_left = left;
                c.window_right = info.causal ? 0 : -1;
                cases.push_back(c);
                if (info.causal && left > 0) {  // and a right window of 100 keys on the same kernel
                    c.config += "-right-100";
                    c.causal = false;
                    c.window_right = 100;
                    cases.push_back(c);
                }
            }
            continue;
        }
        if (std::strcmp(info.family, "sm90") == 0) {
            // SM90 kernels serve plans only: odd lengths (1, 4097), GQA ratios 1, 4 and 8, with
            // and without padded rows. The family must be SM90 (the device check passed). Lengths of
            // one to four 128-key tiles (37, 200, 300, 500): a consumer loop's one-tile path, its
            // causal diagonal steps and its last step on either of two alternating register sets.
            const struct {
                int heads_q, heads_kv, row_padding;
            } shapes[] = {{8, 8, 0}, {8, 2, 8}, {16, 2, 0}};
            for (const auto& shape : shapes) {
                AttentionCase sm90 = varlen_case(fp8 ? "kernel-sm90-fp8-plan" : "kernel-sm90-plan", dtype, shape.heads_q,
                                                 shape.heads_kv, info.head_dim,
                                                 info.causal != 0,
                                                 quick ? std::vector<int>{1, 37, 200, 129, 300, 500}
                                                       : std::vector<int>{1, 4097, 37, 200, 129, 300, 3, 1});
                // e4m3 rows must start 16 bytes apart: pad FP8 rows by 16 elements.
                sm90.row_padding = fp8 && shape.row_padding != 0 ? 16 : shape.row_padding;
                sm90.use_plan = true;
                sm90.plan_runs = 2;
                sm90.expect_family = FAS_FAMILY_SM90;
                sm90.fp8 = fp8;
                cases.push_back(sm90);
            }
            if (fp8 && info.causal) {
                // A right window alone on the plain FP8 causal kernel (its diagonal moved right).
                AttentionCase right = plan_case("kernel-sm90-fp8-right-100", dtype, 16, 2, info.head_dim, false,
                                                {1, 37, 200, 129, 300, 500}, FAS_FAMILY_SM90);
                right.fp8 = true;
                right.use_window = true;
                right.window_left = -1;
                right.window_right = 100;
                cases.push_back(right);
            }
            if (!fp8) {
                // fas_fwd's batch-layout prefill requests run on this kernel too, through a plan
                // made in the call, the LSE reordered from the plan's token-major layout (the
                // library allocates that scratch in every other case).
                AttentionCase fwd{"fwd-prefill-plan", dtype, 16, 2, info.head_dim, info.causal != 0, false,
                                  {300, 300, 300}, {300, 300, 300}};
                if (!fwd.causal) fwd.seqlens_k = {333, 333, 333};
                fwd.expect_forward_plan = true;
                fwd.forward_plan_lse = true;
                fwd.pass_workspace = cases.size() % 2 == 0;
                cases.push_back(fwd);
                // Few query tiles over long keys (32 of them on 132 SMs): fas_fwd splits the keys
                // into chunks of uneven length, the last one causal, and merges the partial results
                // (api/fwd_split.h); with the LSE in the caller's workspace, then without it in the
                // library's scratch.
                // Keys enough for the split to take the call from FA2's split-KV kernel too (in
                // builds that have it): 2^32 multiply-adds (the header's rule), 9000 at least.
                const int keys = key_split_keys(2, 100, 16, info.head_dim);
                AttentionCase few{"fwd-key-split", dtype, 16, 2, info.head_dim, info.causal != 0, false,
                                  {100, 100}, {keys, keys}};
                if (!few.causal) few.seqlens_k = {keys - 1, keys - 1};
                few.expect_key_split = true;
                few.same_precision_chunks = few.causal ? 5 : 4;  // the split on a 132-SM card
                few.forward_plan_lse = true;
                cases.push_back(few);
                few.config = "fwd-key-split-no-lse";
                few.forward_plan_lse = false;
                few.pass_workspace = false;
                cases.push_back(few);
            }
            // Narrower head dims this kernel serves by round-up (tensor maps of the real width, TMA
            // zero-fill, column-predicated stores): GQA 1 and 7, padded rows that must stay untouched.
            // FP8 (kernels up to head dim 192): multiples of 16, e.g. 96 on 128.
            const int steps[] = {16, fp8 ? 32 : 24};
            for (const int step : steps) {
                const int narrower = info.head_dim - step;
                fas_family family = FAS_FAMILY_FA2;
                int served_by = 0;
                if (narrower < 8 ||
                    fas_query_plan_support(fp8 ? FAS_DTYPE_E4M3 : dtype, narrower, info.causal, &family,
                                           &served_by) != FAS_SUCCESS ||
                    family != FAS_FAMILY_SM90 || served_by != info.head_dim) {
                    continue;
                }
                const bool wide_gqa = step != 16;
                AttentionCase roundup = plan_case(fp8 ? "kernel-sm90-fp8-roundup-plan" : "kernel-sm90-roundup-plan",
                                                  dtype, wide_gqa ? 14 : 16, wide_gqa ? 2 : 16, narrower,
                                                  info.causal != 0,
                                                  quick ? std::vector<int>{1, 37, 200, 129}
                                                        : std::vector<int>{64, 1, 1500, 37, 200, 129, 3},
                                                  FAS_FAMILY_SM90);
                roundup.fp8 = fp8;
                roundup.row_padding = fp8 ? 16 : 8;  // e4m3 rows start 16 bytes apart
                roundup.expect_kernel_head_dim = info.head_dim;
                cases.push_back(roundup);
            }
            // Thousands of short sequences: more query tiles per head (5000) than the 4096 up to
            // which FlashInfer's own planner used the per-head schedule.
            if (!quick) {
                // 9-11 queries each: at most 8 would make it a decode-shaped plan (paged family).
                std::vector<int> many(5000);
                for (size_t i = 0; i < many.size(); ++i) many[i] = 9 + static_cast<int>(i % 3);
                AttentionCase tiny = varlen_case(fp8 ? "kernel-sm90-fp8-many-seqs" : "kernel-sm90-many-seqs", dtype, 4,
                                                 2, info.head_dim, info.causal != 0, many);
                tiny.use_plan = true;
                tiny.plan_runs = 2;
                tiny.expect_family = FAS_FAMILY_SM90;
                tiny.fp8 = fp8;
                cases.push_back(tiny);
            }
            // The same layout forced onto FA2 where FA2 serves it: both families through plans.
            if (!fp8 && fas_query_support(dtype, info.head_dim, info.causal, nullptr) == FAS_SUCCESS) {
                AttentionCase fa2 = varlen_case("plan-fa2-fallback", dtype, 8, 2, info.head_dim, info.causal != 0,
                                                {1, 37, 200, 129});
                fa2.use_plan = true;
                fa2.disable_sm90 = true;
                fa2.expect_family = FAS_FAMILY_FA2;
                fa2.plan_runs = 2;
                cases.push_back(fa2);
            }
            continue;
        }
        if (info.split_kv) {
            // Batch layout, a decode-like short query and a long key range: the split heuristic
            // divides the keys among CTAs. Half of them let the library allocate the scratch.
            const int seqlen_q = 1 + index % 4;
            AttentionCase split{config, dtype, 8, 2, info.head_dim, info.causal != 0, false,
                                std::vector<int>(2, seqlen_q), std::vector<int>(2, 1536)};
            split.row_padding = 8;
            split.expect_split_kv = true;
            split.pass_workspace = index % 2 == 0;
            cases.push_back(split);
            // 16 queries a sequence, out contiguous: an SM90 kernel would serve it, but FA2 splits
            // the keys and is faster on so few query tiles, so fas_fwd keeps it there.
            split.config = "fwd-split-over-plan";
            split.seqlens_q = std::vector<int>(2, 16);
            split.row_padding = 0;
            cases.push_back(split);
        } else {
            AttentionCase plain = varlen_case(config, dtype, 8, 2, info.head_dim, info.causal != 0, {1, 37, 200, 129});
            plain.row_padding = 8;
            cases.push_back(plain);
        }
    }
    return cases;
}

}  // namespace gpu_test
