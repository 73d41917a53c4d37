// The stream decode kernel's synchronization and copy primitives (decode_tma.cuh, its producer
// and the item handoff): mbarriers, the TMA engine's box copies, and the consumer warps' named
// barriers.
#ifndef FAS_PAGED_MBARRIER_CUH
#define FAS_PAGED_MBARRIER_CUH

#include <cuda.h>

#include <cstdint>

namespace fas_paged {
namespace decode {
namespace tma {

__device__ __forceinline__ uint32_t smem(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }
__device__ __forceinline__ void init(uint64_t* bar, int count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem(bar)), "r"(count));
}
__device__ __forceinline__ void arrive_expect(uint64_t* bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem(bar)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void arrive(uint64_t* bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem(bar)) : "memory");
}
// Until the barrier's phase of this parity has completed.
__device__ __forceinline__ void wait(uint64_t* bar, uint32_t parity) {
    asm volatile(
        "{\n .reg .pred done;\n WAIT:\n mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
        " @done bra DONE;\n bra WAIT;\n DONE:\n }\n" ::"r"(smem(bar)),
        "r"(parity)
        : "memory");
}
// One box of the tensor map at (x, y, z, w) into shared memory, completing on `bar`
// (tensor_map.h: element, segment, row, page).
__device__ __forceinline__ void copy(void* dst, const CUtensorMap* map, int x, int y, int z, int w, uint64_t* bar) {
    asm volatile(
        "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, %6}], "
        "[%2];" ::"r"(smem(dst)),
        "l"(map), "r"(smem(bar)), "r"(x), "r"(y), "r"(z), "r"(w)
        : "memory");
}
// Orders this thread's ordinary shared-memory writes before later copies into the same bytes.
__device__ __forceinline__ void fence_async() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }
// A barrier of the consumer warps only (the producer never joins).
template <int Threads>
__device__ __forceinline__ void consumers_sync() {
    asm volatile("bar.sync 1, %0;" ::"n"(Threads) : "memory");
}

}  // namespace tma

}  // namespace decode
}  // namespace fas_paged

#endif  // FAS_PAGED_MBARRIER_CUH
