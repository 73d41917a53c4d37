// The template every paged_prefill kernel TU instantiates: FlashInfer's
// BatchPrefillWithPagedKVCache kernel with our own tile choice (no runtime dispatch over tile
// shapes), launched on the plan's schedule, plus the merge of split partial results (merge.cuh).
// A TU holds the kernel twice: writing out (T), and writing a split plan's partial rows in fp32,
// so that the merge rounds once (16-bit partials put a second rounding into every output: on a
// split of 30000 keys they came out 2.1x as far from exact attention as the same computation
// rounded once, past the tests' rule of 2x).
// Only kernel TUs include this (it pulls in FlashInfer's headers); everything else sees paged.h.
#ifndef FAS_PAGED_LAUNCH_CUH
#define FAS_PAGED_LAUNCH_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <flashinfer/attention/default_prefill_params.cuh>
#include <flashinfer/attention/prefill.cuh>
#include <flashinfer/attention/variants.cuh>
#include <flashinfer/page.cuh>

#include "paged/merge.cuh"

namespace fas_paged {

// O: what the kernel writes, T (out) or float (a split plan's partial rows).
template <int Dtype, int KvDtype, int HeadDim, bool Causal, int TileQ, typename O = typename Element<Dtype>::type>
struct PagedTraits {
    static_assert(KvDtype == Dtype, "the 64-row kernel reads caches of q's type (e4m3 caches: decode.cuh)");
    using T = typename Element<Dtype>::type;
    using Params = flashinfer::BatchPrefillPagedParams<T, T, O, int32_t>;
    using Variant = flashinfer::DefaultAttention</*custom_mask=*/false, /*sliding_window=*/false,
                                                 /*logits_soft_cap=*/false, /*alibi=*/false>;
    static constexpr uint32_t kWarpsQ = flashinfer::get_num_warps_q(TileQ);
    static constexpr uint32_t kWarpsKV = flashinfer::get_num_warps_kv(TileQ);
    static constexpr uint32_t kMmaQ = flashinfer::get_num_mma_q(TileQ);
    // FlashInfer's launcher picks the largest KV tile that lets two CTAs share an SM's 228 KiB
    // on Hopper; these are its choices there, fixed at compile time (kv_tile_rows in paged.h).
    static constexpr uint32_t kMmaKV = kv_tile_rows(HeadDim, TileQ) / (16 * kWarpsKV);
    using KTraits = flashinfer::KernelTraits<Causal ? flashinfer::MaskMode::kCausal : flashinfer::MaskMode::kNone,
                                             TileQ, kMmaQ, kMmaKV, HeadDim / 16, HeadDim / 16, kWarpsQ, kWarpsKV,
                                             flashinfer::PosEncodingMode::kNone, T, T, O, float, int32_t, Variant>;
    static_assert(!KTraits::IsInvalid(), "FlashInfer rejects this tile shape");
    static constexpr size_t kSmemBytes = sizeof(typename KTraits::SharedStoragePaged);
    static_assert(2 * kSmemBytes <= 228 * 1024, "two CTAs per SM must fit Hopper's shared memory");
    static constexpr auto kernel = flashinfer::BatchPrefillWithPagedKVCacheKernel</*SAME_KV_STRIDES=*/false, KTraits, Params>;

};

// Called by every plan creation on the plan's device, before any of its runs: it also opts the
// kernel into its dynamic shared memory there (a per-device function attribute), so that runs
// need not.
template <int Dtype, int KvDtype, int HeadDim, bool Causal, int TileQ>
cudaError_t occupancy(DecodeShape shape, int* ctas_per_sm) {
    using Traits = PagedTraits<Dtype, KvDtype, HeadDim, Causal, TileQ>;
    using SplitTraits = PagedTraits<Dtype, KvDtype, HeadDim, Causal, TileQ, float>;
    static_assert(SplitTraits::kSmemBytes == Traits::kSmemBytes, "fp32 partials share the union of the Q/K/V tiles");
    if (shape != kShort) {  // only the decode kernel has other shapes
        *ctas_per_sm = 0;
        return cudaSuccess;
    }
    cudaError_t error =
        cudaFuncSetAttribute(Traits::kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Traits::kSmemBytes);
    if (error == cudaSuccess) {
        error = cudaFuncSetAttribute(SplitTraits::kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     SplitTraits::kSmemBytes);
    }
    if (error != cudaSuccess) return error;
    return cudaOccupancyMaxActiveBlocksPerMultiprocessor(ctas_per_sm, Traits::kernel, Traits::KTraits::NUM_THREADS,
                                                         Traits::kSmemBytes);
}

template <int Dtype, int KvDtype, int HeadDim, bool Causal, int TileQ, typename O>
cudaError_t launch_attention(const LaunchArgs& a, cudaStream_t stream) {
    using Traits = PagedTraits<Dtype, KvDtype, HeadDim, Causal, TileQ, O>;
    using T = typename Traits::T;
    using Params = typename Traits::Params;
    // FlashInfer's structs take mutable pointers; the kernel only reads these.
    const auto ids = [](const int32_t* p) { return const_cast<int32_t*>(p); };

    flashinfer::paged_kv_t<T, int32_t> paged;
    paged.page_size = flashinfer::uint_fastdiv(static_cast<uint32_t>(a.page_size));
    paged.num_heads = a.num_heads_k;
    paged.head_dim = HeadDim;
    paged.batch_size = a.batch_size;
    paged.stride_page = a.k_page_stride;
    paged.stride_n = a.k_row_stride;
    paged.stride_h = HeadDim;
    paged.v_stride_page = a.v_page_stride;
    paged.v_stride_n = a.v_row_stride;
    paged.v_stride_h = HeadDim;
    paged.k_data = static_cast<T*>(const_cast<void*>(a.k_cache));
    paged.v_data = static_cast<T*>(const_cast<void*>(a.v_cache));
    paged.indices = ids(a.page_indices);
    paged.indptr = ids(a.page_indptr);
    paged.last_page_len = ids(a.last_page_len);

    Params params;
    params.q = static_cast<T*>(const_cast<void*>(a.q));
    params.paged_kv = paged;
    params.q_indptr = ids(a.q_indptr);
    params.o = static_cast<O*>(a.split ? a.tmp_v : a.out);
    params.lse = a.split ? a.tmp_s : a.lse;
    params.group_size = flashinfer::uint_fastdiv(static_cast<uint32_t>(a.num_heads_q / a.num_heads_k));
    params.num_qo_heads = a.num_heads_q;
    params.q_stride_n = static_cast<int32_t>(a.q_row_stride);
    params.q_stride_h = HeadDim;
    params.window_left = -1;
    params.sm_scale = a.softmax_scale;
    params.rope_rcp_scale = 1.f;
    params.rope_rcp_theta = 1.f;
    params.request_indices = ids(a.request_indices);
    params.qo_tile_indices = ids(a.qo_tile_indices);
    params.kv_tile_indices = ids(a.kv_tile_indices);
    params.o_indptr = ids(a.o_indptr);
    params.kv_chunk_size_ptr = ids(a.kv_chunk_size);
    params.padded_batch_size = a.num_ctas;
    params.partition_kv = a.split;

    return launch_overlapped(Traits::kernel, dim3(a.num_ctas, 1, a.num_heads_k),
                             dim3(32, Traits::kWarpsQ, Traits::kWarpsKV), Traits::kSmemBytes, stream, params);
}

template <int Dtype, int KvDtype, int HeadDim, bool Causal, int TileQ>
cudaError_t run(const LaunchArgs& a, cudaStream_t stream) {
    using T = typename Element<Dtype>::type;
    if (!a.split) return launch_attention<Dtype, KvDtype, HeadDim, Causal, TileQ, T>(a, stream);
    const cudaError_t error = launch_attention<Dtype, KvDtype, HeadDim, Causal, TileQ, float>(a, stream);
    if (error != cudaSuccess) return error;
    return launch_merge<T, HeadDim>(a, stream);
}

}  // namespace fas_paged

#endif  // FAS_PAGED_LAUNCH_CUH
