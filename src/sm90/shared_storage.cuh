// Shared-memory layout of our SM90 kernels.
//
// FlashInfer's layouts (hopper/kernel_traits.cuh, hopper/quantization/kernel_traits.cuh) put the
// output staging tile smem_o in a union with V (16-bit) or with V^T (FP8). Their producer
// therefore waits on barrier_O, which the consumers release after the first QK GEMM of the next
// work tile, before it loads that tile's K and V: every work tile starts with a load's latency
// exposed to the consumers, and short tiles (1k keys) pay it most.
//
// Where Q + stages x (K + V [+ V^T]) + O fits in a block's 227 KiB, smem_o gets its own space and
// barrier_O becomes a type whose operations do nothing, so the producer runs into the next work
// tile while the consumers finish the epilogue. Elsewhere (hdim 256) the upstream layout stays.
// The kernels reach barrier_O only through init/wait/arrive, and our epilogues
// (sm90/ordered_epilogue.cuh) order the reuse of smem_o between work tiles with a consumer
// barrier, which does not depend on barrier_O.
#ifndef FAS_SM90_SHARED_STORAGE_CUH
#define FAS_SM90_SHARED_STORAGE_CUH

#include <cstdint>
#include <type_traits>

#include <cute/container/array_aligned.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/pipeline/pipeline.hpp>

namespace fas_sm90 {

// Largest dynamic shared memory of one SM90 block.
constexpr std::size_t kMaxSmemBytes = 227 * 1024;

// Of one of `ctas` blocks resident on an SM: its 228 KiB shared out, 1 KiB of each reserved.
constexpr std::size_t max_smem_bytes(int ctas) { return ctas == 1 ? kMaxSmemBytes : (228 / ctas - 1) * 1024; }

// barrier_O where nothing else lives in smem_o's bytes: there is nothing to wait for.
struct NoOverlapBarrier {
    CUTLASS_DEVICE void init(uint32_t) const {}
    CUTLASS_DEVICE void wait(uint32_t) const {}
    CUTLASS_DEVICE void arrive(uint32_t, uint32_t) const {}
};

// Whether a kernel's smem_o shares its bytes with a V buffer (the upstream layouts).
template <typename SharedStorage>
constexpr bool kOOverlaysV = !std::is_same_v<decltype(SharedStorage::barrier_O), NoOverlapBarrier>;

template <typename T, typename Layout>
using SmemArray = cute::array_aligned<T, cute::cosize_v<Layout>>;

// 16-bit kernels: Q, K stages, V stages, O, each in its own bytes.
template <typename Traits>
struct SeparateOStorage {
    SmemArray<typename Traits::DTypeQ, typename Traits::SmemLayoutQ> smem_q;
    SmemArray<typename Traits::DTypeKV, typename Traits::SmemLayoutK> smem_k;
    SmemArray<typename Traits::DTypeKV, typename Traits::SmemLayoutV> smem_v;
    SmemArray<typename Traits::DTypeO, typename Traits::SmemLayoutO> smem_o;
    cutlass::arch::ClusterTransactionBarrier barrier_Q;
    NoOverlapBarrier barrier_O;
    typename Traits::MainloopPipeline::SharedStorage pipeline_k;
    typename Traits::MainloopPipeline::SharedStorage pipeline_v;
};

// FP8 kernels: the same plus the producer's transposed copy of V (an ldmatrix-only pipeline).
template <typename Traits>
struct SeparateOStorageFp8 {
    SmemArray<typename Traits::DTypeQ, typename Traits::SmemLayoutQ> smem_q;
    SmemArray<typename Traits::DTypeKV, typename Traits::SmemLayoutK> smem_k;
    SmemArray<typename Traits::DTypeKV, typename Traits::SmemLayoutV> smem_v;
    SmemArray<typename Traits::DTypeKV, typename Traits::SmemLayoutV> smem_vt;
    SmemArray<typename Traits::DTypeO, typename Traits::SmemLayoutO> smem_o;
    cutlass::arch::ClusterTransactionBarrier barrier_Q;
    NoOverlapBarrier barrier_O;
    typename Traits::MainloopPipeline::SharedStorage pipeline_k;
    typename Traits::MainloopPipeline::SharedStorage pipeline_v;
    typename cutlass::PipelineAsync<Traits::MainloopPipeline::Stages>::SharedStorage pipeline_vt;
};

// The upstream traits with our layout where it fits; the kernel takes this as its Ktraits, the
// collectives keep the upstream traits (they take the storage type from the kernel's call).
// CtasPerSm blocks share an SM (sm90/tiles.h), each within its part of the shared memory.
template <typename Upstream, typename Separate, int CtasPerSm = 1>
struct KernelTraits : Upstream {
    static constexpr int kCtasPerSm = CtasPerSm;
    static constexpr bool kSeparateO = sizeof(Separate) <= max_smem_bytes(CtasPerSm);
    using SharedStorage = std::conditional_t<kSeparateO, Separate, typename Upstream::SharedStorage>;
    static_assert(sizeof(SharedStorage) <= max_smem_bytes(CtasPerSm),
                  "tile shape exceeds an SM90 block's shared memory (its share where CTAs share an SM)");
};

}  // namespace fas_sm90

#endif  // FAS_SM90_SHARED_STORAGE_CUH
