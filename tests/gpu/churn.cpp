// Plan churn: plans made, run and released per batch with fas_plan_destroy_async on two
// streams without synchronizing, checked bit for bit against synchronized runs of the same
// layouts (the library's reuse of schedule memory must wait for the streams that use it).
#include "gpu_test.h"

#include <cstdio>
#include <memory>

namespace gpu_test {
namespace {

// Plan per batch without waiting for the device: kPlanChurnLayouts layouts, alternating between
// two streams, each created, run and released with fas_plan_destroy_async and no synchronize,
// more than the library keeps waiting for release (8 per device), every 4th on FA2 where built.
// A schedule block reused before its stream had finished with it (staging rewritten before its
// upload, device schedule rewritten on the other stream before the kernel read it) gives another
// layout's tiles; so each output must equal, bit for bit, a run of the same layout made with
// fas_plan_destroy after a synchronize. Causal GQA 16/2, head dim 128.
constexpr int kPlanChurnLayouts = 20;

CaseOutcome run_plan_churn_case(fas_dtype dtype, cudaStream_t first_stream, std::string* description) {
    constexpr int kHeadsQ = 16, kHeadsKv = 2, kHeadDim = 128, kMaxTokens = 3 * 1024;
    int fa2_head_dim = 0;
    const bool fa2_built = fas_query_support(dtype, kHeadDim, 1, &fa2_head_dim) == FAS_SUCCESS;
    fas_family family = FAS_FAMILY_FA2;
    fas_query_plan_support(dtype, kHeadDim, 1, &family, nullptr);
    *description = std::string("plans released with fas_plan_destroy_async, ") + std::to_string(kPlanChurnLayouts) +
                   " layouts on 2 streams, no synchronize (" + (family == FAS_FAMILY_SM90 ? "sm90" : "fa2") +
                   (fa2_built && family == FAS_FAMILY_SM90 ? ", every 4th fa2" : "") + ", " + dtype_name(dtype) + ")";
    std::mt19937_64 rng(20261122);
    const size_t q_elements = static_cast<size_t>(kMaxTokens) * kHeadsQ * kHeadDim;
    const size_t kv_elements = static_cast<size_t>(kMaxTokens) * kHeadsKv * kHeadDim;
    const RoundedTensor q = random_tensor(dtype, q_elements, rng);
    const RoundedTensor k = random_tensor(dtype, kv_elements, rng);
    const RoundedTensor v = random_tensor(dtype, kv_elements, rng);
    DeviceBuffer q_dev(q_elements * 2), k_dev(kv_elements * 2), v_dev(kv_elements * 2), check_dev(q_elements * 2);
    upload(q_dev.as<void>(), q.bits.data(), q_dev.bytes());
    upload(k_dev.as<void>(), k.bits.data(), k_dev.bytes());
    upload(v_dev.as<void>(), v.bits.data(), v_dev.bytes());
    std::vector<std::unique_ptr<DeviceBuffer>> outs;
    cudaStream_t second_stream = nullptr;
    CUDA_CHECK(cudaStreamCreateWithFlags(&second_stream, cudaStreamNonBlocking));
    const cudaStream_t streams[2] = {first_stream, second_stream};

    // Layout i: 3 sequences of 1-1024 tokens, different for every i.
    std::vector<std::vector<int32_t>> offsets(kPlanChurnLayouts);
    for (int i = 0; i < kPlanChurnLayouts; ++i) {
        offsets[i] = {0};
        for (int b = 0; b < 3; ++b) offsets[i].push_back(offsets[i].back() + 1 + static_cast<int32_t>(rng() % 1024));
    }
    const auto make_plan = [&](int i, cudaStream_t stream, fas_plan** plan) {
        fas_plan_args args =
            varlen_plan_args(dtype, offsets[i].data(), offsets[i].data(), 3, kHeadsQ, kHeadsKv, kHeadDim, true);
        args.disable_sm90 = fa2_built && i % 4 == 3 ? 1 : 0;
        args.stream = stream;
        return fas_plan_create(&args, plan);
    };
    const auto run_plan = [&](const fas_plan* plan, void* out, cudaStream_t stream) {
        const fas_plan_run_args args = plan_run_args(q_dev.as<void>(), k_dev.as<void>(), v_dev.as<void>(), out, stream);
        return fas_plan_run(plan, &args);
    };
    std::string failure;
    for (int i = 0; i < kPlanChurnLayouts && failure.empty(); ++i) {
        const cudaStream_t stream = streams[i % 2];
        outs.push_back(std::make_unique<DeviceBuffer>(q_dev.bytes()));
        CUDA_CHECK(cudaMemsetAsync(outs.back()->as<void>(), 0xFF, q_dev.bytes(), stream));
        fas_plan* plan = nullptr;
        if (make_plan(i, stream, &plan) != FAS_SUCCESS) {
            failure = std::string("fas_plan_create failed: ") + fas_get_last_error();
        } else if (run_plan(plan, outs.back()->as<void>(), stream) != FAS_SUCCESS) {
            failure = std::string("fas_plan_run failed: ") + fas_get_last_error();
            fas_plan_destroy_async(plan, stream);
        } else if (fas_plan_destroy_async(plan, stream) != FAS_SUCCESS) {
            failure = std::string("fas_plan_destroy_async failed: ") + fas_get_last_error();
        }
    }
    CUDA_CHECK(cudaStreamSynchronize(second_stream));
    CUDA_CHECK(cudaStreamDestroy(second_stream));
    CUDA_CHECK(cudaStreamSynchronize(first_stream));
    if (!failure.empty()) return {false, failure};

    int differing = 0;
    std::string first_difference;
    for (int i = 0; i < kPlanChurnLayouts; ++i) {
        const size_t bytes = static_cast<size_t>(offsets[i].back()) * kHeadsQ * kHeadDim * 2;
        CUDA_CHECK(cudaMemsetAsync(check_dev.as<void>(), 0xFF, check_dev.bytes(), first_stream));
        fas_plan* plan = nullptr;
        if (make_plan(i, first_stream, &plan) != FAS_SUCCESS) return {false, std::string("fas_plan_create failed: ") + fas_get_last_error()};
        const fas_status status = run_plan(plan, check_dev.as<void>(), first_stream);
        CUDA_CHECK(cudaStreamSynchronize(first_stream));
        fas_plan_destroy(plan);
        if (status != FAS_SUCCESS) return {false, std::string("fas_plan_run failed: ") + fas_get_last_error()};
        std::vector<uint16_t> churned(bytes / 2), checked(bytes / 2);
        CUDA_CHECK(cudaMemcpy(churned.data(), outs[i]->as<void>(), bytes, cudaMemcpyDeviceToHost));
        CUDA_CHECK(cudaMemcpy(checked.data(), check_dev.as<void>(), bytes, cudaMemcpyDeviceToHost));
        const bool poisoned = std::any_of(churned.begin(), churned.end(), [](uint16_t bits) { return bits == 0xFFFF; });
        if (churned != checked || poisoned) {
            if (differing++ == 0) {
                first_difference = "layout " + std::to_string(i) + (poisoned ? " left rows unwritten" : " differs");
            }
        }
    }
    if (differing != 0) return {false, std::to_string(differing) + " of " + std::to_string(kPlanChurnLayouts) +
                                           " layouts differ from a synchronized run; first: " + first_difference};
    return {true, "all outputs bit-identical to synchronized runs"};
}

}  // namespace

void report_plan_churn_case(fas_dtype dtype, cudaStream_t stream, Tally* tally) {
    std::string description;
    const CaseOutcome outcome = guarded([&] { return run_plan_churn_case(dtype, stream, &description); });
    report(description, outcome, tally);
}

}  // namespace gpu_test
