// GPU correctness test of libflash_attn_standalone, using only its public header and the CUDA
// runtime. Runs varlen inference shapes of Qwen2.5-VL-3B (LLM and vision tower), one small case
// per compiled kernel and a few invalid-argument calls, comparing against a CPU reference built
// from the same dtype-rounded inputs.
//
// Exit status: 0 all cases passed, 1 a case failed, 2 bad command line, 77 no usable CUDA device.
#include "flash_attn_standalone.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr int kExitPass = 0;
constexpr int kExitFail = 1;
constexpr int kExitUsage = 2;
constexpr int kExitSkip = 77;

constexpr uint16_t kPoisonBits = 0xFFFF;  // NaN in both fp16 and bf16
constexpr double kLseAbsTolerance = 1e-3;  // natural-log units
constexpr double kLseRelTolerance = 1e-4;
// FP8 inputs: the tensor cores accumulate e4m3 products in reduced precision (about 14 bits
// kept), so the scores, and with them the LSE, carry an error that grows with the number of
// products summed: allowance head_dim * 2^-13 on top (twice the largest error measured on an
// H200, 1.7e-2 at head dim 256).
constexpr double kFp8LsePerProduct = 1.0 / 8192.0;

// ---------------------------------------------------------------------------------------------
// Host-side fp16 / bf16 conversions, round-to-nearest-even.

uint32_t float_bits(float value) {
    uint32_t bits;
    std::memcpy(&bits, &value, sizeof bits);
    return bits;
}

float bits_float(uint32_t bits) {
    float value;
    std::memcpy(&value, &bits, sizeof value);
    return value;
}

uint16_t float_to_fp16(float value) {
    const uint32_t bits = float_bits(value);
    const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
    const uint32_t magnitude = bits & 0x7fffffffu;
    if (magnitude >= 0x7f800000u) return sign | (magnitude > 0x7f800000u ? 0x7e00u : 0x7c00u);
    if (magnitude >= 0x47800000u) return sign | 0x7c00u;  // >= 65536 overflows to infinity
    if (magnitude < 0x38800000u) {
        // Below 2^-14 the result is subnormal: a multiple of 2^-24, rounded to nearest even by
        // nearbyint (the default rounding mode). 1024 * 2^-24 correctly encodes the smallest normal.
        const float scaled = bits_float(magnitude) * 16777216.0f;
        return sign | static_cast<uint16_t>(std::nearbyint(scaled));
    }
    const uint32_t exponent = (magnitude >> 23) - 127 + 15;
    const uint32_t mantissa = magnitude & 0x7fffffu;
    uint32_t half = (exponent << 10) | (mantissa >> 13);
    const uint32_t remainder = mantissa & 0x1fffu;
    if (remainder > 0x1000u || (remainder == 0x1000u && (half & 1u))) ++half;  // carry may reach infinity
    return sign | static_cast<uint16_t>(half);
}

float fp16_to_float(uint16_t half) {
    const uint32_t sign = static_cast<uint32_t>(half & 0x8000u) << 16;
    const uint32_t exponent = (half >> 10) & 0x1fu;
    const uint32_t mantissa = half & 0x3ffu;
    if (exponent == 0) {
        const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
        return sign ? -magnitude : magnitude;
    }
    if (exponent == 31) return bits_float(sign | 0x7f800000u | (mantissa << 13));
    return bits_float(sign | ((exponent - 15 + 127) << 23) | (mantissa << 13));
}

uint16_t float_to_bf16(float value) {
    const uint32_t bits = float_bits(value);
    if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x0040u);  // quiet NaN
    const uint32_t rounding_bias = 0x7fffu + ((bits >> 16) & 1u);
    return static_cast<uint16_t>((bits + rounding_bias) >> 16);
}

float bf16_to_float(uint16_t bf16) { return bits_float(static_cast<uint32_t>(bf16) << 16); }

uint16_t to_dtype_bits(fas_dtype dtype, float value) {
    return dtype == FAS_DTYPE_BF16 ? float_to_bf16(value) : float_to_fp16(value);
}

float from_dtype_bits(fas_dtype dtype, uint16_t bits) {
    return dtype == FAS_DTYPE_BF16 ? bf16_to_float(bits) : fp16_to_float(bits);
}

const char* dtype_name(fas_dtype dtype) { return dtype == FAS_DTYPE_BF16 ? "bf16" : "fp16"; }

