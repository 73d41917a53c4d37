// Attention sinks in the SM90 16-bit kernels (SINKS in flash_attn_standalone_plan.h): one logit per
// query head that joins each row's softmax denominator and adds nothing to its output. A work tile
// of these kernels holds one query head, so the sink is one register per thread, loaded when the
// tile starts and first used at the softmax's finalize, after the mainloop (used at once, the load
// held every tile's consumers for its latency: 4% of a prefill of 128-key windows); it enters once
// per row, after the quad's partial sums meet. Plans without sinks pass a NULL array and keep the
// upstream arithmetic exactly (the finalize branches on the pointer, uniform across the CTA).
#ifndef FAS_SM90_SINKS_CUH
#define FAS_SM90_SINKS_CUH

#include <cstdint>

#include <cutlass/cutlass.h>

#include <flashinfer/attention/hopper/attention_updater.cuh>
#include <flashinfer/attention/hopper/variant_helper.cuh>
#include <flashinfer/math.cuh>

#include "sm90/softmax.cuh"

namespace fas_sm90 {

// A head's sink logit (natural-log units), loaded here and used late (see above).
__device__ __forceinline__ float load_sink(const float* sinks, uint32_t qo_head) {
    return sinks == nullptr ? 0.f : __ldg(sinks + qo_head);
}

// The kernels' online softmax (sm90/softmax.cuh) with the sink counted in finalize: a row's
// denominator becomes sum + 2^(sink - m) (m: the row's scaled max), computed against max(m, sink)
// so that neither term overflows; rows that saw no key keep the upstream result (out 0).
template <int NUM_ROWS_PER_THREAD, int HeadDim, bool Packed = false>
struct SinkSoftmax : Softmax<NUM_ROWS_PER_THREAD, HeadDim, /*Fp8=*/false, /*Softcap=*/false, Packed> {
    using Base = Softmax<NUM_ROWS_PER_THREAD, HeadDim, /*Fp8=*/false, /*Softcap=*/false, Packed>;
    bool has_sink;
    float sink_logit;  // natural-log units

    CUTLASS_DEVICE SinkSoftmax(float sm_scale_log2, bool has, float logit)
        : Base(sm_scale_log2), has_sink(has), sink_logit(logit) {}

    template <typename Tensor0>
    __forceinline__ __device__ void finalize(Tensor0& acc_s, float pv_scale = 1.f) {
        if (!has_sink) {
            Base::finalize(acc_s, pv_scale);
            return;
        }
        const float sink = sink_logit * flashinfer::math::log2e;
        flashinfer::SumOp<float> sum_op;
        flashinfer::quad_allreduce_(this->row_sum, this->row_sum, sum_op);
#pragma unroll
        for (int mi = 0; mi < cute::size(this->row_max); ++mi) {
            const float sum = this->row_sum(mi);
            const float m = this->row_max(mi) * this->sm_scale_log2;
            if (sum > 0.f) {
                const float top = fmaxf(m, sink);
                const float total = sum * exp2f(m - top) + exp2f(sink - top);  // in units of 2^top
                this->scores_scale(mi) = pv_scale * exp2f(m - top) / total;
                this->row_sum(mi) = top + flashinfer::math::ptx_log2(total);
            } else {
                this->scores_scale(mi) = 0.f;
                this->row_sum(mi) = m + flashinfer::math::ptx_log2(sum);
            }
        }
    }
};

// The plain 16-bit variant (varlen, windowed and paged kernels) of head dim HeadDim: FlashInfer's
// StandardAttention (softmax scale, identity logits) with the sink of the tile's query head.
// Packed: the packed kernels' (sm90/segment_mask.cuh), whose softmax choice is their own.
template <int HeadDim, bool Packed = false>
struct SinkAttention : flashinfer::AttentionVariantBase {
    float sm_scale_log2;
    float scale_pv = 1.f;  // no V scale in 16-bit kernels
    bool has_sink;
    float sink;  // natural-log units

    template <typename MainloopParams, typename BlockCoord>
    __device__ SinkAttention(const MainloopParams& params, const BlockCoord& block_coord) {
        const auto [q_tile, qo_head, kv_head, qo_start, kv_start, qo_len, kv_len, batch] = block_coord;
        sm_scale_log2 = params.additional_params.sm_scale * flashinfer::math::log2e;
        has_sink = params.additional_params.sinks != nullptr;
        sink = load_sink(params.additional_params.sinks, static_cast<uint32_t>(qo_head));
    }

    template <int NUM_ROWS_PER_THREAD>
    __device__ auto GetAttentionUpdater() {
        return SinkSoftmax<NUM_ROWS_PER_THREAD, HeadDim, Packed>(sm_scale_log2, has_sink, sink);
    }
};

}  // namespace fas_sm90

#endif  // FAS_SM90_SINKS_CUH
