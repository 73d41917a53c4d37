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
    std::string only;  // "" = every group; else attention, paged, append, merge or misuse
};

void print_usage(FILE* stream, const char* program) {
    std::fprintf(stream,
                 "usage: %s [--dtype fp16|bf16|all] [--quick] [--seed N] [--only attention|paged|append|merge|misuse]\n"
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
                 options->only == "merge" || options->only == "misuse";
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
        if (!options.custom && group("attention")) report_fwd_capture_cases(dtype, stream, &tally);
        if (!options.custom && group("paged")) report_paged_cases(dtype, options.quick, stream, &tally);
        if (!options.custom && group("append")) report_append_cases(dtype, options.quick, stream, &tally);
        if (!options.custom && group("merge")) report_merge_cases(dtype, options.quick, stream, &tally);
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