// FP8 e4m3 (OCP): 1 sign, 4 exponent (bias 7), 3 mantissa bits; no infinities, max 448,
// 0x7f / 0xff are NaN. Conversion saturates to +-448 and rounds to nearest even (as the
// device's cvt.rn.satfinite does).
constexpr float kE4m3Max = 448.f;
constexpr uint8_t kE4m3Nan = 0x7f;

float e4m3_to_float(uint8_t bits) {
    const float sign = (bits & 0x80u) ? -1.f : 1.f;
    const int exponent = (bits >> 3) & 0xf;
    const int mantissa = bits & 0x7;
    if (exponent == 0xf && mantissa == 0x7) return std::numeric_limits<float>::quiet_NaN();
    if (exponent == 0) return sign * std::ldexp(static_cast<float>(mantissa), -9);  // subnormal: m * 2^-9
    return sign * std::ldexp(1.f + mantissa / 8.f, exponent - 7);
}

uint8_t float_to_e4m3(float value) {
    const uint8_t sign = std::signbit(value) ? 0x80u : 0u;
    const float magnitude = std::min(std::fabs(value), kE4m3Max);
    if (magnitude < 0.015625f) {  // below 2^-6: subnormal, a multiple of 2^-9 (8 * 2^-9 is the smallest normal)
        return sign | static_cast<uint8_t>(std::nearbyint(magnitude * 512.f));
    }
    int exponent = 0;
    const float fraction = std::frexp(magnitude, &exponent);  // magnitude = fraction * 2^exponent, fraction in [0.5, 1)
    int biased = exponent - 1 + 7;
    int mantissa = static_cast<int>(std::nearbyint((2.f * fraction - 1.f) * 8.f));  // ties to even
    if (mantissa == 8) {
        mantissa = 0;
        ++biased;
    }
    return sign | static_cast<uint8_t>(std::min((biased << 3) | mantissa, 0x7e));  // 0x7e = 448
}

// ---------------------------------------------------------------------------------------------
// CUDA helpers

class CudaFailure : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

void check_cuda(cudaError_t error, const char* expression, int line) {
    if (error != cudaSuccess) {
        throw CudaFailure(std::string(expression) + " failed at line " + std::to_string(line) + ": " +
                          cudaGetErrorName(error) + " (" + cudaGetErrorString(error) + ")");
    }
}

#define CUDA_CHECK(expression) check_cuda((expression), #expression, __LINE__)

class DeviceBuffer {
public:
    explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
        if (bytes > 0) CUDA_CHECK(cudaMalloc(&pointer_, bytes));
    }
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;
    ~DeviceBuffer() {
        if (pointer_ != nullptr) cudaFree(pointer_);
    }

    template <typename T>
    T* as() const {
        return static_cast<T*>(pointer_);
    }
    size_t bytes() const { return bytes_; }

private:
    void* pointer_ = nullptr;
    size_t bytes_;
};

// ---------------------------------------------------------------------------------------------
// Test cases

struct AttentionCase {
    std::string config;
    fas_dtype dtype;
    int heads_q;
    int heads_kv;
    int head_dim;
    bool causal;
    bool varlen;                  // false: batch layout, all sequences of equal length
    std::vector<int> seqlens_q;
    std::vector<int> seqlens_k;
    int row_padding = 0;          // extra elements per token row, to exercise row strides
    bool pass_workspace = true;   // false: let the library allocate its own scratch
    bool expect_split_kv = false; // the split-KV kernel must be chosen (checked via workspace size)
    bool use_plan = false;        // varlen only: fas_plan_create once, fas_plan_run plan_runs times
    int plan_runs = 1;            // outputs and LSE of every run must equal the first bit for bit
    int expect_family = -1;       // with use_plan: the fas_family the plan must use (-1 = any)
    bool disable_sm90 = false;    // with use_plan: fas_plan_args.disable_sm90
    bool fp8 = false;             // with use_plan: q/k/v in e4m3 with per-head descales; dtype is out's
};

struct Tolerance {
    double abs;
    double rel;
};

Tolerance output_tolerance(fas_dtype dtype) {
    // fp16 keeps 11 significant bits, bf16 8: the output is rounded to the dtype and so are the
    // softmax probabilities before the P*V product.
    return dtype == FAS_DTYPE_BF16 ? Tolerance{1.6e-2, 1.6e-2} : Tolerance{2e-3, 2e-3};
}

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

// Random inputs already rounded to the dtype: bits for the device, floats for the reference.
struct RoundedTensor {
    std::vector<uint16_t> bits;  // [rows, heads, head_dim], contiguous
    std::vector<float> values;
};

