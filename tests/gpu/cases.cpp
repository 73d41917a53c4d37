// The attention case runner: builds one AttentionCase's inputs on the device, runs it through
// fas_fwd or through a plan (fas_plan_create once, fas_plan_run several times, every run equal
// to the first bit for bit), and judges the output and LSE by the rule in reference.h.
#include "reference.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <sstream>

namespace gpu_test {
namespace {

int sum_of(const std::vector<int>& values) {
    int total = 0;
    for (int value : values) total += value;
    return total;
}

std::string lengths_summary(const AttentionCase& c) {
    std::ostringstream summary;
    const auto [min_q, max_q] = std::minmax_element(c.seqlens_q.begin(), c.seqlens_q.end());
    if (c.varlen) {
        summary << "b=" << c.seqlens_q.size() << " seqlens_q=" << *min_q << ".." << *max_q
                << " total_q=" << sum_of(c.seqlens_q) << " total_k=" << sum_of(c.seqlens_k);
    } else {
        summary << "b=" << c.seqlens_q.size() << " seqlen_q=" << *max_q << " seqlen_k=" << c.seqlens_k.front();
    }
    return summary.str();
}

CaseOutcome run_attention_case(const AttentionCase& c, uint64_t seed, cudaStream_t stream) {
    const int batch = static_cast<int>(c.seqlens_q.size());
    const int d = c.head_dim;
    const size_t total_q = sum_of(c.seqlens_q);
    const size_t total_k = sum_of(c.seqlens_k);
    const int max_q = *std::max_element(c.seqlens_q.begin(), c.seqlens_q.end());
    const int max_k = *std::max_element(c.seqlens_k.begin(), c.seqlens_k.end());
    const size_t q_row_elements = static_cast<size_t>(c.heads_q) * d;
    const size_t kv_row_elements = static_cast<size_t>(c.heads_kv) * d;
    const size_t q_stride = q_row_elements + c.row_padding;
    const size_t kv_stride = kv_row_elements + c.row_padding;

    std::mt19937_64 rng(seed);
    // Device images of q, k, v (row-strided, poisoned padding) and the values the reference uses.
    std::vector<float> q_values, k_values, v_values;
    std::vector<uint8_t> q_host, k_host, v_host;
    std::vector<float> q_descale, k_descale, v_descale;  // FP8 only
    const auto as_bytes = [](const auto& elements) {
        std::vector<uint8_t> bytes(elements.size() * sizeof(elements[0]));
        std::memcpy(bytes.data(), elements.data(), bytes.size());
        return bytes;
    };
    if (c.fp8) {
        QuantizedTensor q = random_e4m3_tensor(total_q, c.heads_q, d, rng);
        QuantizedTensor k = random_e4m3_tensor(total_k, c.heads_kv, d, rng);
        QuantizedTensor v = random_e4m3_tensor(total_k, c.heads_kv, d, rng);
        q_host = with_row_stride(q.bits, total_q, q_row_elements, q_stride, kE4m3Nan);
        k_host = with_row_stride(k.bits, total_k, kv_row_elements, kv_stride, kE4m3Nan);
        v_host = with_row_stride(v.bits, total_k, kv_row_elements, kv_stride, kE4m3Nan);
        q_values = std::move(q.values), k_values = std::move(k.values), v_values = std::move(v.values);
        q_descale = std::move(q.descale), k_descale = std::move(k.descale), v_descale = std::move(v.descale);
    } else {
        RoundedTensor q = random_tensor(c.dtype, total_q * q_row_elements, rng);
        RoundedTensor k = random_tensor(c.dtype, total_k * kv_row_elements, rng);
        RoundedTensor v = random_tensor(c.dtype, total_k * kv_row_elements, rng);
        q_host = as_bytes(with_row_stride(q.bits, total_q, q_row_elements, q_stride, kPoisonBits));
        k_host = as_bytes(with_row_stride(k.bits, total_k, kv_row_elements, kv_stride, kPoisonBits));
        v_host = as_bytes(with_row_stride(v.bits, total_k, kv_row_elements, kv_stride, kPoisonBits));
        q_values = std::move(q.values), k_values = std::move(k.values), v_values = std::move(v.values);
    }
    DeviceBuffer q_dev(q_host.size());
    DeviceBuffer k_dev(k_host.size());
    DeviceBuffer v_dev(v_host.size());
    DeviceBuffer out_dev(total_q * q_stride * sizeof(uint16_t));
    DeviceBuffer lse_dev(total_q * c.heads_q * sizeof(float));
    DeviceBuffer q_descale_dev(q_descale.size() * sizeof(float));
    DeviceBuffer k_descale_dev(k_descale.size() * sizeof(float));
    DeviceBuffer v_descale_dev(v_descale.size() * sizeof(float));
    CUDA_CHECK(cudaMemcpyAsync(q_dev.as<void>(), q_host.data(), q_dev.bytes(), cudaMemcpyHostToDevice, stream));
    CUDA_CHECK(cudaMemcpyAsync(k_dev.as<void>(), k_host.data(), k_dev.bytes(), cudaMemcpyHostToDevice, stream));
    CUDA_CHECK(cudaMemcpyAsync(v_dev.as<void>(), v_host.data(), v_dev.bytes(), cudaMemcpyHostToDevice, stream));
    if (c.fp8) {
        CUDA_CHECK(cudaMemcpyAsync(q_descale_dev.as<void>(), q_descale.data(), q_descale_dev.bytes(), cudaMemcpyHostToDevice, stream));
        CUDA_CHECK(cudaMemcpyAsync(k_descale_dev.as<void>(), k_descale.data(), k_descale_dev.bytes(), cudaMemcpyHostToDevice, stream));
        CUDA_CHECK(cudaMemcpyAsync(v_descale_dev.as<void>(), v_descale.data(), v_descale_dev.bytes(), cudaMemcpyHostToDevice, stream));
    }
    CUDA_CHECK(cudaMemsetAsync(out_dev.as<void>(), 0xFF, out_dev.bytes(), stream));
    CUDA_CHECK(cudaMemsetAsync(lse_dev.as<void>(), 0xFF, lse_dev.bytes(), stream));

    std::vector<int32_t> cu_seqlens_q(batch + 1, 0), cu_seqlens_k(batch + 1, 0);
    for (int b = 0; b < batch; ++b) {
        cu_seqlens_q[b + 1] = cu_seqlens_q[b] + c.seqlens_q[b];
        cu_seqlens_k[b + 1] = cu_seqlens_k[b] + c.seqlens_k[b];
    }
    DeviceBuffer cu_q_dev(c.varlen ? cu_seqlens_q.size() * sizeof(int32_t) : 0);
    DeviceBuffer cu_k_dev(c.varlen ? cu_seqlens_k.size() * sizeof(int32_t) : 0);
    if (c.varlen) {
        CUDA_CHECK(cudaMemcpyAsync(cu_q_dev.as<void>(), cu_seqlens_q.data(), cu_q_dev.bytes(), cudaMemcpyHostToDevice, stream));
        CUDA_CHECK(cudaMemcpyAsync(cu_k_dev.as<void>(), cu_seqlens_k.data(), cu_k_dev.bytes(), cudaMemcpyHostToDevice, stream));
    }

    fas_fwd_args args = fwd_args(c.dtype, q_dev.as<void>(), k_dev.as<void>(), v_dev.as<void>(), out_dev.as<void>(),
                                 batch, max_q, max_k, c.heads_q, c.heads_kv, d, c.causal, stream);
    const bool no_lse = (c.expect_forward_plan || c.expect_key_split) && !c.forward_plan_lse;
    args.softmax_lse = no_lse ? nullptr : lse_dev.as<float>();
    args.cu_seqlens_q = c.varlen ? cu_q_dev.as<int32_t>() : nullptr;
    args.cu_seqlens_k = c.varlen ? cu_k_dev.as<int32_t>() : nullptr;
    args.q_row_stride = c.row_padding ? static_cast<int64_t>(q_stride) : 0;
    args.k_row_stride = c.row_padding ? static_cast<int64_t>(kv_stride) : 0;
    args.v_row_stride = c.row_padding ? static_cast<int64_t>(kv_stride) : 0;
    args.out_row_stride = c.row_padding ? static_cast<int64_t>(q_stride) : 0;
    args.total_q = static_cast<int>(total_q);

    size_t workspace_bytes = 0;
    std::string plan_detail;
    bool lse_token_major = false;
    if (c.use_plan) {
        fas_plan_args plan_args = varlen_plan_args(c.fp8 ? FAS_DTYPE_E4M3 : c.dtype, cu_seqlens_q.data(),
                                                   cu_seqlens_k.data(), batch, c.heads_q, c.heads_kv, d,
                                                   args.causal != 0);  // host copies of the offsets
        plan_args.out_dtype = c.dtype;
        plan_args.q_row_stride = args.q_row_stride;
        plan_args.k_row_stride = args.k_row_stride;
        plan_args.v_row_stride = args.v_row_stride;
        plan_args.out_row_stride = args.out_row_stride;
        plan_args.disable_sm90 = c.disable_sm90 ? 1 : 0;
        plan_args.use_window = c.use_window ? 1 : 0;
        plan_args.window_size_left = c.window_left;
        plan_args.window_size_right = c.window_right;
        plan_args.softcap = c.softcap;
        plan_args.use_sinks = c.sinks.empty() ? 0 : 1;
        plan_args.stream = stream;
        fas_plan* plan = nullptr;
        if (fas_plan_create(&plan_args, &plan) != FAS_SUCCESS) {
            return {false, std::string("fas_plan_create failed: ") + fas_get_last_error()};
        }
        fas_plan_info info;
        std::memset(&info, 0, sizeof info);
        info.struct_size = sizeof info;
        if (fas_plan_get_info(plan, &info) != FAS_SUCCESS) {
            fas_plan_destroy(plan);
            return {false, std::string("fas_plan_get_info failed: ") + fas_get_last_error()};
        }
        lse_token_major = info.lse_layout == FAS_LSE_TOKEN_MAJOR;
        plan_detail = std::string(" plan=") + info.family_name + "/hd" + std::to_string(info.kernel_head_dim) +
                      " runs=" + std::to_string(c.plan_runs) + " plan_bytes=" + std::to_string(info.device_bytes);
        if (info.sm90_unused_reason[0] != '\0') plan_detail += std::string(" (sm90 unused: ") + info.sm90_unused_reason + ")";
        if (c.expect_family >= 0 && static_cast<int>(info.family) != c.expect_family) {
            fas_plan_destroy(plan);
            return {false, "plan uses the wrong family" + plan_detail};
        }
        if (info.packed != 0) plan_detail += " packed=" + std::to_string(info.query_tiles) + "tiles";
        if (c.expect_packed >= 0 && info.packed != c.expect_packed) {
            fas_plan_destroy(plan);
            return {false, std::string(c.expect_packed ? "plan is not packed" : "plan is packed") + plan_detail};
        }
        if (c.expect_kernel_head_dim != 0 && info.kernel_head_dim != c.expect_kernel_head_dim) {
            fas_plan_destroy(plan);
            return {false, "plan uses the wrong kernel head dim (expected " + std::to_string(c.expect_kernel_head_dim) +
                               ")" + plan_detail};
        }
        fas_plan_run_args run_args = plan_run_args(args.q, args.k, args.v, args.out, stream);
        run_args.softmax_lse = args.softmax_lse;
        DeviceBuffer sinks_dev(std::max<size_t>(c.sinks.size(), 1) * sizeof(float));
        if (!c.sinks.empty()) {
            upload(sinks_dev.as<void>(), c.sinks.data(), c.sinks.size() * sizeof(float));
            run_args.sinks = sinks_dev.as<float>();
        }
        if (c.fp8) {
            run_args.q_descale = q_descale_dev.as<float>();
            run_args.k_descale = k_descale_dev.as<float>();
            run_args.v_descale = v_descale_dev.as<float>();
        }
        std::vector<uint16_t> first_out;
        std::vector<float> first_lse;
        size_t differing_runs = 0;
        for (int run = 0; run < c.plan_runs; ++run) {
            if (run > 0) {  // poison again so that every run must write everything
                CUDA_CHECK(cudaMemsetAsync(out_dev.as<void>(), 0xFF, out_dev.bytes(), stream));
                CUDA_CHECK(cudaMemsetAsync(lse_dev.as<void>(), 0xFF, lse_dev.bytes(), stream));
            }
            if (fas_plan_run(plan, &run_args) != FAS_SUCCESS) {
                const std::string message = fas_get_last_error();
                fas_plan_destroy(plan);
                return {false, "fas_plan_run failed: " + message + plan_detail};
            }
            CUDA_CHECK(cudaStreamSynchronize(stream));
            std::vector<uint16_t> out_run(total_q * q_stride);
            std::vector<float> lse_run(total_q * c.heads_q);
            CUDA_CHECK(cudaMemcpy(out_run.data(), out_dev.as<void>(), out_dev.bytes(), cudaMemcpyDeviceToHost));
            CUDA_CHECK(cudaMemcpy(lse_run.data(), lse_dev.as<void>(), lse_dev.bytes(), cudaMemcpyDeviceToHost));
            if (run == 0) {
                first_out = std::move(out_run);
                first_lse = std::move(lse_run);
            } else if (out_run != first_out || std::memcmp(lse_run.data(), first_lse.data(), lse_dev.bytes()) != 0) {
                ++differing_runs;
            }
        }
        if (fas_plan_destroy(plan) != FAS_SUCCESS) return {false, std::string("fas_plan_destroy failed: ") + fas_get_last_error()};
        if (differing_runs != 0) {
            return {false, std::to_string(differing_runs) + " run(s) differ from the first" + plan_detail};
        }
    } else {
        if (fas_fwd_workspace_size(&args, &workspace_bytes) != FAS_SUCCESS) {
            return {false, std::string("fas_fwd_workspace_size failed: ") + fas_get_last_error()};
        }
        // A plan asks for the LSE's reordering scratch alone (with the LSE, more than one query).
        const size_t plan_lse_bytes = args.softmax_lse != nullptr && max_q > 1
                                          ? static_cast<size_t>(batch) * max_q * c.heads_q * sizeof(float) : 0;
        if (c.expect_split_kv && (workspace_bytes == 0 || workspace_bytes == plan_lse_bytes)) {
            return {false, "the split-KV kernel was not selected (no accumulator workspace requested)"};
        }
        if (c.expect_forward_plan && workspace_bytes != plan_lse_bytes) {
            return {false, "fas_fwd kept a batch-layout request on FA2 (it asks for " + std::to_string(workspace_bytes) +
                               " bytes of scratch; a plan would ask for " + std::to_string(plan_lse_bytes) + ")"};
        }
        const size_t out_bytes = static_cast<size_t>(batch) * max_q * c.heads_q * d * sizeof(uint16_t);
        if (c.expect_key_split && workspace_bytes < 2 * out_bytes) {
            return {false, "fas_fwd did not split the keys (it asks for " + std::to_string(workspace_bytes) +
                               " bytes of scratch; two partial outputs are " + std::to_string(2 * out_bytes) + ")"};
        }
        DeviceBuffer workspace(c.pass_workspace ? workspace_bytes : 0);
        args.workspace = workspace.as<void>();
        args.workspace_bytes = workspace.bytes();

        if (fas_fwd(&args) != FAS_SUCCESS) return {false, std::string("fas_fwd failed: ") + fas_get_last_error()};
        CUDA_CHECK(cudaStreamSynchronize(stream));  // before the workspace goes out of scope
    }
    CUDA_CHECK(cudaStreamSynchronize(stream));
    CUDA_CHECK(cudaGetLastError());

    std::vector<uint16_t> out_host(total_q * q_stride);
    std::vector<float> lse_host(total_q * c.heads_q);
    CUDA_CHECK(cudaMemcpy(out_host.data(), out_dev.as<void>(), out_dev.bytes(), cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(lse_host.data(), lse_dev.as<void>(), lse_dev.bytes(), cudaMemcpyDeviceToHost));

    const float scale = 1.f / std::sqrt(static_cast<float>(d));
    const Reference ref = compute_reference(c, q_values, k_values, v_values, scale);
    OutputView view{out_host.data(), q_stride};
    view.lse = no_lse ? nullptr : lse_host.data();
    view.lse_layout = lse_token_major ? LseLayout::kTokenMajor : c.varlen ? LseLayout::kHeadMajor : LseLayout::kBatch;
    view.lse_rows = total_q;
    const Comparison result = compare_with_reference(c, ref, view);

    char numbers[256];
    std::snprintf(numbers, sizeof numbers, "out_err=%.3e (tol 2x same-precision %.3e%s) lse_err=%.3e (tol %.3e)",
                  result.max_out_error, result.out_limit, c.fp8 ? ", e4m3 P" : "", result.max_lse_error,
                  result.lse_limit);
    std::string detail = numbers + plan_detail;
    if (workspace_bytes > 0) {
        detail += std::string(" workspace=") + std::to_string(workspace_bytes) + (c.pass_workspace ? "B(given)" : "B(library-allocated)");
    }
    if (result.non_finite_out) detail += " non-finite outputs=" + std::to_string(result.non_finite_out);
    if (result.lse_mismatches) detail += " non-finite/unexpected LSE=" + std::to_string(result.lse_mismatches);
    if (result.touched_padding) detail += " written row padding=" + std::to_string(result.touched_padding);
    return {result.passed, detail};
}

}  // namespace

void report_attention_case(const AttentionCase& c, uint64_t seed, cudaStream_t stream, Tally* tally) {
    int kernel_head_dim = 0;
    const bool queried =
        c.use_plan ? fas_query_plan_support(c.fp8 ? FAS_DTYPE_E4M3 : c.dtype, c.head_dim, c.causal, nullptr,
                                            &kernel_head_dim) == FAS_SUCCESS
                   : fas_query_support(c.dtype, c.head_dim, c.causal, &kernel_head_dim) == FAS_SUCCESS;
    // The query answers for plans without a softcap (the header's MASKS): a softcap plan may run on
    // a softcap kernel it does not see (a library of softcap kernels alone), so the plan decides.
    const bool servable = queried || (c.use_plan && c.softcap > 0.f);
    CaseOutcome outcome{false, ""};
    if (!servable) {
        outcome.detail = std::string("fas_query_support: ") + fas_get_last_error();
    } else if (queried && c.expect_query_head_dim != 0 && kernel_head_dim != c.expect_query_head_dim) {
        outcome.detail = "the query names kernel head dim " + std::to_string(kernel_head_dim) + ", expected " +
                         std::to_string(c.expect_query_head_dim);
    } else {
        outcome = guarded([&] { return run_attention_case(c, seed, stream); });
    }
    std::printf("[%s] %-22s %s%s hdim=%d(kernel %d) causal=%d layout=%s heads=%d/%d %s | %s\n",
                outcome.passed ? "PASS" : "FAIL", c.config.c_str(), c.fp8 ? "e4m3->" : "", dtype_name(c.dtype), c.head_dim,
                kernel_head_dim, c.causal ? 1 : 0, c.varlen ? "varlen" : "batch", c.heads_q, c.heads_kv,
                lengths_summary(c).c_str(), outcome.detail.c_str());
    std::fflush(stdout);
    ++(outcome.passed ? tally->passed : tally->failed);
}

}  // namespace gpu_test
