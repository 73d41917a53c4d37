// Paged plans and runs given bad arguments (paged.cpp runs them where a head dim 128 paged kernel
// is built): each refused with FAS_ERROR_INVALID_ARGUMENT, a message and no CUDA error left
// pending; a valid FP8 KV plan (16-bit or e4m3 q) in a build without e4m3-KV kernels:
// FAS_ERROR_NOT_BUILT.
#include "reference.h"

#include <cstring>

namespace gpu_test {
namespace {

// Bad paged arguments: a valid paged plan (2 sequences of 5 and 40 keys, pages of 16, 8 pages,
// heads 2/1, head dim 128) broken one way, refused with FAS_ERROR_INVALID_ARGUMENT, a message
// and no CUDA error left pending.
const char* const kPagedMisuse[] = {
    "paged plan with page_size 0",
    "paged plan with num_pages 0",
    "paged plan whose kv_lengths need more pages than the cache has",
    "paged plan with a page id out of range (page_indices_host)",
    "paged plan with cu_seqlens_k set too",
    "paged plan with kv_lengths NULL",
    "paged plan with a negative kv length",
    "plan with kv_layout 7",
    "paged run with page_indices NULL",
    "paged run with out inside the k cache",
    "FP8 KV plan (kv_dtype e4m3) over a varlen KV layout",
    "FP8 KV plan with k_row_stride 264 (not a multiple of 16)",
    "FP8 KV plan with kv_dtype 9",
    "FP8 plan (e4m3 q) over a paged cache with kv_dtype bf16",
    "FP8 KV run without k_descale",
    "FP8 KV run without v_descale",
    "FP8 plan (e4m3 q) run with a q_descale not 4-byte aligned",
};
constexpr int kFirstFp8Misuse = 10;
constexpr int kFp8RunMisuse = 14;  // from here on the cases need an e4m3-KV kernel to plan

CaseOutcome run_paged_misuse(int which, fas_dtype dtype, cudaStream_t stream) {
    DeviceBuffer q_dev(1 << 16), k_dev(1 << 20), v_dev(1 << 20), out_dev(1 << 16), ids_dev(64);
    const int32_t cu_q[3] = {0, 1, 2}, cu_k[3] = {0, 5, 45};
    int32_t lengths[2] = {5, which == 2 ? 200 : which == 6 ? -1 : 40};
    const int32_t ids[4] = {3, 0, 7, which == 3 ? 8 : 5};
    fas_plan_args args = paged_plan_args(dtype, cu_q, which == 5 ? nullptr : lengths, 2, 2, 1, 128, true,
                                         which == 0 ? 0 : 16, which == 1 ? 0 : 8, ids);
    args.cu_seqlens_k = which == 4 ? cu_k : nullptr;
    if (which == 7) args.kv_layout = static_cast<fas_kv_layout>(7);
    if (which >= kFirstFp8Misuse) {
        args.kv_dtype = which == 12 ? static_cast<fas_dtype>(9) : FAS_DTYPE_E4M3;
        if (which == 10) {
            args.kv_layout = FAS_KV_VARLEN;
            args.kv_lengths = nullptr;
            args.cu_seqlens_k = cu_k;
        }
        if (which == 11) args.k_row_stride = 264;
        if (which == 13 || which == 16) {  // e4m3 q, out dtype
            args.dtype = FAS_DTYPE_E4M3;
            args.out_dtype = dtype;
            args.kv_dtype = which == 13 ? FAS_DTYPE_BF16 : FAS_DTYPE_E4M3;
        }
    }
    fas_plan* plan = nullptr;
    fas_status status = fas_plan_create(&args, &plan);
    if ((which >= 8 && which < kFirstFp8Misuse) || which >= kFp8RunMisuse) {
        if (status != FAS_SUCCESS) return {false, std::string("setup: fas_plan_create failed: ") + fas_get_last_error()};
        upload(ids_dev.as<void>(), ids, sizeof ids);
        fas_plan_run_args run =
            plan_run_args(q_dev.as<void>(), k_dev.as<void>(), v_dev.as<void>(),
                          which == 9 ? static_cast<void*>(k_dev.as<char>() + 4096) : out_dev.as<void>(), stream);
        run.page_indices = which == 8 ? nullptr : ids_dev.as<int32_t>();
        run.k_descale = which == 14 ? nullptr : reinterpret_cast<const float*>(out_dev.as<char>() + 8192);
        run.v_descale = which == 15 ? nullptr : reinterpret_cast<const float*>(out_dev.as<char>() + 8192);
        if (which == 16) run.q_descale = reinterpret_cast<const float*>(out_dev.as<char>() + 8194);
        status = fas_plan_run(plan, &run);
    }
    const std::string message = fas_get_last_error();
    if (plan != nullptr) fas_plan_destroy(plan);
    return refusal_outcome(status, message, false);
}

// A valid FP8 KV plan (16-bit or, fp8_q, e4m3 q) in a build without e4m3-KV kernels:
// FAS_ERROR_NOT_BUILT with a message.
CaseOutcome run_fp8_not_built(fas_dtype dtype, bool fp8_q) {
    const int32_t cu_q[2] = {0, 1}, lengths[1] = {40}, ids[3] = {0, 1, 2};
    fas_plan_args args =
        paged_plan_args(fp8_q ? FAS_DTYPE_E4M3 : dtype, cu_q, lengths, 1, 2, 1, 128, true, 16, 3, ids);
    args.out_dtype = dtype;
    args.kv_dtype = FAS_DTYPE_E4M3;
    fas_plan* plan = nullptr;
    const fas_status status = fas_plan_create(&args, &plan);
    const std::string message = status == FAS_SUCCESS ? "" : fas_get_last_error();
    if (plan != nullptr) fas_plan_destroy(plan);
    return {status == FAS_ERROR_NOT_BUILT && message.find("e4m3") != std::string::npos,
            "status=" + std::to_string(static_cast<int>(status)) + " message=\"" + message + "\""};
}

// Sinks (SINKS in the plan header) misused: 0, a plan made with use_sinks run without sinks; 1, a
// plan made without them run with sinks (both FAS_ERROR_INVALID_ARGUMENT); 2, use_sinks on the
// 64-row paged tiles (8 queries x GQA 4 on pages of 4) and 3, on a plan only FA2 serves
// (disable_sm90, prefill-shaped): FAS_ERROR_NOT_BUILT naming the sinks.
const char* const kSinksMisuse[] = {
    "paged run without sinks of a plan made with use_sinks",
    "paged run with sinks of a plan made without use_sinks",
    "paged plan with use_sinks on the 64-row tiles",
    "varlen plan with use_sinks that only FA2 serves",
};

CaseOutcome run_sinks_misuse(int which, fas_dtype dtype, cudaStream_t stream) {
    DeviceBuffer q_dev(1 << 16), k_dev(1 << 20), v_dev(1 << 20), out_dev(1 << 16), ids_dev(64), sinks_dev(256);
    const int32_t cu_q[3] = {0, 1, 2}, cu_q8[2] = {0, 8}, cu_k[2] = {0, 40}, lengths[2] = {5, 40}, ids[4] = {3, 0, 7, 5};
    fas_plan_args args = which == 2 ? paged_plan_args(dtype, cu_q8, lengths + 1, 1, 8, 2, 128, true, 4, 16, nullptr)
                                    : paged_plan_args(dtype, cu_q, lengths, 2, 2, 1, 128, true, 16, 8, ids);
    if (which == 3) args = varlen_plan_args(dtype, cu_q8, cu_k, 1, 2, 1, 128, true);
    args.use_sinks = which == 1 ? 0 : 1;
    args.disable_sm90 = which == 3 ? 1 : 0;
    fas_plan* plan = nullptr;
    fas_status status = fas_plan_create(&args, &plan);
    if (which >= 2) {
        const std::string message = status == FAS_SUCCESS ? "" : fas_get_last_error();
        if (plan != nullptr) fas_plan_destroy(plan);
        return {status == FAS_ERROR_NOT_BUILT && message.find("sinks") != std::string::npos &&
                    cudaPeekAtLastError() == cudaSuccess,
                "status=" + std::to_string(static_cast<int>(status)) + " message=\"" + message + "\""};
    }
    if (status != FAS_SUCCESS) return {false, std::string("setup: fas_plan_create failed: ") + fas_get_last_error()};
    upload(ids_dev.as<void>(), ids, sizeof ids);
    fas_plan_run_args run = plan_run_args(q_dev.as<void>(), k_dev.as<void>(), v_dev.as<void>(), out_dev.as<void>(), stream);
    run.page_indices = ids_dev.as<int32_t>();
    run.sinks = which == 0 ? nullptr : sinks_dev.as<float>();
    status = fas_plan_run(plan, &run);
    const std::string message = fas_get_last_error();
    fas_plan_destroy(plan);
    return refusal_outcome(status, message, false);
}

}  // namespace

void report_paged_misuse_cases(fas_dtype dtype, cudaStream_t stream, Tally* tally) {
    // Run misuse needs a plan: of the 16-bit hd128 decode kernel, or of the e4m3-KV one (a build
    // may hold either, e.g. hopper-check only the latter).
    const bool paged_built = has_kernel("paged", dtype, 128, true);
    const bool fp8_built = has_kernel("paged_e4m3kv", dtype, 128, true);
    for (int which = 0; which < static_cast<int>(sizeof kPagedMisuse / sizeof kPagedMisuse[0]); ++which) {
        if (which >= 8 && which < kFirstFp8Misuse && !paged_built) continue;
        if (which >= kFp8RunMisuse && !fp8_built) continue;
        report(kPagedMisuse[which], guarded([&] { return run_paged_misuse(which, dtype, stream); }), tally);
    }
    for (int which = 0; which < 4 && paged_built; ++which) {
        if (which == 3 && fas_query_support(dtype, 128, 1, nullptr) != FAS_SUCCESS) continue;  // no FA2 kernel here
        report(kSinksMisuse[which], guarded([&] { return run_sinks_misuse(which, dtype, stream); }), tally);
    }
    if (!fp8_built) {  // a build without the e4m3-KV kernels says so
        report("FP8 KV plan where no e4m3-KV kernel is built", guarded([&] { return run_fp8_not_built(dtype, false); }),
               tally);
        report("FP8 plan (e4m3 q) over a paged cache where no e4m3-KV kernel is built",
               guarded([&] { return run_fp8_not_built(dtype, true); }), tally);
    }
}

}  // namespace gpu_test
