// The driver of test_varlen_inference, the GPU correctness test of libflash_attn_standalone
// (tests/gpu/, public header and CUDA runtime only): command line, the default case list
// (varlen inference shapes of Qwen2.5-VL-3B, LLM and vision tower, and one small case per
// compiled kernel), the order in which the concern files run, the PASS/FAIL/SKIP tally and the
// exit status: 0 all passed, 1 a case failed, 2 bad command line, 77 no usable CUDA device.
#include "gpu_test.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <sstream>

namespace gpu_test {

void report(const std::string& label, const CaseOutcome& outcome, Tally* tally) {
    std::printf("[%s] %s | %s\n", outcome.passed ? "PASS" : "FAIL", label.c_str(), outcome.detail.c_str());
    std::fflush(stdout);
    ++(outcome.passed ? tally->passed : tally->failed);
}

AttentionCase varlen_case(std::string config, fas_dtype dtype, int heads_q, int heads_kv, int head_dim, bool causal,
                          std::vector<int> seqlens) {
    AttentionCase c{std::move(config), dtype, heads_q, heads_kv, head_dim, causal, true, seqlens, seqlens};
    return c;
}

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

// ---------------------------------------------------------------------------------------------
// Command line

struct Options {
    bool run_fp16 = true;
    bool run_bf16 = true;
    bool custom = false;  // any of the shape options given: run only the custom case
    int heads_q = 16;
    int heads_kv = 2;
    int head_dim = 128;
    bool causal = true;
    std::vector<int> seqlens{1, 100, 1029};
    uint64_t seed = 20250101;
    bool quick = false;
    std::string only;  // "" = every group; else attention, paged, append or misuse
};

void print_usage(FILE* stream, const char* program) {
    std::fprintf(stream,
                 "usage: %s [--dtype fp16|bf16|all] [--quick] [--seed N] [--only attention|paged|append|misuse]\n"
                 "          [--heads-q N] [--heads-kv N] [--head-dim N] [--causal 0|1] [--seqlens a,b,c]\n"
                 "Without shape options: Qwen2.5-VL-3B LLM and vision shapes, one case per compiled kernel and\n"
                 "invalid-argument checks; --only runs one group of them. With any of --heads-q/--heads-kv/--head-dim/--causal/--seqlens: only\n"
                 "that custom varlen case (defaults 16/2/128/1/1,100,1029).\n"
                 "Exit status: 0 pass, 1 failure, 2 bad arguments, 77 no usable CUDA device.\n",
                 program);
}

bool parse_long(const char* text, long long min_value, long long max_value, long long* value) {
    if (text == nullptr || *text == '\0') return false;
    char* end = nullptr;
    errno = 0;
    const long long parsed = std::strtoll(text, &end, 10);
    if (errno != 0 || *end != '\0' || parsed < min_value || parsed > max_value) return false;
    *value = parsed;
    return true;
}

bool parse_int(const char* text, int min_value, int max_value, int* value) {
    long long parsed = 0;
    if (!parse_long(text, min_value, max_value, &parsed)) return false;
    *value = static_cast<int>(parsed);
    return true;
}

bool parse_seqlens(const std::string& text, std::vector<int>* seqlens) {
    seqlens->clear();
    std::stringstream stream(text);
    std::string item;
    while (std::getline(stream, item, ',')) {
        int length = 0;
        if (!parse_int(item.c_str(), 1, 1 << 20, &length)) return false;
        seqlens->push_back(length);
    }
    return !seqlens->empty() && text.back() != ',';
}

// Returns false (after printing why) on a bad command line.
bool parse_options(int argc, char** argv, Options* options) {
    for (int i = 1; i < argc; ++i) {
        const std::string flag = argv[i];
        if (flag == "--help" || flag == "-h") {
            print_usage(stdout, argv[0]);
            std::exit(kExitPass);
        }
        if (flag == "--quick") {
            options->quick = true;
            continue;
        }
        const char* value = i + 1 < argc ? argv[++i] : nullptr;
        if (value == nullptr) {
            std::fprintf(stderr, "error: %s needs a value\n", flag.c_str());
            return false;
        }
        bool ok = true;
        if (flag == "--only") {
            options->only = value;
            ok = options->only == "attention" || options->only == "paged" || options->only == "append" ||
                 options->only == "misuse";
        } else if (flag == "--dtype") {
            const std::string dtype = value;
            ok = dtype == "fp16" || dtype == "bf16" || dtype == "all";
            options->run_fp16 = dtype != "bf16";
            options->run_bf16 = dtype != "fp16";
        } else if (flag == "--heads-q") {
            ok = parse_int(value, 1, 1024, &options->heads_q);
            options->custom = true;
        } else if (flag == "--heads-kv") {
            ok = parse_int(value, 1, 1024, &options->heads_kv);
            options->custom = true;
        } else if (flag == "--head-dim") {
            ok = parse_int(value, 1, 1024, &options->head_dim);
            options->custom = true;
        } else if (flag == "--causal") {
            int causal = 0;
            ok = parse_int(value, 0, 1, &causal);
            options->causal = causal != 0;
            options->custom = true;
        } else if (flag == "--seqlens") {
            ok = parse_seqlens(value, &options->seqlens);
            options->custom = true;
        } else if (flag == "--seed") {
            long long seed = 0;
            ok = parse_long(value, 0, std::numeric_limits<long long>::max(), &seed);
            options->seed = static_cast<uint64_t>(seed);
        } else {
            std::fprintf(stderr, "error: unknown option %s\n", flag.c_str());
            return false;
        }
        if (!ok) {
            std::fprintf(stderr, "error: bad value '%s' for %s\n", value, flag.c_str());
            return false;
        }
    }
    if (options->custom && options->heads_q % options->heads_kv != 0) {
        std::fprintf(stderr, "error: --heads-q %d is not a multiple of --heads-kv %d\n", options->heads_q,
                     options->heads_kv);
        return false;
    }
    return true;
}

// ---------------------------------------------------------------------------------------------
// Default cases and the run

// Default case list for one dtype.
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
    // the right > 0 windows (and everything where SM90 cannot).
    if (fas_query_plan_support(dtype, 128, 1, nullptr, nullptr) == FAS_SUCCESS) {
        const struct {
            int left, right, heads_q, heads_kv;
        } windows[] = {{0, 0, 8, 8},     {1, 0, 14, 2},   {64, 0, 16, 2},  {4096, 0, 8, 8},   {0, -1, 14, 2},
                       {1, -1, 16, 2},   {64, -1, 8, 8},  {4096, -1, 14, 2}, {64, 16, 16, 2}, {-1, 8, 8, 8}};
        for (const auto& w : windows) {
            if (w.right > 0 && fas_query_support(dtype, 128, 0, nullptr) != FAS_SUCCESS) continue;  // no FA2 here
            const bool causal = w.right == 0;
            // SM90 takes right 0 or -1 where its kernel is built; right > 0 is FA2's.
            fas_family family = FAS_FAMILY_FA2;
            if (w.right > 0 || fas_query_plan_support(dtype, 128, causal, &family, nullptr) != FAS_SUCCESS) {
                family = FAS_FAMILY_FA2;
            }
            AttentionCase local = plan_case("window-" + std::to_string(w.left) + "/" + std::to_string(w.right), dtype,
                                            w.heads_q, w.heads_kv, 128, causal,
                                            quick ? std::vector<int>{1, 37, 200, 129}
                                                  : std::vector<int>{1, 37, 200, 129, 5000, 64},
                                            family);
            local.use_window = true;
            local.window_left = w.left;
            local.window_right = w.right;
            cases.push_back(local);
        }
    }
    // Logits softcap 30 and 50 (Grok, Gemma 2), alone and with a causal window, head dims 128 and
    // 80; SM90 where a softcap kernel serves it (sm90_softcap), else FA2, else skipped.
    bool sm90_softcap = false;
    for (int index = 0; index < fas_num_kernels(); ++index) {
        fas_kernel_info info;
        if (fas_get_kernel_info(index, &info) == FAS_SUCCESS && std::strcmp(info.family, "sm90_softcap") == 0 &&
            info.dtype == dtype && info.head_dim == 128) {
            sm90_softcap = true;
        }
    }
    const struct {
        float cap;
        int head_dim, left, heads_q, heads_kv;
        bool causal;
    } capped[] = {{30.f, 128, -1, 16, 2, true}, {50.f, 128, -1, 8, 8, false}, {50.f, 128, 64, 14, 2, true},
                  {30.f, 80, -1, 16, 16, false}};
    for (const auto& cap : capped) {
        if (!sm90_softcap && fas_query_support(dtype, cap.head_dim, cap.causal && cap.left < 0, nullptr) != FAS_SUCCESS) {
            continue;  // neither an SM90 softcap kernel nor FA2 in this build
        }
        AttentionCase soft = plan_case("softcap-" + std::to_string(static_cast<int>(cap.cap)), dtype, cap.heads_q,
                                       cap.heads_kv, cap.head_dim, cap.causal,
                                       quick ? std::vector<int>{1, 37, 200, 129}
                                             : std::vector<int>{1, 37, 200, 129, 1500, 64},
                                       sm90_softcap ? FAS_FAMILY_SM90 : FAS_FAMILY_FA2);
        soft.softcap = cap.cap;
        soft.use_window = cap.left >= 0;
        soft.window_left = cap.left;
        cases.push_back(soft);
    }
    add_packed_cases(dtype, quick, &cases);
    // Every compiled kernel once, GQA ratio 4, padded row strides.
    int last_paged_head_dim = 0;
    for (int index = 0; index < fas_num_kernels(); ++index) {
        fas_kernel_info info;
        if (fas_get_kernel_info(index, &info) != FAS_SUCCESS || info.out_dtype != dtype) continue;
        const std::string config = std::string("kernel-") + (info.split_kv ? "splitkv" : "plain");
        const bool fp8 = info.dtype == FAS_DTYPE_E4M3;
        if (std::strcmp(info.family, "sm90_paged") == 0) continue;  // chunked prefill over pages: paged.cpp
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
            // The same with a causal window of 64 keys and softcap 30, on the decode kernel too.
            decode.config = "plan-decode-contiguous-window-softcap";
            decode.heads_q = 8;
            decode.heads_kv = 4;
            decode.use_window = true;
            decode.window_left = 64;
            decode.window_right = 0;
            decode.softcap = 30.f;
            cases.push_back(decode);
            continue;
        }
        if (std::strcmp(info.family, "sm90") == 0) {
            // SM90 kernels serve plans only: odd lengths (1, 4097), GQA ratios 1, 4 and 8, with
            // and without padded rows. The family must be SM90 (the device check passed).
            const struct {
                int heads_q, heads_kv, row_padding;
            } shapes[] = {{8, 8, 0}, {8, 2, 8}, {16, 2, 0}};
            for (const auto& shape : shapes) {
                AttentionCase sm90 = varlen_case(fp8 ? "kernel-sm90-fp8-plan" : "kernel-sm90-plan", dtype, shape.heads_q,
                                                 shape.heads_kv, info.head_dim,
                                                 info.causal != 0,
                                                 quick ? std::vector<int>{1, 37, 200, 129}
                                                       : std::vector<int>{1, 4097, 37, 200, 129, 3, 1});
                // e4m3 rows must start 16 bytes apart: pad FP8 rows by 16 elements.
                sm90.row_padding = fp8 && shape.row_padding != 0 ? 16 : shape.row_padding;
                sm90.use_plan = true;
                sm90.plan_runs = 2;
                sm90.expect_family = FAS_FAMILY_SM90;
                sm90.fp8 = fp8;
                cases.push_back(sm90);
            }
            // Narrower head dims this kernel serves by round-up (tensor maps of the real width, TMA
            // zero-fill, column-predicated stores): GQA 1 and 7, padded rows that must stay untouched.
            for (const int narrower : {info.head_dim - 16, info.head_dim - 24}) {
                fas_family family = FAS_FAMILY_FA2;
                int served_by = 0;
                if (fp8 || narrower < 8 ||
                    fas_query_plan_support(dtype, narrower, info.causal, &family, &served_by) != FAS_SUCCESS ||
                    family != FAS_FAMILY_SM90 || served_by != info.head_dim) {
                    continue;
                }
                const bool wide_gqa = narrower == info.head_dim - 24;
                AttentionCase roundup = plan_case("kernel-sm90-roundup-plan", dtype, wide_gqa ? 14 : 16,
                                                  wide_gqa ? 2 : 16, narrower, info.causal != 0,
                                                  quick ? std::vector<int>{1, 37, 200, 129}
                                                        : std::vector<int>{64, 1, 1500, 37, 200, 129, 3},
                                                  FAS_FAMILY_SM90);
                roundup.row_padding = 8;
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
        } else {
            AttentionCase plain = varlen_case(config, dtype, 8, 2, info.head_dim, info.causal != 0, {1, 37, 200, 129});
            plain.row_padding = 8;
            cases.push_back(plain);
        }
    }
    return cases;
}

