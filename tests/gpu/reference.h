// The CPU reference of the GPU test and the rule that decides whether an output is correct.
// reference.cpp implements both; the cases, the workspace-bounds check and the accepted
// shared-buffer layouts of misuse.cpp compare their outputs through compare_with_reference.
//
// THE CORRECTNESS RULE
// Inputs are random normal values rounded to the case's dtype, or for FP8 cases e4m3 values
// with one fp32 descale factor per head; the reference reads exactly the values the device
// reads (for FP8: stored e4m3 value * descale), so input rounding is never counted as error.
// Two CPU results per output element:
//   ref_fp32  exact attention: softmax(scale * q.k^T) v with scale = 1/sqrt(head_dim) (capped as
//             cap * tanh(s / cap) for softcap cases) and the bottom-right causal or local-window mask, float dot products, exponentials and sums in double,
//             one division by the row sum at the end; with sinks, exp(sink of the head) joins the
//             sum (and the LSE) of every row that sees a key;
//   same      the same computation at the kernel's precision: every probability is rounded as
//             the kernel rounds it before the P*V product (to the 16-bit dtype; for FP8 inputs
//             p * 448 to e4m3, then / 448), the row sum uses the unrounded probabilities, and
//             the result is rounded to the output dtype.
// An output passes when all of these hold:
//   1. out is filled with NaN (bits 0xFFFF) before the call; every element of every query row
//      must then be finite, so an element the kernel did not write fails;
//   2. where a row stride is wider than heads * head_dim, the padding still holds that NaN;
//   3. max |out - ref_fp32| <= 2 * max |same - ref_fp32|, both maxima over every output element
//      of the case: the kernel may be at most twice as far from the exact result as a careful
//      implementation at its own precision;
//   4. fp16 / bf16 inputs also meet a fixed bound: max |out - ref_fp32| <= a + a * max |ref_fp32|
//      with a = 2e-3 for fp16 (11 significant bits) and 1.6e-2 for bf16 (8 bits); FP8 cases have
//      only rule 3;
//   5. the natural-log LSE, where the case asks for it (poisoned with NaN as well): a row that
//      sees no key must hold +infinity, every other row a finite value with
//      max |lse - ref_lse| <= 1e-3 + 1e-4 * max |ref_lse|, plus head_dim * 2^-13 for FP8 inputs
//      (the tensor cores keep about 14 bits of a sum of e4m3 products, so the score error grows
//      with the number of products);
// and, for plan cases run several times (cases.cpp), every run's out and LSE equal the first
// run's bit for bit.
#ifndef GPU_TEST_REFERENCE_H
#define GPU_TEST_REFERENCE_H

#include "gpu_test.h"

#include <cstddef>
#include <cstdint>
#include <vector>

namespace gpu_test {

struct Reference {
    std::vector<float> out;       // ref_fp32, [total_q, heads_q, head_dim]
    std::vector<float> out_same;  // same, [total_q, heads_q, head_dim]
    std::vector<double> lse;      // [total_q, heads_q]; +inf for rows that see no key
};

// q [total_q, heads_q, head_dim], k and v [total_k, heads_kv, head_dim], contiguous, sequences
// packed from row 0 in the order of c.seqlens_q / c.seqlens_k. Spread over the CPU cores.
Reference compute_reference(const AttentionCase& c, const std::vector<float>& q, const std::vector<float>& k,
                            const std::vector<float>& v, float scale);

enum class LseLayout {
    kHeadMajor,   // [heads_q, lse_rows], indexed by the device row (fas_fwd varlen, FA2 plans)
    kTokenMajor,  // [device rows, heads_q] (SM90 plans)
    kBatch,       // [batch, heads_q, max seqlen_q] (fas_fwd batch layout)
};

// Where the device output of a case lies in a host copy of it.
struct OutputView {
    const uint16_t* out;           // row r of the case (r from 0) at out + (first_row + r) * row_stride
    size_t row_stride;             // elements
    size_t first_row = 0;          // offsets that start above 0 (cu_seqlens_q[0] > 0)
    bool padding_poisoned = true;  // rule 2 applies (false where another tensor lives in the padding)
    const float* lse = nullptr;    // host copy of the LSE; nullptr = not requested, rule 5 skipped
    LseLayout lse_layout = LseLayout::kHeadMajor;
    size_t lse_rows = 0;           // head stride of a head-major LSE
};

struct Comparison {
    bool passed = false;
    double max_out_error = 0.0;  // max |out - ref_fp32|
    double out_limit = 0.0;      // rule 3: 2 * max |same - ref_fp32|
    double max_lse_error = 0.0;
    double lse_limit = 0.0;      // rule 5
    size_t non_finite_out = 0;   // rule 1
    size_t touched_padding = 0;  // rule 2
    size_t lse_mismatches = 0;   // rule 5: non-finite, or not +inf where no key is seen
};

// Applies the rule above to one output of case c.
Comparison compare_with_reference(const AttentionCase& c, const Reference& ref, const OutputView& view);

}  // namespace gpu_test

#endif  // GPU_TEST_REFERENCE_H