// Random e4m3 inputs with one descale factor per head: a head's values are drawn at its own
// magnitude and quantized against its own maximum; values = stored e4m3 value * descale.
struct QuantizedTensor {
    std::vector<uint8_t> bits;  // [rows, heads, head_dim], contiguous
    std::vector<float> values;
    std::vector<float> descale;  // [heads]
};

QuantizedTensor random_e4m3_tensor(size_t rows, int heads, int head_dim, std::mt19937_64& rng) {
    std::normal_distribution<float> normal(0.f, 1.f);
    QuantizedTensor tensor;
    const size_t elements = rows * heads * head_dim;
    std::vector<float> raw(elements);
    std::vector<float> head_max(heads, 0.f);
    for (size_t i = 0; i < elements; ++i) {
        const int head = static_cast<int>((i / head_dim) % heads);
        raw[i] = normal(rng) * (0.5f + 0.5f * (head % 4));  // magnitudes 0.5x .. 2x by head
        head_max[head] = std::max(head_max[head], std::fabs(raw[i]));
    }
    tensor.descale.resize(heads);
    for (int head = 0; head < heads; ++head) tensor.descale[head] = std::max(head_max[head], 1e-6f) / kE4m3Max;
    tensor.bits.resize(elements);
    tensor.values.resize(elements);
    for (size_t i = 0; i < elements; ++i) {
        const float descale = tensor.descale[(i / head_dim) % heads];
        tensor.bits[i] = float_to_e4m3(raw[i] / descale);
        tensor.values[i] = e4m3_to_float(tensor.bits[i]) * descale;
    }
    return tensor;
}

RoundedTensor random_tensor(fas_dtype dtype, size_t elements, std::mt19937_64& rng) {
    std::normal_distribution<float> normal(0.f, 1.f);
    RoundedTensor tensor;
    tensor.bits.resize(elements);
    tensor.values.resize(elements);
    for (size_t i = 0; i < elements; ++i) {
        tensor.bits[i] = to_dtype_bits(dtype, normal(rng));
        tensor.values[i] = from_dtype_bits(dtype, tensor.bits[i]);
    }
    return tensor;
}

// Copies [rows, row_elements] to device rows of row_stride elements; the padding is poison.
template <typename Bits>
std::vector<Bits> with_row_stride(const std::vector<Bits>& packed, size_t rows, size_t row_elements, size_t row_stride,
                                  Bits poison) {
    std::vector<Bits> strided(rows * row_stride, poison);
    for (size_t row = 0; row < rows; ++row) {
        std::copy_n(packed.begin() + row * row_elements, row_elements, strided.begin() + row * row_stride);
    }
    return strided;
}

struct Reference {
    std::vector<float> out;       // [total_q, heads_q, head_dim], exact softmax (float dots, double sums)
    std::vector<float> out_same;  // the same-precision emulation (see compute_reference)
    std::vector<double> lse;      // [total_q, heads_q]; +inf for rows that see no key
};

// Rounding of the softmax probabilities that a kernel of this case applies before the P*V
// product: to the 16-bit dtype, or for FP8 inputs to e4m3 after scaling by 448.
float round_probability(const AttentionCase& c, float p) {
    if (c.fp8) return e4m3_to_float(float_to_e4m3(p * kE4m3Max)) / kE4m3Max;
    return from_dtype_bits(c.dtype, to_dtype_bits(c.dtype, p));
}

