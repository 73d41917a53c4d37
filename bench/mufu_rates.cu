// Throughput of the special-function (MUFU) instructions the SM90 softmax spends its time in:
// exp2 and tanh in fp32, and their packed fp16x2 / bf16x2 forms, in results per clock per SM.
// The FP8 kernels run the QK^T GEMM and the exponentials in series and the softcap kernels are
// bound by two MUFU results a score (docs/design/sm90-mainloop-plan.md, fp8-speed.md); whether a
// half-precision result costs less than an fp32 one decides whether P (e4m3 after all) or the
// capped score could take one. nvcc 13.0 compiles ex2.approx.f16x2 to two MUFU.EX2.F16 and
// tanh.approx.f16x2 to two MUFU.TANH.F16 (one a half), so only this measurement says what they cost.
//
//     nvcc -O3 -arch=sm_90a -o /tmp/mufu_rates bench/mufu_rates.cu && /tmp/mufu_rates
//
// One block of 1024 threads per SM; each thread runs eight independent chains of the operation
// (x = op(x), then one FMA or HFMA2 that keeps x in a range the next op is exact on, as an fp32
// or packed FMA: a pipe of its own); block 0's thread 0 reads clock64 around the loop after a
// barrier, so the rate is results / SM clock cycles of one SM, the same for every SM. The FMA row
// is the same loop with the op left out: what the loop costs without MUFU.
#include <cstdio>
#include <cstdlib>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

namespace {

constexpr int kThreads = 1024;
constexpr int kChains = 8;
constexpr int kSteps = 4096;

enum Op { kFma, kEx2F32, kTanhF32, kEx2F16x2, kTanhF16x2, kEx2Bf16x2, kTanhBf16x2, kOps };
const char* const kNames[kOps] = {"fma only (loop cost)", "ex2.approx.ftz.f32", "tanh.approx.f32", "ex2.approx.f16x2",
                                  "tanh.approx.f16x2", "ex2.approx.ftz.bf16x2", "tanh.approx.bf16x2"};
// Results an operation gives per thread and chain step.
constexpr int kResults[kOps] = {1, 1, 1, 2, 2, 2, 2};

template <Op kOp>
__device__ __forceinline__ unsigned step(unsigned x) {
    unsigned y = x;
    if constexpr (kOp == kEx2F32) asm volatile("ex2.approx.ftz.f32 %0, %1;" : "=r"(y) : "r"(x));
    if constexpr (kOp == kTanhF32) asm volatile("tanh.approx.f32 %0, %1;" : "=r"(y) : "r"(x));
    if constexpr (kOp == kEx2F16x2) asm volatile("ex2.approx.f16x2 %0, %1;" : "=r"(y) : "r"(x));
    if constexpr (kOp == kTanhF16x2) asm volatile("tanh.approx.f16x2 %0, %1;" : "=r"(y) : "r"(x));
    if constexpr (kOp == kEx2Bf16x2) asm volatile("ex2.approx.ftz.bf16x2 %0, %1;" : "=r"(y) : "r"(x));
    if constexpr (kOp == kTanhBf16x2) asm volatile("tanh.approx.bf16x2 %0, %1;" : "=r"(y) : "r"(x));
    // Back into [-1, 0): exp2 of it lies in [0.5, 1], tanh in (-0.77, 0].
    if constexpr (kOp == kFma || kOp == kEx2F32 || kOp == kTanhF32) {
        return __float_as_uint(fmaf(__uint_as_float(y), 0.5f, -0.75f));
    } else if constexpr (kOp == kEx2F16x2 || kOp == kTanhF16x2) {
        const __half2 h = *reinterpret_cast<const __half2*>(&y);
        const __half2 r = __hfma2(h, __float2half2_rn(0.5f), __float2half2_rn(-0.75f));
        return *reinterpret_cast<const unsigned*>(&r);
    } else {
        const __nv_bfloat162 h = *reinterpret_cast<const __nv_bfloat162*>(&y);
        const __nv_bfloat162 r = __hfma2(h, __float2bfloat162_rn(0.5f), __float2bfloat162_rn(-0.75f));
        return *reinterpret_cast<const unsigned*>(&r);
    }
}

template <Op kOp>
__global__ void __launch_bounds__(kThreads) rates(unsigned* sink, long long* cycles, unsigned seed) {
    unsigned x[kChains];
    for (int c = 0; c < kChains; ++c) x[c] = seed + threadIdx.x * kChains + c;  // the host passes a small negative
    __syncthreads();
    const long long start = clock64();
#pragma unroll 4
    for (int s = 0; s < kSteps; ++s) {
#pragma unroll
        for (int c = 0; c < kChains; ++c) x[c] = step<kOp>(x[c]);
    }
    __syncthreads();
    const long long end = clock64();
    unsigned all = 0;
    for (int c = 0; c < kChains; ++c) all ^= x[c];
    sink[blockIdx.x * kThreads + threadIdx.x] = all;  // keeps every chain live
    if (blockIdx.x == 0 && threadIdx.x == 0) *cycles = end - start;
}

template <Op kOp>
double measure(int sms, unsigned* sink, long long* cycles) {
    // -0.5 as fp32, or as two halves / bfloat16s: a start inside the range step() keeps.
    const unsigned seed = (kOp == kFma || kOp == kEx2F32 || kOp == kTanhF32) ? 0xbf000000u
                          : (kOp == kEx2F16x2 || kOp == kTanhF16x2)          ? 0xb800b800u
                                                                             : 0xbf00bf00u;
    rates<kOp><<<sms, kThreads>>>(sink, cycles, seed);  // warm-up
    rates<kOp><<<sms, kThreads>>>(sink, cycles, seed);
    long long host_cycles = 0;
    if (cudaMemcpy(&host_cycles, cycles, sizeof host_cycles, cudaMemcpyDeviceToHost) != cudaSuccess) return -1;
    const double results = double(kThreads) * kChains * kSteps * kResults[kOp];
    return results / double(host_cycles);
}

}  // namespace