int run(const Options& options) {
    int device_count = 0;
    const cudaError_t count_error = cudaGetDeviceCount(&device_count);
    if (count_error != cudaSuccess || device_count == 0) {
        std::fprintf(stderr, "no CUDA device: %s\n",
                     count_error != cudaSuccess ? cudaGetErrorString(count_error) : "cudaGetDeviceCount returned 0");
        return kExitSkip;
    }
    int device = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    if (fas_check_device(device) != FAS_SUCCESS) {
        std::fprintf(stderr, "no usable CUDA device: %s\n", fas_get_last_error());
        return kExitSkip;
    }

    std::printf("flash_attn_standalone %s, %d kernel(s):", fas_version_string(), fas_num_kernels());
    bool has_dtype[2] = {false, false};
    for (int index = 0; index < fas_num_kernels(); ++index) {
        fas_kernel_info info;
        if (fas_get_kernel_info(index, &info) != FAS_SUCCESS) {
            std::printf("\nfas_get_kernel_info(%d) failed: %s\n", index, fas_get_last_error());
            return kExitFail;
        }
        std::printf(" %s/%s%s/hd%d/%s%s", info.family, info.dtype == FAS_DTYPE_E4M3 ? "e4m3->" : "",
                    dtype_name(info.out_dtype), info.head_dim, info.causal ? "causal" : "full",
                    info.split_kv ? "/splitkv" : "");
        has_dtype[info.out_dtype] = true;  // cases run per output dtype
    }
    std::printf("\n");

    std::vector<fas_dtype> dtypes;
    if (options.run_fp16 && has_dtype[FAS_DTYPE_FP16]) dtypes.push_back(FAS_DTYPE_FP16);
    if (options.run_bf16 && has_dtype[FAS_DTYPE_BF16]) dtypes.push_back(FAS_DTYPE_BF16);
    if (dtypes.empty()) {
        std::printf("no kernel of the requested dtype(s) is built into this library\n");
        return kExitFail;
    }

    cudaStream_t stream = nullptr;
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    Tally tally;
    uint64_t case_seed = options.seed;
    const auto group = [&](const char* name) { return options.only.empty() || options.only == name; };
    for (fas_dtype dtype : dtypes) {
        std::vector<AttentionCase> cases;
        if (options.custom) {
            cases.push_back(varlen_case("custom", dtype, options.heads_q, options.heads_kv, options.head_dim,
                                        options.causal, options.seqlens));
        } else if (group("attention")) {
            cases = default_cases(dtype, options.quick, &tally);
        }
        for (const AttentionCase& c : cases) report_attention_case(c, case_seed++, stream, &tally);
        // Fixed seeds of their own, so the attention cases above keep theirs.
        if (!options.custom && group("attention")) report_workspace_bounds_cases(dtype, stream, &tally);
        if (!options.custom && group("paged")) report_paged_cases(dtype, options.quick, stream, &tally);
        if (!options.custom && group("append")) report_append_cases(dtype, options.quick, stream, &tally);
    }
    if (!options.custom && group("misuse")) {
        report_fwd_misuse_cases(dtypes.front(), stream, &tally);
        // Plan misuse needs a plan that can be made: any kernel of head dim >= 128 for causal
        // dtypes.front() (a plan of either family).
        if (fas_query_plan_support(dtypes.front(), 128, 1, nullptr, nullptr) == FAS_SUCCESS) {
            report_plan_misuse_cases(dtypes.front(), stream, &tally);
            report_plan_churn_case(dtypes.front(), stream, &tally);
        } else {
            std::printf("[SKIP] plan misuse and release checks: no causal head-dim-128 plan can be made: %s\n",
                        fas_get_last_error());
            ++tally.skipped;
        }
    }
    CUDA_CHECK(cudaStreamDestroy(stream));
    std::printf("summary: %d passed, %d failed, %d skipped\n", tally.passed, tally.failed, tally.skipped);
    return tally.failed == 0 ? kExitPass : kExitFail;
}

}  // namespace
}  // namespace gpu_test

int main(int argc, char** argv) {
    using namespace gpu_test;
    Options options;
    if (!parse_options(argc, argv, &options)) {
        print_usage(stderr, argv[0]);
        return kExitUsage;
    }
    try {
        return run(options);
    } catch (const std::exception& error) {
        std::fprintf(stderr, "error: %s\n", error.what());
        return kExitFail;
    }
}