// softmax(scale * q k^T) v per (sequence, query head), in float dot products and double sums,
// spread over the CPU cores. Also the same-precision emulation that the correctness bar
// compares against: the probabilities rounded as the kernel rounds them (round_probability),
// the row sum from the unrounded ones, the output rounded to the output dtype.
Reference compute_reference(const AttentionCase& c, const std::vector<float>& q, const std::vector<float>& k,
                            const std::vector<float>& v, float scale) {
    const int batch = static_cast<int>(c.seqlens_q.size());
    const int d = c.head_dim;
    const int group = c.heads_q / c.heads_kv;
    std::vector<int> q_offsets(batch + 1, 0), k_offsets(batch + 1, 0);
    for (int b = 0; b < batch; ++b) {
        q_offsets[b + 1] = q_offsets[b] + c.seqlens_q[b];
        k_offsets[b + 1] = k_offsets[b] + c.seqlens_k[b];
    }
    Reference ref;
    ref.out.assign(static_cast<size_t>(q_offsets[batch]) * c.heads_q * d, 0.f);
    ref.out_same.assign(ref.out.size(), 0.f);
    ref.lse.assign(static_cast<size_t>(q_offsets[batch]) * c.heads_q, 0.0);

    const int work_items = batch * c.heads_q;
    std::atomic<int> next_item{0};
    const auto worker = [&] {
        std::vector<float> scores;
        std::vector<double> accumulator(d);
        std::vector<double> rounded_accumulator(d);
        for (int item = next_item++; item < work_items; item = next_item++) {
            const int b = item / c.heads_q;
            const int head = item % c.heads_q;
            const int kv_head = head / group;
            const int sq = c.seqlens_q[b];
            const int sk = c.seqlens_k[b];
            scores.resize(sk);
            for (int i = 0; i < sq; ++i) {
                const size_t q_row = static_cast<size_t>(q_offsets[b] + i);
                const float* q_vec = &q[(q_row * c.heads_q + head) * d];
                // Bottom-right aligned causal mask: query i sees keys j <= i + sk - sq.
                const int visible = c.causal ? std::min(sk, i + sk - sq + 1) : sk;
                float* out_vec = &ref.out[(q_row * c.heads_q + head) * d];
                float* out_same_vec = &ref.out_same[(q_row * c.heads_q + head) * d];
                double& lse = ref.lse[q_row * c.heads_q + head];
                if (visible <= 0) {
                    lse = std::numeric_limits<double>::infinity();
                    continue;
                }
                float max_score = -std::numeric_limits<float>::infinity();
                for (int j = 0; j < visible; ++j) {
                    const float* k_vec = &k[((static_cast<size_t>(k_offsets[b]) + j) * c.heads_kv + kv_head) * d];
                    // Four partial sums (head_dim is a multiple of 8) shorten the add chain.
                    float partial[4] = {0.f, 0.f, 0.f, 0.f};
                    for (int x = 0; x < d; x += 4) {
                        for (int lane = 0; lane < 4; ++lane) partial[lane] += q_vec[x + lane] * k_vec[x + lane];
                    }
                    scores[j] = ((partial[0] + partial[1]) + (partial[2] + partial[3])) * scale;
                    max_score = std::max(max_score, scores[j]);
                }
                std::fill(accumulator.begin(), accumulator.end(), 0.0);
                std::fill(rounded_accumulator.begin(), rounded_accumulator.end(), 0.0);
                double sum = 0.0;
                for (int j = 0; j < visible; ++j) {
                    const double p = std::exp(static_cast<double>(scores[j]) - max_score);
                    const double p_rounded = round_probability(c, static_cast<float>(p));
                    sum += p;
                    const float* v_vec = &v[((static_cast<size_t>(k_offsets[b]) + j) * c.heads_kv + kv_head) * d];
                    for (int x = 0; x < d; ++x) {
                        accumulator[x] += p * v_vec[x];
                        rounded_accumulator[x] += p_rounded * v_vec[x];
                    }
                }
                for (int x = 0; x < d; ++x) {
                    out_vec[x] = static_cast<float>(accumulator[x] / sum);
                    out_same_vec[x] = from_dtype_bits(c.dtype, to_dtype_bits(c.dtype, static_cast<float>(rounded_accumulator[x] / sum)));
                }
                lse = max_score + std::log(sum);
            }
        }
    };
    const unsigned hardware_threads = std::max(1u, std::thread::hardware_concurrency());
    const int thread_count = std::min<int>(std::min<unsigned>(hardware_threads, 32u), work_items);
    std::vector<std::thread> threads;
    for (int t = 1; t < thread_count; ++t) threads.emplace_back(worker);
    worker();
    for (std::thread& thread : threads) thread.join();
    return ref;
}