int main() {
    int device = 0, sms = 0;
    cudaDeviceProp prop{};
    if (cudaGetDevice(&device) != cudaSuccess || cudaGetDeviceProperties(&prop, device) != cudaSuccess) {
        std::fprintf(stderr, "mufu_rates: no CUDA device\n");
        return 77;
    }
    sms = prop.multiProcessorCount;
    unsigned* sink = nullptr;
    long long* cycles = nullptr;
    if (cudaMalloc(&sink, sizeof(unsigned) * sms * kThreads) != cudaSuccess ||
        cudaMalloc(&cycles, sizeof(long long)) != cudaSuccess) {
        std::fprintf(stderr, "mufu_rates: cudaMalloc failed\n");
        return 1;
    }
    const double rate[kOps] = {measure<kFma>(sms, sink, cycles),        measure<kEx2F32>(sms, sink, cycles),
                               measure<kTanhF32>(sms, sink, cycles),    measure<kEx2F16x2>(sms, sink, cycles),
                               measure<kTanhF16x2>(sms, sink, cycles),  measure<kEx2Bf16x2>(sms, sink, cycles),
                               measure<kTanhBf16x2>(sms, sink, cycles)};
    if (cudaDeviceSynchronize() != cudaSuccess) {
        std::fprintf(stderr, "mufu_rates: %s\n", cudaGetErrorString(cudaGetLastError()));
        return 1;
    }
    std::printf("%s, %d SMs: results per SM clock (%d threads x %d chains x %d steps a block, one block an SM)\n\n",
                prop.name, sms, kThreads, kChains, kSteps);
    std::printf("| operation | results / clock / SM | against ex2.approx.ftz.f32 |\n| --- | --- | --- |\n");
    for (int op = 0; op < kOps; ++op) {
        std::printf("| %s | %.1f | %.2fx |\n", kNames[op], rate[op], rate[op] / rate[kEx2F32]);
    }
    return 0;
}
