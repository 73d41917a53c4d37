// Workspace bounds: fas_fwd must keep its device scratch inside the workspace it is given (and
// inside its own allocation when given none). The case that once broke it: varlen offsets that
// start above row 0 with no LSE requested and total_q left 0, where the LSE scratch was sized
// for batch * max_seqlen_q rows but written at the absolute row of q. A guard region after an
// exactly sized workspace must come back untouched, and the output must follow the rule in
// reference.h. Small on purpose: it runs in --quick, which runs under compute-sanitizer.
#include "reference.h"

#include <cmath>
#include <cstdio>

namespace gpu_test {
namespace {

constexpr int kHeadsQ = 4, kHeadsKv = 2, kHeadDim = 64;  // head dim 64, non-causal: in every FA2 build
constexpr bool kCausal = false;
const int32_t kCuSeqlensQ[3] = {100, 104, 113};  // 4 and 9 queries, rows 100..112
const int32_t kCuSeqlensK[3] = {60, 71, 80};     // 11 and 9 keys, rows 60..79
constexpr int kRows = 113;                       // rows allocated for each of q, k, v and out
constexpr size_t kGuardBytes = 64 * 1024;
constexpr unsigned char kGuardByte = 0xA5;

std::string label(fas_dtype dtype, bool pass_workspace) {
    return std::string("lse-scratch-bound ") + dtype_name(dtype) + " hdim=" + std::to_string(kHeadDim) +
           " fas_fwd varlen cu_seqlens_q=100,104,113 no LSE, total_q=0, " +
           (pass_workspace ? "exact workspace + 64 KiB guard" : "library-allocated scratch");
}

CaseOutcome run_lse_scratch_case(fas_dtype dtype, bool pass_workspace, cudaStream_t stream) {
    const int batch = 2;
    std::vector<int> seqlens_q, seqlens_k;
    for (int b = 0; b < batch; ++b) {
        seqlens_q.push_back(kCuSeqlensQ[b + 1] - kCuSeqlensQ[b]);
        seqlens_k.push_back(kCuSeqlensK[b + 1] - kCuSeqlensK[b]);
    }
    AttentionCase c = varlen_case("lse-scratch-bound", dtype, kHeadsQ, kHeadsKv, kHeadDim, kCausal, seqlens_q);
    c.seqlens_k = seqlens_k;
    const size_t q_width = static_cast<size_t>(kHeadsQ) * kHeadDim;
    const size_t kv_width = static_cast<size_t>(kHeadsKv) * kHeadDim;
    const size_t q_rows = kCuSeqlensQ[batch] - kCuSeqlensQ[0];
    const size_t k_rows = kCuSeqlensK[batch] - kCuSeqlensK[0];

    // The case's rows hold random values; every other row is NaN, so reading one shows in out.
    std::mt19937_64 rng(20261125 + static_cast<uint64_t>(dtype));
    const RoundedTensor q = random_tensor(dtype, q_rows * q_width, rng);
    const RoundedTensor k = random_tensor(dtype, k_rows * kv_width, rng);
    const RoundedTensor v = random_tensor(dtype, k_rows * kv_width, rng);
    const auto device_image = [](const RoundedTensor& tensor, size_t first_row, size_t width) {
        std::vector<uint16_t> image(kRows * width, kPoisonBits);
        std::copy(tensor.bits.begin(), tensor.bits.end(), image.begin() + first_row * width);
        return image;
    };
    const std::vector<uint16_t> q_image = device_image(q, kCuSeqlensQ[0], q_width);
    const std::vector<uint16_t> k_image = device_image(k, kCuSeqlensK[0], kv_width);
    const std::vector<uint16_t> v_image = device_image(v, kCuSeqlensK[0], kv_width);
    DeviceBuffer q_dev(q_image.size() * 2), k_dev(k_image.size() * 2), v_dev(v_image.size() * 2);
    DeviceBuffer out_dev(kRows * q_width * 2), cu_q_dev(sizeof kCuSeqlensQ), cu_k_dev(sizeof kCuSeqlensK);
    upload(q_dev.as<void>(), q_image.data(), q_dev.bytes());
    upload(k_dev.as<void>(), k_image.data(), k_dev.bytes());
    upload(v_dev.as<void>(), v_image.data(), v_dev.bytes());
    upload(cu_q_dev.as<void>(), kCuSeqlensQ, sizeof kCuSeqlensQ);
    upload(cu_k_dev.as<void>(), kCuSeqlensK, sizeof kCuSeqlensK);
    fill(out_dev.as<void>(), 0xFF, out_dev.bytes());

    // Batch of 2 with at most 9 queries and 11 keys (the offsets above), no LSE.
    fas_fwd_args args = fwd_args(dtype, q_dev.as<void>(), k_dev.as<void>(), v_dev.as<void>(), out_dev.as<void>(), batch,
                                 *std::max_element(seqlens_q.begin(), seqlens_q.end()),
                                 *std::max_element(seqlens_k.begin(), seqlens_k.end()), kHeadsQ, kHeadsKv, kHeadDim,
                                 kCausal, stream);
    args.cu_seqlens_q = cu_q_dev.as<int32_t>();
    args.cu_seqlens_k = cu_k_dev.as<int32_t>();

    size_t workspace_bytes = 0;
    if (fas_fwd_workspace_size(&args, &workspace_bytes) != FAS_SUCCESS) {
        return {false, std::string("fas_fwd_workspace_size failed: ") + fas_get_last_error()};
    }
    DeviceBuffer block(pass_workspace ? workspace_bytes + kGuardBytes : 0);
    if (pass_workspace) {
        fill(block.as<void>(), kGuardByte, block.bytes());
        args.workspace = block.as<void>();
        args.workspace_bytes = workspace_bytes;
    }
    if (fas_fwd(&args) != FAS_SUCCESS) return {false, std::string("fas_fwd failed: ") + fas_get_last_error()};
    CUDA_CHECK(cudaStreamSynchronize(stream));
    CUDA_CHECK(cudaGetLastError());

    size_t guard_written = 0, first_written = 0;
    if (pass_workspace) {
        std::vector<unsigned char> guard(kGuardBytes);
        CUDA_CHECK(cudaMemcpy(guard.data(), block.as<char>() + workspace_bytes, kGuardBytes, cudaMemcpyDeviceToHost));
        for (size_t i = 0; i < kGuardBytes; ++i) {
            if (guard[i] != kGuardByte && guard_written++ == 0) first_written = i;
        }
    }
    std::vector<uint16_t> out_host(kRows * q_width);
    CUDA_CHECK(cudaMemcpy(out_host.data(), out_dev.as<void>(), out_dev.bytes(), cudaMemcpyDeviceToHost));
    size_t written_outside = 0;  // out rows before 100 must keep their poison
    for (size_t i = 0; i < static_cast<size_t>(kCuSeqlensQ[0]) * q_width; ++i) written_outside += out_host[i] != kPoisonBits;

    const Reference ref = compute_reference(c, q.values, k.values, v.values, 1.f / std::sqrt(static_cast<float>(kHeadDim)));
    OutputView view{out_host.data(), q_width};
    view.first_row = kCuSeqlensQ[0];
    const Comparison result = compare_with_reference(c, ref, view);

    char numbers[128];
    std::snprintf(numbers, sizeof numbers, "out_err=%.3e (tol 2x same-precision %.3e)", result.max_out_error,
                  result.out_limit);
    std::string detail = numbers;
    if (pass_workspace) {
        detail += " workspace=" + std::to_string(workspace_bytes) + "B";
        detail += guard_written == 0 ? std::string(" guard intact")
                                     : " guard: " + std::to_string(guard_written) +
                                           " bytes written past the workspace, the first at its end + " +
                                           std::to_string(first_written);
    }
    if (result.non_finite_out) detail += " non-finite outputs=" + std::to_string(result.non_finite_out);
    if (written_outside) detail += " out elements written before row 100=" + std::to_string(written_outside);
    return {result.passed && guard_written == 0 && written_outside == 0, detail};
}

}  // namespace

void report_workspace_bounds_cases(fas_dtype dtype, cudaStream_t stream, Tally* tally) {
    if (fas_query_support(dtype, kHeadDim, kCausal, nullptr) != FAS_SUCCESS) {
        std::printf("[SKIP] lse-scratch-bound %s hdim=%d (fas_fwd): %s\n", dtype_name(dtype), kHeadDim, fas_get_last_error());
        ++tally->skipped;
        return;
    }
    for (bool pass_workspace : {true, false}) {
        const CaseOutcome outcome = guarded([&] { return run_lse_scratch_case(dtype, pass_workspace, stream); });
        report(label(dtype, pass_workspace), outcome, tally);
    }
}

}  // namespace gpu_test
