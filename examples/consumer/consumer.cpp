// A program that uses libflash_attn_standalone as any consumer would: it plans and runs one
// varlen batch through the C API (fas_plan_create / fas_plan_run) and checks the output against
// a CPU reference. The batch is fp16, head dim 64, non-causal, GQA 4/2: the one configuration
// every build holds (the `smoke` build has only that kernel).
//
// Exit status: 0 the result is right, 1 a call failed or the result is wrong, 77 no usable CUDA
// device (as the artifact's test_varlen_inference).
//
// Build it against an unpacked artifact with CMake (CMakeLists.txt beside this file) or with
// pkg-config in one line (README.md beside this file).
#include <flash_attn_standalone.h>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "half.h"

namespace {

constexpr int kHeadsQ = 4;
constexpr int kHeadsK = 2;
constexpr int kHeadDim = 64;
// Three sequences: a prompt, a longer one, and a few queries over a longer key history.
const std::vector<int32_t> kQueryLengths = {37, 128, 5};
const std::vector<int32_t> kKeyLengths = {37, 128, 300};

std::vector<int32_t> offsets(const std::vector<int32_t>& lengths) {
    std::vector<int32_t> result(1, 0);
    for (int32_t length : lengths) result.push_back(result.back() + length);
    return result;
}

// softmax(q k^T / sqrt(d)) v per sequence and query head, in double, on the fp16 inputs as stored.
std::vector<double> reference(const std::vector<uint16_t>& q, const std::vector<uint16_t>& k,
                              const std::vector<uint16_t>& v, const std::vector<int32_t>& cu_q,
                              const std::vector<int32_t>& cu_k) {
    std::vector<double> out(q.size());
    const double scale = 1.0 / std::sqrt(static_cast<double>(kHeadDim));
    for (size_t s = 0; s + 1 < cu_q.size(); ++s) {
        for (int32_t row = cu_q[s]; row < cu_q[s + 1]; ++row) {
            for (int h = 0; h < kHeadsQ; ++h) {
                const int kv_head = h / (kHeadsQ / kHeadsK);
                const uint16_t* query = &q[(static_cast<size_t>(row) * kHeadsQ + h) * kHeadDim];
                std::vector<double> scores;
                for (int32_t key = cu_k[s]; key < cu_k[s + 1]; ++key) {
                    const uint16_t* keys = &k[(static_cast<size_t>(key) * kHeadsK + kv_head) * kHeadDim];
                    double dot = 0.0;
                    for (int d = 0; d < kHeadDim; ++d) dot += double(from_half(query[d])) * from_half(keys[d]);
                    scores.push_back(dot * scale);
                }
                const double top = *std::max_element(scores.begin(), scores.end());
                double sum = 0.0;
                for (double& score : scores) sum += (score = std::exp(score - top));
                double* result = &out[(static_cast<size_t>(row) * kHeadsQ + h) * kHeadDim];
                for (int32_t key = cu_k[s]; key < cu_k[s + 1]; ++key) {
                    const uint16_t* values = &v[(static_cast<size_t>(key) * kHeadsK + kv_head) * kHeadDim];
                    const double p = scores[key - cu_k[s]] / sum;
                    for (int d = 0; d < kHeadDim; ++d) result[d] += p * from_half(values[d]);
                }
            }
        }
    }
    return out;
}

struct DeviceBuffer {
    void* pointer = nullptr;
    ~DeviceBuffer() { cudaFree(pointer); }
};

bool upload(DeviceBuffer& buffer, const std::vector<uint16_t>& host) {
    const size_t bytes = host.size() * sizeof(uint16_t);
    return cudaMalloc(&buffer.pointer, bytes) == cudaSuccess &&
           cudaMemcpy(buffer.pointer, host.data(), bytes, cudaMemcpyHostToDevice) == cudaSuccess;
}

}  // namespace

