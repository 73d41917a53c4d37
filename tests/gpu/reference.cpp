// The CPU reference (exact and same-precision attention) and compare_with_reference, which
// applies the correctness rule stated in reference.h.
#include "reference.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <thread>

namespace gpu_test {
namespace {

constexpr double kLseAbsTolerance = 1e-3;  // natural-log units
constexpr double kLseRelTolerance = 1e-4;
// Rule 5's FP8 allowance per summed product: at head dim 256 it is twice the largest error
// measured (1.7e-2).
constexpr double kFp8LsePerProduct = 1.0 / 8192.0;

struct Tolerance {
    double abs;
    double rel;
};

Tolerance output_tolerance(fas_dtype dtype) {
    // fp16 keeps 11 significant bits, bf16 8: the output is rounded to the dtype and so are the
    // softmax probabilities before the P*V product.
    return dtype == FAS_DTYPE_BF16 ? Tolerance{1.6e-2, 1.6e-2} : Tolerance{2e-3, 2e-3};
}

// Rounding of the softmax probabilities that a kernel of this case applies before the P*V
// product: to the 16-bit dtype, or for FP8 inputs to e4m3 after scaling by 448.
float round_probability(const AttentionCase& c, float p) {
    if (c.fp8) return e4m3_to_float(float_to_e4m3(p * kE4m3Max)) / kE4m3Max;
    return from_dtype_bits(c.dtype, to_dtype_bits(c.dtype, p));
}

// The same-precision result of a computation that splits the keys [first, end) into
// c.same_precision_chunks chunks of equal length, rounds each chunk's normalized output to the
// dtype and merges them by their weights (fas_fwd's key split), rounded once more.
template <typename VRow>
void same_precision_chunked(const AttentionCase& c, const std::vector<float>& scores, int first, int end,
                            const VRow& v_row, float* out) {
    const int d = c.head_dim, chunks = c.same_precision_chunks;
    std::vector<double> merged(d, 0.0), partial(d);
    double total = 0.0;
    const float top = *std::max_element(scores.begin() + first, scores.begin() + end);
    for (int chunk = 0; chunk < chunks; ++chunk) {
        const int lo = first + static_cast<int>(static_cast<int64_t>(end - first) * chunk / chunks);
        const int hi = first + static_cast<int>(static_cast<int64_t>(end - first) * (chunk + 1) / chunks);
        if (hi <= lo) continue;
        const float chunk_max = *std::max_element(scores.begin() + lo, scores.begin() + hi);
        std::fill(partial.begin(), partial.end(), 0.0);
        double sum = 0.0;
        for (int j = lo; j < hi; ++j) {
            const double p = std::exp(static_cast<double>(scores[j]) - chunk_max);
            const double p_rounded = round_probability(c, static_cast<float>(p));
            sum += p;
            const float* v_vec = v_row(j);
            for (int x = 0; x < d; ++x) partial[x] += p_rounded * v_vec[x];
        }
        const double weight = sum * std::exp(static_cast<double>(chunk_max) - top);
        for (int x = 0; x < d; ++x) {
            merged[x] += weight * from_dtype_bits(c.dtype, to_dtype_bits(c.dtype, static_cast<float>(partial[x] / sum)));
        }
        total += weight;
    }
    for (int x = 0; x < d; ++x) out[x] = from_dtype_bits(c.dtype, to_dtype_bits(c.dtype, static_cast<float>(merged[x] / total)));
}

}  // namespace

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
                // Bottom-right aligned masks: query i's diagonal key is i + sk - sq; causal sees
                // keys up to it, a window (left, right) those within left before and right after.
                const int diagonal = i + sk - sq;
                const int right = c.causal ? 0 : c.use_window ? c.window_right : -1;
                const int left = c.use_window ? c.window_left : -1;
                const int first = left < 0 ? 0 : std::max(0, diagonal - left);
                const int end = right < 0 ? sk : std::min(sk, diagonal + right + 1);
                const int visible = end - first;
                float* out_vec = &ref.out[(q_row * c.heads_q + head) * d];
                float* out_same_vec = &ref.out_same[(q_row * c.heads_q + head) * d];
                double& lse = ref.lse[q_row * c.heads_q + head];
                if (visible <= 0) {
                    lse = std::numeric_limits<double>::infinity();
                    continue;
                }
                float max_score = -std::numeric_limits<float>::infinity();
                for (int j = first; j < end; ++j) {
                    const float* k_vec = &k[((static_cast<size_t>(k_offsets[b]) + j) * c.heads_kv + kv_head) * d];
                    // Four partial sums (head_dim is a multiple of 8) shorten the add chain.
                    float partial[4] = {0.f, 0.f, 0.f, 0.f};
                    for (int x = 0; x < d; x += 4) {
                        for (int lane = 0; lane < 4; ++lane) partial[lane] += q_vec[x + lane] * k_vec[x + lane];
                    }
                    scores[j] = ((partial[0] + partial[1]) + (partial[2] + partial[3])) * scale;
                    if (c.softcap > 0.f) scores[j] = c.softcap * std::tanh(scores[j] / c.softcap);
                    max_score = std::max(max_score, scores[j]);
                }
                std::fill(accumulator.begin(), accumulator.end(), 0.0);
                std::fill(rounded_accumulator.begin(), rounded_accumulator.end(), 0.0);
                double sum = 0.0;
                for (int j = first; j < end; ++j) {
                    const double p = std::exp(static_cast<double>(scores[j]) - max_score);
                    const double p_rounded = round_probability(c, static_cast<float>(p));
                    sum += p;
                    const float* v_vec = &v[((static_cast<size_t>(k_offsets[b]) + j) * c.heads_kv + kv_head) * d];
                    for (int x = 0; x < d; ++x) {
                        accumulator[x] += p * v_vec[x];
                        rounded_accumulator[x] += p_rounded * v_vec[x];
                    }
                }
                if (!c.sinks.empty()) sum += std::exp(static_cast<double>(c.sinks[head]) - max_score);
                for (int x = 0; x < d; ++x) {
                    out_vec[x] = static_cast<float>(accumulator[x] / sum);
                    out_same_vec[x] = from_dtype_bits(c.dtype, to_dtype_bits(c.dtype, static_cast<float>(rounded_accumulator[x] / sum)));
                }
                if (c.same_precision_chunks > 0) {
                    const auto v_row = [&](int j) {
                        return &v[((static_cast<size_t>(k_offsets[b]) + j) * c.heads_kv + kv_head) * d];
                    };
                    same_precision_chunked(c, scores, first, end, v_row, out_same_vec);
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

Comparison compare_with_reference(const AttentionCase& c, const Reference& ref, const OutputView& view) {
    const int batch = static_cast<int>(c.seqlens_q.size());
    const int d = c.head_dim;
    const size_t row_elements = static_cast<size_t>(c.heads_q) * d;
    const int max_q = *std::max_element(c.seqlens_q.begin(), c.seqlens_q.end());
    Comparison result;
    double max_ref = 0.0, max_ref_lse = 0.0;
    double max_same_error = 0.0;  // of the same-precision result against ref_fp32
    int first_row_of_sequence = 0;
    for (int b = 0; b < batch; ++b) {
        for (int i = 0; i < c.seqlens_q[b]; ++i) {
            const size_t row = static_cast<size_t>(first_row_of_sequence + i);  // row of the reference
            const size_t device_row = view.first_row + row;
            const uint16_t* out_row = view.out + device_row * view.row_stride;
            for (int head = 0; head < c.heads_q; ++head) {
                for (int x = 0; x < d; ++x) {
                    const float got = from_dtype_bits(c.dtype, out_row[head * d + x]);
                    const float want = ref.out[(row * c.heads_q + head) * d + x];
                    if (!std::isfinite(got)) {
                        ++result.non_finite_out;
                        continue;
                    }
                    max_ref = std::max(max_ref, std::fabs(static_cast<double>(want)));
                    result.max_out_error = std::max(result.max_out_error, std::fabs(static_cast<double>(got) - want));
                    const float same = ref.out_same[(row * c.heads_q + head) * d + x];
                    max_same_error = std::max(max_same_error, std::fabs(static_cast<double>(same) - want));
                }
                if (view.lse == nullptr) continue;
                const size_t lse_index =
                    view.lse_layout == LseLayout::kTokenMajor  ? device_row * c.heads_q + head
                    : view.lse_layout == LseLayout::kHeadMajor ? head * view.lse_rows + device_row
                                                               : (static_cast<size_t>(b) * c.heads_q + head) * max_q + i;
                const double got_lse = view.lse[lse_index];
                const double want_lse = ref.lse[row * c.heads_q + head];
                if (std::isinf(want_lse)) {
                    if (!(std::isinf(got_lse) && got_lse > 0)) ++result.lse_mismatches;
                } else if (!std::isfinite(got_lse)) {
                    ++result.lse_mismatches;
                } else {
                    max_ref_lse = std::max(max_ref_lse, std::fabs(want_lse));
                    result.max_lse_error = std::max(result.max_lse_error, std::fabs(got_lse - want_lse));
                }
            }
            if (view.padding_poisoned) {
                for (size_t x = row_elements; x < view.row_stride; ++x) result.touched_padding += out_row[x] != kPoisonBits;
            }
        }
        first_row_of_sequence += c.seqlens_q[b];
    }
    const Tolerance tolerance = output_tolerance(c.dtype);
    result.out_limit = 2.0 * max_same_error;
    const double dtype_limit = tolerance.abs + tolerance.rel * max_ref;
    result.lse_limit = kLseAbsTolerance + kLseRelTolerance * max_ref_lse + (c.fp8 ? kFp8LsePerProduct * d : 0.0);
    result.passed = result.non_finite_out == 0 && result.lse_mismatches == 0 && result.touched_padding == 0 &&
                    result.max_out_error <= result.out_limit && (c.fp8 || result.max_out_error <= dtype_limit) &&
                    result.max_lse_error <= result.lse_limit;
    return result;
}

}  // namespace gpu_test
