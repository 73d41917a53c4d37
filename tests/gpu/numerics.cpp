// Host-side numerics of the GPU test: float <-> fp16 / bf16 / FP8 e4m3 conversions, all
// round-to-nearest-even, and the random inputs the cases feed the library, already rounded to
// the dtype so that the CPU reference sees exactly the values the device sees.
#include "gpu_test.h"

#include <cmath>
#include <cstring>
#include <limits>

namespace gpu_test {
namespace {

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

}  // namespace

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

// e4m3: 1 sign, 4 exponent (bias 7), 3 mantissa bits.
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

CacheTensors random_caches(fas_dtype dtype, bool fp8, size_t rows, int heads, int head_dim, std::mt19937_64& rng) {
    CacheTensors caches;
    if (fp8) {
        caches.k8 = random_e4m3_tensor(rows, heads, head_dim, rng);
        caches.v8 = random_e4m3_tensor(rows, heads, head_dim, rng);
        caches.k.values = caches.k8.values;
        caches.v.values = caches.v8.values;
    } else {
        caches.k = random_tensor(dtype, rows * heads * head_dim, rng);
        caches.v = random_tensor(dtype, rows * heads * head_dim, rng);
    }
    return caches;
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

}  // namespace gpu_test