int main() {
    int devices = 0;
    const cudaError_t count_error = cudaGetDeviceCount(&devices);
    if (count_error != cudaSuccess || devices == 0) {
        std::fprintf(stderr, "no CUDA device: %s\n",
                     count_error != cudaSuccess ? cudaGetErrorString(count_error) : "cudaGetDeviceCount returned 0");
        return 77;
    }
    if (fas_check_device(0) != FAS_SUCCESS) {
        std::fprintf(stderr, "no usable CUDA device: %s\n", fas_get_last_error());
        return 77;
    }
    std::printf("flash_attn_standalone %s, %d kernel(s)\n", fas_version_string(), fas_num_kernels());

    const std::vector<int32_t> cu_q = offsets(kQueryLengths), cu_k = offsets(kKeyLengths);
    const size_t q_elements = static_cast<size_t>(cu_q.back()) * kHeadsQ * kHeadDim;
    const size_t kv_elements = static_cast<size_t>(cu_k.back()) * kHeadsK * kHeadDim;
    std::mt19937 generator(2024);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<uint16_t> q(q_elements), k(kv_elements), v(kv_elements);
    for (auto* tensor : {&q, &k, &v})
        for (uint16_t& element : *tensor) element = to_half(normal(generator));
    // NaN everywhere out should be written: an element the kernel leaves alone fails the check.
    std::vector<uint16_t> out(q_elements, 0xffffu);

    DeviceBuffer q_device, k_device, v_device, out_device;
    if (!upload(q_device, q) || !upload(k_device, k) || !upload(v_device, v) || !upload(out_device, out)) {
        std::fprintf(stderr, "device memory: %s\n", cudaGetErrorString(cudaGetLastError()));
        return 1;
    }

    fas_plan_args plan_args;
    fas_plan_args_init(&plan_args);
    plan_args.dtype = FAS_DTYPE_FP16;
    plan_args.cu_seqlens_q = cu_q.data();  // host offsets: the plan keeps its own copy
    plan_args.cu_seqlens_k = cu_k.data();
    plan_args.batch_size = static_cast<int>(kQueryLengths.size());
    plan_args.num_heads_q = kHeadsQ;
    plan_args.num_heads_k = kHeadsK;
    plan_args.head_dim = kHeadDim;
    plan_args.causal = 0;
    fas_plan* plan = nullptr;
    if (fas_plan_create(&plan_args, &plan) != FAS_SUCCESS) {
        std::fprintf(stderr, "fas_plan_create: %s\n", fas_get_last_error());
        return 1;
    }
    fas_plan_info info;
    std::memset(&info, 0, sizeof info);
    info.struct_size = sizeof info;
    if (fas_plan_get_info(plan, &info) == FAS_SUCCESS)
        std::printf("plan: family %s, kernel head dim %d\n", info.family_name, info.kernel_head_dim);

    fas_plan_run_args run_args;
    fas_plan_run_args_init(&run_args);
    run_args.q = q_device.pointer;
    run_args.k = k_device.pointer;
    run_args.v = v_device.pointer;
    run_args.out = out_device.pointer;
    run_args.stream = 0;  // the legacy default stream: the copy below waits for the run
    const fas_status run_status = fas_plan_run(plan, &run_args);
    if (run_status != FAS_SUCCESS) std::fprintf(stderr, "fas_plan_run: %s\n", fas_get_last_error());
    const cudaError_t copy_error =
        cudaMemcpy(out.data(), out_device.pointer, out.size() * sizeof(uint16_t), cudaMemcpyDeviceToHost);
    fas_plan_destroy(plan);  // after the copy: no run of the plan is still in flight
    if (run_status != FAS_SUCCESS) return 1;
    if (copy_error != cudaSuccess) {
        std::fprintf(stderr, "copying the output back: %s\n", cudaGetErrorString(copy_error));
        return 1;
    }

    // The library's own fp16 bound (tests/gpu/reference.h, rule 4): |out - ref| <= a + a * max |ref|.
    const std::vector<double> expected = reference(q, k, v, cu_q, cu_k);
    double max_error = 0.0, max_reference = 0.0;
    size_t not_finite = 0;
    for (size_t i = 0; i < out.size(); ++i) {
        const float value = from_half(out[i]);
        if (!std::isfinite(value)) {
            ++not_finite;
            continue;
        }
        max_error = std::max(max_error, std::fabs(value - expected[i]));
        max_reference = std::max(max_reference, std::fabs(expected[i]));
    }
    const double limit = 2e-3 + 2e-3 * max_reference;
    const bool passed = not_finite == 0 && max_error <= limit;
    std::printf("%zu outputs, %zu not finite, max |out - ref| %.3g (limit %.3g): %s\n", out.size(), not_finite,
                max_error, limit, passed ? "PASS" : "FAIL");
    return passed ? 0 : 1;
}