struct CaseOutcome {
    bool passed;
    std::string detail;
};

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

    fas_fwd_args args;
    fas_fwd_args_init(&args);
    args.dtype = c.dtype;
    args.q = q_dev.as<void>();
    args.k = k_dev.as<void>();
    args.v = v_dev.as<void>();
    args.out = out_dev.as<void>();
    args.softmax_lse = lse_dev.as<float>();
    args.cu_seqlens_q = c.varlen ? cu_q_dev.as<int32_t>() : nullptr;
    args.cu_seqlens_k = c.varlen ? cu_k_dev.as<int32_t>() : nullptr;
    args.batch_size = batch;
    args.max_seqlen_q = max_q;
    args.max_seqlen_k = max_k;
    args.num_heads_q = c.heads_q;
    args.num_heads_k = c.heads_kv;
    args.head_dim = d;
    args.q_row_stride = c.row_padding ? static_cast<int64_t>(q_stride) : 0;
    args.k_row_stride = c.row_padding ? static_cast<int64_t>(kv_stride) : 0;
    args.v_row_stride = c.row_padding ? static_cast<int64_t>(kv_stride) : 0;
    args.out_row_stride = c.row_padding ? static_cast<int64_t>(q_stride) : 0;
    args.causal = c.causal ? 1 : 0;
    args.stream = stream;
    args.total_q = static_cast<int>(total_q);

    size_t workspace_bytes = 0;
    std::string plan_detail;
    bool lse_token_major = false;
    if (c.use_plan) {
        fas_plan_args plan_args;
        fas_plan_args_init(&plan_args);
        plan_args.dtype = c.fp8 ? FAS_DTYPE_E4M3 : c.dtype;
        plan_args.out_dtype = c.dtype;
        plan_args.cu_seqlens_q = cu_seqlens_q.data();  // host copies
        plan_args.cu_seqlens_k = cu_seqlens_k.data();
        plan_args.batch_size = batch;
        plan_args.num_heads_q = c.heads_q;
        plan_args.num_heads_k = c.heads_kv;
        plan_args.head_dim = d;
        plan_args.q_row_stride = args.q_row_stride;
        plan_args.k_row_stride = args.k_row_stride;
        plan_args.v_row_stride = args.v_row_stride;
        plan_args.out_row_stride = args.out_row_stride;
        plan_args.causal = args.causal;
        plan_args.disable_sm90 = c.disable_sm90 ? 1 : 0;
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
        fas_plan_run_args run_args;
        fas_plan_run_args_init(&run_args);
        run_args.q = args.q;
        run_args.k = args.k;
        run_args.v = args.v;
        run_args.out = args.out;
        run_args.softmax_lse = args.softmax_lse;
        run_args.stream = stream;
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
    if (c.expect_split_kv && workspace_bytes == 0) {
        return {false, "the split-KV kernel was not selected (no accumulator workspace requested)"};
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

    double max_ref = 0.0, max_out_error = 0.0, max_lse_error = 0.0, max_ref_lse = 0.0;
    double max_same_error = 0.0;  // of the same-precision emulation against the exact reference
    size_t non_finite_out = 0, lse_mismatches = 0, touched_padding = 0;
    for (int b = 0; b < batch; ++b) {
        for (int i = 0; i < c.seqlens_q[b]; ++i) {
            const size_t row = static_cast<size_t>(cu_seqlens_q[b] + i);
            for (int head = 0; head < c.heads_q; ++head) {
                for (int x = 0; x < d; ++x) {
                    const float got = from_dtype_bits(c.dtype, out_host[row * q_stride + head * d + x]);
                    const float want = ref.out[(row * c.heads_q + head) * d + x];
                    if (!std::isfinite(got)) {
                        ++non_finite_out;
                        continue;
                    }
                    max_ref = std::max(max_ref, std::fabs(static_cast<double>(want)));
                    max_out_error = std::max(max_out_error, std::fabs(static_cast<double>(got) - want));
                    const float same = ref.out_same[(row * c.heads_q + head) * d + x];
                    max_same_error = std::max(max_same_error, std::fabs(static_cast<double>(same) - want));
                }
                // LSE layout: varlen [heads_q, total_q], batch [batch, heads_q, seqlen_q]; plans
                // report theirs (SM90: [total_q, heads_q]).
                const size_t lse_index = lse_token_major ? row * c.heads_q + head
                                         : c.varlen    ? head * total_q + row
                                                       : (static_cast<size_t>(b) * c.heads_q + head) * max_q + i;
                const double got_lse = lse_host[lse_index];
                const double want_lse = ref.lse[row * c.heads_q + head];
                if (std::isinf(want_lse)) {
                    if (!(std::isinf(got_lse) && got_lse > 0)) ++lse_mismatches;
                } else if (!std::isfinite(got_lse)) {
                    ++lse_mismatches;
                } else {
                    max_ref_lse = std::max(max_ref_lse, std::fabs(want_lse));
                    max_lse_error = std::max(max_lse_error, std::fabs(got_lse - want_lse));
                }
            }
            for (size_t x = q_row_elements; x < q_stride; ++x) touched_padding += out_host[row * q_stride + x] != kPoisonBits;
        }
    }
    // The correctness bar: at most twice the error of the same-precision emulation. The
    // fixed dtype tolerance stays as a second, looser guard for the 16-bit dtypes.
    const Tolerance tolerance = output_tolerance(c.dtype);
    const double out_limit = 2.0 * max_same_error;
    const double dtype_limit = tolerance.abs + tolerance.rel * max_ref;
    const double lse_limit =
        kLseAbsTolerance + kLseRelTolerance * max_ref_lse + (c.fp8 ? kFp8LsePerProduct * d : 0.0);
    const bool passed = non_finite_out == 0 && lse_mismatches == 0 && touched_padding == 0 &&
                        max_out_error <= out_limit && (c.fp8 || max_out_error <= dtype_limit) &&
                        max_lse_error <= lse_limit;

    char numbers[256];
    std::snprintf(numbers, sizeof numbers, "out_err=%.3e (tol 2x same-precision %.3e%s) lse_err=%.3e (tol %.3e)",
                  max_out_error, out_limit, c.fp8 ? ", e4m3 P" : "", max_lse_error, lse_limit);
    std::string detail = numbers + plan_detail;
    if (workspace_bytes > 0) {
        detail += std::string(" workspace=") + std::to_string(workspace_bytes) + (c.pass_workspace ? "B(given)" : "B(library-allocated)");
    }
    if (non_finite_out) detail += " non-finite outputs=" + std::to_string(non_finite_out);
    if (lse_mismatches) detail += " non-finite/unexpected LSE=" + std::to_string(lse_mismatches);
    if (touched_padding) detail += " written row padding=" + std::to_string(touched_padding);
    return {passed, detail};
}

// ---------------------------------------------------------------------------------------------
// Invalid-argument checks: fas_fwd must refuse them with a status and a message, launch nothing
// and leave no CUDA error behind.

struct NegativeCase {
    const char* description;
    void (*break_args)(fas_fwd_args& args);
};

CaseOutcome run_negative_case(const NegativeCase& negative, fas_dtype dtype, cudaStream_t stream) {
    DeviceBuffer q_dev(1 << 16), k_dev(1 << 16), v_dev(1 << 16), out_dev(1 << 16);
    fas_fwd_args args;
    fas_fwd_args_init(&args);
    args.dtype = dtype;
    args.q = q_dev.as<void>();
    args.k = k_dev.as<void>();
    args.v = v_dev.as<void>();
    args.out = out_dev.as<void>();
    args.batch_size = 1;
    args.max_seqlen_q = 4;
    args.max_seqlen_k = 4;
    args.num_heads_q = 2;
    args.num_heads_k = 1;
    args.head_dim = 64;
    args.stream = stream;
    negative.break_args(args);
    const fas_status status = fas_fwd(&args);
    const std::string message = fas_get_last_error();
    const cudaError_t pending = cudaPeekAtLastError();
    const bool passed = status == FAS_ERROR_INVALID_ARGUMENT && !message.empty() && pending == cudaSuccess;
    std::string detail = "status=" + std::to_string(static_cast<int>(status)) + " (expected " +
                         std::to_string(static_cast<int>(FAS_ERROR_INVALID_ARGUMENT)) + ") message=\"" + message + "\"";
    if (pending != cudaSuccess) detail += std::string(" left CUDA error ") + cudaGetErrorName(pending);
    return {passed, detail};
}

const NegativeCase kNegativeCases[] = {
    {"head_dim 20 (not a multiple of 8)", [](fas_fwd_args& a) { a.head_dim = 20; }},
    {"q misaligned by 2 bytes", [](fas_fwd_args& a) { a.q = static_cast<const char*>(a.q) + 2; }},
    {"only cu_seqlens_q set", [](fas_fwd_args& a) { a.cu_seqlens_q = static_cast<const int32_t*>(a.k); }},
    {"num_heads_q 3 with num_heads_k 2", [](fas_fwd_args& a) { a.num_heads_q = 3; a.num_heads_k = 2; }},
    {"struct_size too small", [](fas_fwd_args& a) { a.struct_size = sizeof(size_t); }},
    {"e4m3 dtype on fas_fwd (plans only)", [](fas_fwd_args& a) { a.dtype = FAS_DTYPE_E4M3; }},
};

// Plan misuse: each must be refused with FAS_ERROR_INVALID_ARGUMENT, a message, no CUDA error.
CaseOutcome run_plan_negative_case(int which, fas_dtype dtype, cudaStream_t stream, const char** description) {
    static const char* const kDescriptions[] = {
        "fas_plan_run with a NULL plan",
        "fas_plan_create with device (not host) cu_seqlens",
        "fas_plan_create with decreasing cu_seqlens_q",
        "fas_plan_run with q misaligned by 2 bytes",
        "fas_plan_run_args struct_size too small",
    };
    *description = kDescriptions[which];
    DeviceBuffer q_dev(1 << 16), k_dev(1 << 16), v_dev(1 << 16), out_dev(1 << 16), offsets_dev(64);
    const int32_t good_offsets[3] = {0, 4, 9};
    const int32_t bad_offsets[3] = {0, 5, 3};
    CUDA_CHECK(cudaMemcpy(offsets_dev.as<void>(), good_offsets, sizeof good_offsets, cudaMemcpyHostToDevice));
    fas_plan_args plan_args;
    fas_plan_args_init(&plan_args);
    plan_args.dtype = dtype;
    plan_args.cu_seqlens_q = which == 1 ? offsets_dev.as<int32_t>() : which == 2 ? bad_offsets : good_offsets;
    plan_args.cu_seqlens_k = which == 1 ? offsets_dev.as<int32_t>() : good_offsets;
    plan_args.batch_size = 2;
    plan_args.num_heads_q = 2;
    plan_args.num_heads_k = 1;
    plan_args.head_dim = 128;
    plan_args.causal = 1;
    plan_args.stream = stream;
    fas_plan_run_args run_args;
    fas_plan_run_args_init(&run_args);
    run_args.q = which == 3 ? static_cast<const void*>(q_dev.as<char>() + 2) : q_dev.as<void>();
    run_args.k = k_dev.as<void>();
    run_args.v = v_dev.as<void>();
    run_args.out = out_dev.as<void>();
    run_args.stream = stream;
    if (which == 4) run_args.struct_size = sizeof(size_t);
    fas_status status;
    fas_plan* plan = nullptr;
    if (which == 0) {
        status = fas_plan_run(nullptr, &run_args);
    } else if (which == 1 || which == 2) {
        status = fas_plan_create(&plan_args, &plan);
    } else {
        if (fas_plan_create(&plan_args, &plan) != FAS_SUCCESS) {
            return {false, std::string("setup: fas_plan_create failed: ") + fas_get_last_error()};
        }
        status = fas_plan_run(plan, &run_args);
    }
    const std::string message = fas_get_last_error();
    if (plan != nullptr) fas_plan_destroy(plan);
    const cudaError_t pending = cudaPeekAtLastError();
    const bool passed = status == FAS_ERROR_INVALID_ARGUMENT && !message.empty() && pending == cudaSuccess;
    std::string detail = "status=" + std::to_string(static_cast<int>(status)) + " message=\"" + message + "\"";
    if (pending != cudaSuccess) detail += std::string(" left CUDA error ") + cudaGetErrorName(pending);
    return {passed, detail};
}
constexpr int kNumPlanNegativeCases = 5;

// ---------------------------------------------------------------------------------------------
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
    CUDA_CHECK(cudaMemcpy(q_dev.as<void>(), q.bits.data(), q_dev.bytes(), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(k_dev.as<void>(), k.bits.data(), k_dev.bytes(), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(v_dev.as<void>(), v.bits.data(), v_dev.bytes(), cudaMemcpyHostToDevice));
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
        fas_plan_args args;
        fas_plan_args_init(&args);
        args.dtype = dtype;
        args.cu_seqlens_q = offsets[i].data();
        args.cu_seqlens_k = offsets[i].data();
        args.batch_size = 3;
        args.num_heads_q = kHeadsQ;
        args.num_heads_k = kHeadsKv;
        args.head_dim = kHeadDim;
        args.causal = 1;
        args.disable_sm90 = fa2_built && i % 4 == 3 ? 1 : 0;
        args.stream = stream;
        return fas_plan_create(&args, plan);
    };
    const auto run_plan = [&](const fas_plan* plan, void* out, cudaStream_t stream) {
        fas_plan_run_args args;
        fas_plan_run_args_init(&args);
        args.q = q_dev.as<void>();
        args.k = k_dev.as<void>();
        args.v = v_dev.as<void>();
        args.out = out;
        args.stream = stream;
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
};

void print_usage(FILE* stream, const char* program) {
    std::fprintf(stream,
                 "usage: %s [--dtype fp16|bf16|all] [--quick] [--seed N]\n"
                 "          [--heads-q N] [--heads-kv N] [--head-dim N] [--causal 0|1] [--seqlens a,b,c]\n"
                 "Without shape options: Qwen2.5-VL-3B LLM and vision shapes, one case per compiled kernel and\n"
                 "invalid-argument checks. With any of --heads-q/--heads-kv/--head-dim/--causal/--seqlens: only\n"
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
        if (flag == "--dtype") {
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
// Driver

struct Tally {
    int passed = 0;
    int failed = 0;
    int skipped = 0;
};

void report_attention_case(const AttentionCase& c, uint64_t seed, cudaStream_t stream, Tally* tally) {
    int kernel_head_dim = 0;
    const bool servable =
        c.use_plan ? fas_query_plan_support(c.fp8 ? FAS_DTYPE_E4M3 : c.dtype, c.head_dim, c.causal, nullptr,
                                            &kernel_head_dim) == FAS_SUCCESS
                   : fas_query_support(c.dtype, c.head_dim, c.causal, &kernel_head_dim) == FAS_SUCCESS;
    CaseOutcome outcome{false, ""};
    if (!servable) {
        outcome.detail = std::string("fas_query_support: ") + fas_get_last_error();
    } else {
        try {
            outcome = run_attention_case(c, seed, stream);
        } catch (const std::exception& error) {
            outcome = {false, error.what()};
        }
    }
    std::printf("[%s] %-22s %s%s hdim=%d(kernel %d) causal=%d layout=%s heads=%d/%d %s | %s\n",
                outcome.passed ? "PASS" : "FAIL", c.config.c_str(), c.fp8 ? "e4m3->" : "", dtype_name(c.dtype), c.head_dim,
                kernel_head_dim, c.causal ? 1 : 0, c.varlen ? "varlen" : "batch", c.heads_q, c.heads_kv,
                lengths_summary(c).c_str(), outcome.detail.c_str());
    std::fflush(stdout);
    ++(outcome.passed ? tally->passed : tally->failed);
}

AttentionCase varlen_case(std::string config, fas_dtype dtype, int heads_q, int heads_kv, int head_dim, bool causal,
                          std::vector<int> seqlens) {
    AttentionCase c{std::move(config), dtype, heads_q, heads_kv, head_dim, causal, true, seqlens, seqlens};
    return c;
}

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
    // Every compiled kernel once, GQA ratio 4, padded row strides.
    for (int index = 0; index < fas_num_kernels(); ++index) {
        fas_kernel_info info;
        if (fas_get_kernel_info(index, &info) != FAS_SUCCESS || info.out_dtype != dtype) continue;
        const std::string config = std::string("kernel-") + (info.split_kv ? "splitkv" : "plain");
        const bool fp8 = info.dtype == FAS_DTYPE_E4M3;
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
            // Thousands of short sequences: more query tiles per head (5000) than the 4096 up to
            // which FlashInfer's own planner used the per-head schedule.
            if (!quick) {
                std::vector<int> many(5000);
                for (size_t i = 0; i < many.size(); ++i) many[i] = 1 + static_cast<int>(i % 3);
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
    for (fas_dtype dtype : dtypes) {
        std::vector<AttentionCase> cases;
        if (options.custom) {
            cases.push_back(varlen_case("custom", dtype, options.heads_q, options.heads_kv, options.head_dim,
                                        options.causal, options.seqlens));
        } else {
            cases = default_cases(dtype, options.quick, &tally);
        }
        for (const AttentionCase& c : cases) report_attention_case(c, case_seed++, stream, &tally);
    }
    if (!options.custom) {
        for (const NegativeCase& negative : kNegativeCases) {
            CaseOutcome outcome{false, ""};
            try {
                outcome = run_negative_case(negative, dtypes.front(), stream);
            } catch (const std::exception& error) {
                outcome = {false, error.what()};
            }
            std::printf("[%s] negative: %s | %s\n", outcome.passed ? "PASS" : "FAIL", negative.description,
                        outcome.detail.c_str());
            ++(outcome.passed ? tally.passed : tally.failed);
        }
        // Plan misuse needs a plan that can be made: any kernel of head dim >= 128 for causal
        // dtypes.front() (a plan of either family).
        if (fas_query_plan_support(dtypes.front(), 128, 1, nullptr, nullptr) == FAS_SUCCESS) {
            for (int which = 0; which < kNumPlanNegativeCases; ++which) {
                const char* description = "";
                CaseOutcome outcome{false, ""};
                try {
                    outcome = run_plan_negative_case(which, dtypes.front(), stream, &description);
                } catch (const std::exception& error) {
                    outcome = {false, error.what()};
                }
                std::printf("[%s] negative: %s | %s\n", outcome.passed ? "PASS" : "FAIL", description,
                            outcome.detail.c_str());
                ++(outcome.passed ? tally.passed : tally.failed);
            }
            std::string description;
            CaseOutcome outcome{false, ""};
            try {
                outcome = run_plan_churn_case(dtypes.front(), stream, &description);
            } catch (const std::exception& error) {
                outcome = {false, error.what()};
            }
            std::printf("[%s] %s | %s\n", outcome.passed ? "PASS" : "FAIL", description.c_str(), outcome.detail.c_str());
            ++(outcome.passed ? tally.passed : tally.failed);
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

int main(int argc, char** argv) {
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
