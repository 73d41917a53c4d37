// Misuse: invalid arguments to fas_fwd, fas_plan_create and fas_plan_run must be refused with
// FAS_ERROR_INVALID_ARGUMENT and a message, launching nothing and leaving no CUDA error behind;
// among them an out that shares bytes with q, k or v. The other side of that rule is here too:
// tensors carved from one buffer without sharing bytes with out must be accepted and computed
// correctly (rule of reference.h).
#include "reference.h"

#include <cmath>
#include <cstdio>
#include <cstring>

namespace gpu_test {

CaseOutcome refusal_outcome(fas_status status, const std::string& message, bool show_expected) {
    const cudaError_t pending = cudaPeekAtLastError();
    const bool passed = status == FAS_ERROR_INVALID_ARGUMENT && !message.empty() && pending == cudaSuccess;
    std::string detail = "status=" + std::to_string(static_cast<int>(status));
    if (show_expected) detail += " (expected " + std::to_string(static_cast<int>(FAS_ERROR_INVALID_ARGUMENT)) + ")";
    // A successful call leaves the last error as it was, so a message then belongs to an earlier call.
    detail += status == FAS_SUCCESS ? std::string(" (accepted)") : " message=\"" + message + "\"";
    if (pending != cudaSuccess) detail += std::string(" left CUDA error ") + cudaGetErrorName(pending);
    return {passed, detail};
}

namespace {

// ---------------------------------------------------------------------------------------------
// fas_fwd: a valid batch-layout call (1 x 4 tokens, heads 2/1, head dim 64) broken one way.

struct NegativeCase {
    const char* description;
    void (*break_args)(fas_fwd_args& args);
};

void* k_plus_one_row(const fas_fwd_args& a) {
    const char* k = static_cast<const char*>(a.k);
    return const_cast<char*>(k + static_cast<size_t>(a.num_heads_k) * a.head_dim * sizeof(uint16_t));
}

const NegativeCase kNegativeCases[] = {
    {"head_dim 20 (not a multiple of 8)", [](fas_fwd_args& a) { a.head_dim = 20; }},
    {"q misaligned by 2 bytes", [](fas_fwd_args& a) { a.q = static_cast<const char*>(a.q) + 2; }},
    {"only cu_seqlens_q set", [](fas_fwd_args& a) { a.cu_seqlens_q = static_cast<const int32_t*>(a.k); }},
    {"num_heads_q 3 with num_heads_k 2", [](fas_fwd_args& a) { a.num_heads_q = 3; a.num_heads_k = 2; }},
    {"struct_size too small", [](fas_fwd_args& a) { a.struct_size = sizeof(size_t); }},
    {"e4m3 dtype on fas_fwd (plans only)", [](fas_fwd_args& a) { a.dtype = FAS_DTYPE_E4M3; }},
    {"out == q", [](fas_fwd_args& a) { a.out = const_cast<void*>(a.q); }},
    {"out == v", [](fas_fwd_args& a) { a.out = const_cast<void*>(a.v); }},
    {"out starts inside k's bytes (k + one row)", [](fas_fwd_args& a) { a.out = k_plus_one_row(a); }},
};

CaseOutcome run_negative_case(const NegativeCase& negative, fas_dtype dtype, cudaStream_t stream) {
    DeviceBuffer q_dev(1 << 16), k_dev(1 << 16), v_dev(1 << 16), out_dev(1 << 16);
    fas_fwd_args args = fwd_args(dtype, q_dev.as<void>(), k_dev.as<void>(), v_dev.as<void>(), out_dev.as<void>(), 1, 4,
                                 4, 2, 1, 64, false, stream);
    negative.break_args(args);
    const fas_status status = fas_fwd(&args);
    return refusal_outcome(status, fas_get_last_error(), true);
}

// ---------------------------------------------------------------------------------------------
// Plans: a valid causal plan (offsets 0, 4, 9; heads 2/1; head dim 128) misused one way.

const char* const kPlanNegativeDescriptions[] = {
    "fas_plan_run with a NULL plan",
    "fas_plan_create with device (not host) cu_seqlens",
    "fas_plan_create with decreasing cu_seqlens_q",
    "fas_plan_run with q misaligned by 2 bytes",
    "fas_plan_run_args struct_size too small",
    "fas_plan_run with out == q",
    "fas_plan_run with out == v",
    "fas_plan_run with out starting inside k's bytes (k + one row)",
    "fas_plan_create with window_size_left -2",
};
constexpr int kNumPlanNegativeCases = sizeof kPlanNegativeDescriptions / sizeof kPlanNegativeDescriptions[0];

CaseOutcome run_plan_negative_case(int which, fas_dtype dtype, cudaStream_t stream) {
    constexpr int kHeadsKv = 1, kHeadDim = 128;
    DeviceBuffer q_dev(1 << 16), k_dev(1 << 16), v_dev(1 << 16), out_dev(1 << 16), offsets_dev(64);
    const int32_t good_offsets[3] = {0, 4, 9};
    const int32_t bad_offsets[3] = {0, 5, 3};
    upload(offsets_dev.as<void>(), good_offsets, sizeof good_offsets);
    fas_plan_args plan_args = varlen_plan_args(
        dtype, which == 1 ? offsets_dev.as<int32_t>() : which == 2 ? bad_offsets : good_offsets,
        which == 1 ? offsets_dev.as<int32_t>() : good_offsets, 2, 2, kHeadsKv, kHeadDim, true);
    plan_args.stream = stream;
    if (which == 8) {
        plan_args.use_window = 1;
        plan_args.window_size_left = -2;
    }
    void* const out = which == 5   ? q_dev.as<void>()
                      : which == 6 ? v_dev.as<void>()
                      : which == 7 ? static_cast<void*>(k_dev.as<char>() + kHeadsKv * kHeadDim * sizeof(uint16_t))
                                   : out_dev.as<void>();
    fas_plan_run_args run_args =
        plan_run_args(which == 3 ? static_cast<const void*>(q_dev.as<char>() + 2) : q_dev.as<void>(),
                      k_dev.as<void>(), v_dev.as<void>(), out, stream);
    if (which == 4) run_args.struct_size = sizeof(size_t);
    fas_status status;
    fas_plan* plan = nullptr;
    if (which == 0) {
        status = fas_plan_run(nullptr, &run_args);
    } else if (which == 1 || which == 2 || which == 8) {
        status = fas_plan_create(&plan_args, &plan);
    } else {
        if (fas_plan_create(&plan_args, &plan) != FAS_SUCCESS) {
            return {false, std::string("setup: fas_plan_create failed: ") + fas_get_last_error()};
        }
        status = fas_plan_run(plan, &run_args);
    }
    const std::string message = fas_get_last_error();
    if (plan != nullptr) fas_plan_destroy(plan);
    return refusal_outcome(status, message, false);
}

// ---------------------------------------------------------------------------------------------
// Accepted shared buffers: out must not share a byte with q, k or v, but inputs may share a
// buffer (and each other's bytes), and out may live in the same rows as q when the two only
// interleave. Two sequences (4 and 5 tokens), heads 2/2.

enum class SharedLayout {
    kPackedQkv,        // q, k, v = the three thirds of each row of [tokens, 3 * heads * head_dim]; separate out
    kInterleavedQOut,  // q, out = the two halves of each row of [tokens, 2 * heads * head_dim]
};

std::string shared_layout_label(SharedLayout layout, bool use_plan, fas_dtype dtype, int head_dim, bool causal) {
    return std::string("accepted: ") + (use_plan ? "fas_plan_run" : "fas_fwd") +
           (layout == SharedLayout::kPackedQkv ? " with q, k, v carved from one packed QKV buffer, separate out"
                                               : " with q and out interleaved in the rows of one buffer") +
           " (" + dtype_name(dtype) + ", hdim " + std::to_string(head_dim) + ", causal " + (causal ? "1" : "0") + ")";
}

CaseOutcome run_shared_buffer_case(SharedLayout layout, bool use_plan, fas_dtype dtype, int head_dim, bool causal,
                                   cudaStream_t stream) {
    constexpr int kHeads = 2;
    const AttentionCase c = varlen_case("shared-buffer", dtype, kHeads, kHeads, head_dim, causal, {4, 5});
    const int32_t offsets[3] = {0, 4, 9};
    const size_t tokens = 9;
    const size_t width = static_cast<size_t>(kHeads) * head_dim;
    const bool packed = layout == SharedLayout::kPackedQkv;
    const size_t stride = (packed ? 3 : 2) * width;

    std::mt19937_64 rng(20261123);
    const RoundedTensor q = random_tensor(dtype, tokens * width, rng);
    const RoundedTensor k = random_tensor(dtype, tokens * width, rng);
    const RoundedTensor v = random_tensor(dtype, tokens * width, rng);
    std::vector<uint16_t> shared(tokens * stride, kPoisonBits);  // the interleaved out half stays poison
    const auto place = [&](const std::vector<uint16_t>& bits, size_t column) {
        for (size_t row = 0; row < tokens; ++row) {
            std::copy_n(bits.begin() + row * width, width, shared.begin() + row * stride + column);
        }
    };
    place(q.bits, 0);
    if (packed) {
        place(k.bits, width);
        place(v.bits, 2 * width);
    }

    const size_t tensor_bytes = tokens * width * sizeof(uint16_t);
    DeviceBuffer shared_dev(shared.size() * sizeof(uint16_t)), offsets_dev(sizeof offsets);
    DeviceBuffer k_dev(packed ? 0 : tensor_bytes), v_dev(packed ? 0 : tensor_bytes), out_dev(packed ? tensor_bytes : 0);
    upload(shared_dev.as<void>(), shared.data(), shared_dev.bytes());
    upload(offsets_dev.as<void>(), offsets, sizeof offsets);
    if (packed) {
        fill(out_dev.as<void>(), 0xFF, out_dev.bytes());
    } else {
        upload(k_dev.as<void>(), k.bits.data(), tensor_bytes);
        upload(v_dev.as<void>(), v.bits.data(), tensor_bytes);
    }
    uint16_t* base = shared_dev.as<uint16_t>();
    const void* q_ptr = base;
    const void* k_ptr = packed ? static_cast<const void*>(base + width) : k_dev.as<void>();
    const void* v_ptr = packed ? static_cast<const void*>(base + 2 * width) : v_dev.as<void>();
    void* out_ptr = packed ? out_dev.as<void>() : static_cast<void*>(base + width);
    const int64_t q_stride = static_cast<int64_t>(stride);
    const int64_t kv_stride = packed ? static_cast<int64_t>(stride) : 0;
    const int64_t out_stride = packed ? 0 : static_cast<int64_t>(stride);

    fas_status status = FAS_SUCCESS;
    std::string call = use_plan ? "fas_plan_run" : "fas_fwd";
    std::string plan_detail;
    if (use_plan) {
        fas_plan_args plan_args = varlen_plan_args(dtype, offsets, offsets, 2, kHeads, kHeads, head_dim, causal);
        plan_args.q_row_stride = q_stride;
        plan_args.k_row_stride = kv_stride;
        plan_args.v_row_stride = kv_stride;
        plan_args.out_row_stride = out_stride;
        plan_args.stream = stream;
        fas_plan* plan = nullptr;
        status = fas_plan_create(&plan_args, &plan);
        if (status != FAS_SUCCESS) {
            call = "fas_plan_create";
        } else {
            const fas_plan_run_args run_args = plan_run_args(q_ptr, k_ptr, v_ptr, out_ptr, stream);
            status = fas_plan_run(plan, &run_args);
            CUDA_CHECK(cudaStreamSynchronize(stream));
            fas_plan_info info;
            std::memset(&info, 0, sizeof info);
            info.struct_size = sizeof info;
            if (fas_plan_get_info(plan, &info) == FAS_SUCCESS) {
                plan_detail = std::string(" plan=") + info.family_name + "/hd" + std::to_string(info.kernel_head_dim);
            }
            fas_plan_destroy(plan);
        }
    } else {
        fas_fwd_args args = fwd_args(dtype, q_ptr, k_ptr, v_ptr, out_ptr, 2, 5, 5, kHeads, kHeads, head_dim, causal,
                                     stream);
        args.cu_seqlens_q = offsets_dev.as<int32_t>();
        args.cu_seqlens_k = offsets_dev.as<int32_t>();
        args.q_row_stride = q_stride;
        args.k_row_stride = kv_stride;
        args.v_row_stride = kv_stride;
        args.out_row_stride = out_stride;
        args.total_q = static_cast<int>(tokens);
        status = fas_fwd(&args);
    }
    if (status != FAS_SUCCESS) return {false, call + " refused it: " + fas_get_last_error()};
    CUDA_CHECK(cudaStreamSynchronize(stream));
    CUDA_CHECK(cudaGetLastError());

    std::vector<uint16_t> shared_after(shared.size()), out_after(packed ? tokens * width : 0);
    CUDA_CHECK(cudaMemcpy(shared_after.data(), shared_dev.as<void>(), shared_dev.bytes(), cudaMemcpyDeviceToHost));
    if (packed) CUDA_CHECK(cudaMemcpy(out_after.data(), out_dev.as<void>(), out_dev.bytes(), cudaMemcpyDeviceToHost));
    size_t changed_inputs = 0;  // q (and packed k, v) must be left as uploaded
    for (size_t row = 0; row < tokens; ++row) {
        for (size_t x = 0; x < (packed ? stride : width); ++x) {
            changed_inputs += shared_after[row * stride + x] != shared[row * stride + x];
        }
    }
    const Reference ref = compute_reference(c, q.values, k.values, v.values, 1.f / std::sqrt(static_cast<float>(head_dim)));
    OutputView view = packed ? OutputView{out_after.data(), width} : OutputView{shared_after.data() + width, stride};
    view.padding_poisoned = packed;  // interleaved: the next q row follows each out row
    const Comparison result = compare_with_reference(c, ref, view);

    char numbers[128];
    std::snprintf(numbers, sizeof numbers, "out_err=%.3e (tol 2x same-precision %.3e)", result.max_out_error,
                  result.out_limit);
    std::string detail = numbers + plan_detail;
    if (result.non_finite_out) detail += " non-finite outputs=" + std::to_string(result.non_finite_out);
    if (changed_inputs) detail += " input elements overwritten=" + std::to_string(changed_inputs);
    return {result.passed && changed_inputs == 0, detail};
}

void report_shared_buffer_cases(bool use_plan, fas_dtype dtype, int head_dim, bool causal, cudaStream_t stream,
                                Tally* tally) {
    for (SharedLayout layout : {SharedLayout::kPackedQkv, SharedLayout::kInterleavedQOut}) {
        const CaseOutcome outcome =
            guarded([&] { return run_shared_buffer_case(layout, use_plan, dtype, head_dim, causal, stream); });
        report(shared_layout_label(layout, use_plan, dtype, head_dim, causal), outcome, tally);
    }
}

}  // namespace

void report_fwd_misuse_cases(fas_dtype dtype, cudaStream_t stream, Tally* tally) {
    for (const NegativeCase& negative : kNegativeCases) {
        const CaseOutcome outcome = guarded([&] { return run_negative_case(negative, dtype, stream); });
        report(std::string("negative: ") + negative.description, outcome, tally);
    }
    // Head dim 64 without the causal mask is in every build that has FA2 kernels.
    if (fas_query_support(dtype, 64, 0, nullptr) == FAS_SUCCESS) {
        report_shared_buffer_cases(false, dtype, 64, false, stream, tally);
    } else {
        std::printf("[SKIP] accepted shared buffers (fas_fwd) %s hdim=64: %s\n", dtype_name(dtype), fas_get_last_error());
        ++tally->skipped;
    }
}

// The caller has checked that a causal head-dim-128 plan of dtype can be made.
void report_plan_misuse_cases(fas_dtype dtype, cudaStream_t stream, Tally* tally) {
    for (int which = 0; which < kNumPlanNegativeCases; ++which) {
        const CaseOutcome outcome = guarded([&] { return run_plan_negative_case(which, dtype, stream); });
        report(std::string("negative: ") + kPlanNegativeDescriptions[which], outcome, tally);
    }
    report_shared_buffer_cases(true, dtype, 128, true, stream, tally);
}

}  // namespace gpu_test
