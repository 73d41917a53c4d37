// fp16 by hand for the examples' host code (round to nearest even), so that a program needs no
// CUDA half header on the host: to_half for inputs, from_half for what the device wrote.
#ifndef FLASH_ATTN_STANDALONE_EXAMPLES_HALF_H
#define FLASH_ATTN_STANDALONE_EXAMPLES_HALF_H

#include <cmath>
#include <cstdint>
#include <cstring>

inline uint16_t to_half(float value) {
    uint32_t bits;
    std::memcpy(&bits, &value, sizeof bits);
    const uint32_t sign = (bits >> 16) & 0x8000u;
    const int exponent = static_cast<int>((bits >> 23) & 0xffu) - 127 + 15;
    uint32_t mantissa = bits & 0x7fffffu;
    if (((bits >> 23) & 0xffu) == 0xffu) return static_cast<uint16_t>(sign | 0x7c00u | (mantissa ? 0x200u : 0u));
    if (exponent >= 31) return static_cast<uint16_t>(sign | 0x7c00u);
    int shift = 13;
    uint32_t half = sign | (static_cast<uint32_t>(exponent) << 10) | (mantissa >> 13);
    if (exponent <= 0) {  // subnormal, or zero below half the smallest subnormal
        if (exponent < -10) return static_cast<uint16_t>(sign);
        mantissa |= 0x800000u;
        shift = 14 - exponent;
        half = sign | (mantissa >> shift);
    }
    const uint32_t rest = mantissa & ((1u << shift) - 1);
    const uint32_t halfway = 1u << (shift - 1);
    if (rest > halfway || (rest == halfway && (half & 1u))) ++half;  // a carry into the exponent is right
    return static_cast<uint16_t>(half);
}

inline float from_half(uint16_t half) {
    const int exponent = (half >> 10) & 0x1f;
    const uint32_t mantissa = half & 0x3ffu;
    float magnitude;
    if (exponent == 0) magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    else if (exponent == 31) magnitude = mantissa ? NAN : INFINITY;
    else magnitude = std::ldexp(static_cast<float>(mantissa | 0x400u), exponent - 25);
    return (half & 0x8000u) ? -magnitude : magnitude;
}

#endif  // FLASH_ATTN_STANDALONE_EXAMPLES_HALF_H
