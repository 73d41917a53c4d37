// The stream kernel's item handoff over e4m3 caches (decode_tma.cuh): the producer warp, which
// describes every item from loads issued ahead anyway (ItemStream), hands each item to the
// consumer warps through a small ring of slots in shared memory: the item's description, its raw
// Q tile and its descales, copied with cp.async when the producer reaches the item (a few stages
// before the consumers do). The consumers then start an item without a load of global memory.
//
// Why: consumers that described their item and loaded its Q and descales at the item's start
// waited for each load behind the ring's copies in flight (several microseconds on an H200,
// docs/design/decode-producer.md), ~2.7 us an item at 256 x 1k, e4m3 hd128; loading them an item
// ahead in registers instead spilled the wide kernel (168 registers) and was slower
// (docs/design/decode-e4m3.md). 16-bit caches keep their own way (Q an item ahead by cp.async
// into the other Q buffer, ItemStream in the consumers): their kernels are unchanged.
//
// A slot: two mbarriers (`full`: 32 producer lanes' cp.async arrivals plus lane 0's arrival
// after it wrote the description; `empty`: one consumer thread's arrival once every consumer has
// read the slot), the Item, the K and V descales, the 16 rows' q descales, then the raw Q tile
// (16 rows x head dim, q's element size; rows past the queries zero-filled).
#ifndef FAS_PAGED_DECODE_HANDOFF_CUH
#define FAS_PAGED_DECODE_HANDOFF_CUH

#include <cstdint>

#include "paged/decode_items.cuh"
#include "paged/mbarrier.cuh"

namespace fas_paged {
namespace decode {

struct ItemSlotHeader {
    uint64_t full, empty;
    Item item;
    float k_scale, v_scale;
    float q_descale[16];
};
constexpr int kItemSlotHeaderBytes = 256;  // raw Q starts 16-byte aligned after it
static_assert(sizeof(ItemSlotHeader) <= kItemSlotHeaderBytes, "the slot header fits its bytes");

template <typename S>
__device__ __forceinline__ ItemSlotHeader* item_slot(uint8_t* slots, int n) {
    return reinterpret_cast<ItemSlotHeader*>(slots + (n % S::kItemSlots) * S::kItemSlotBytes);
}
template <typename S>
__device__ __forceinline__ uint8_t* item_slot_q(uint8_t* slots, int n) {
    return slots + (n % S::kItemSlots) * S::kItemSlotBytes + kItemSlotHeaderBytes;
}

// One thread, at the kernel's start (before the mbarrier-init fence).
template <typename S>
__device__ __forceinline__ void init_item_slots(uint8_t* slots) {
    for (int k = 0; k < S::kItemSlots; ++k) {
        tma::init(&item_slot<S>(slots, k)->full, 33);
        tma::init(&item_slot<S>(slots, k)->empty, 1);
    }
}

namespace handoff {
// 16 bytes (or 4: descales) from global to shared memory; src_bytes 0 fills zeros.
template <int Bytes>
__device__ __forceinline__ void copy(void* dst, const void* src, int src_bytes) {
    if constexpr (Bytes == 16) {
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(tma::smem(dst)), "l"(src), "r"(src_bytes)
                     : "memory");
    } else {
        asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(tma::smem(dst)), "l"(src), "r"(src_bytes)
                     : "memory");
    }
}
}  // namespace handoff

// The producer warp hands over its n-th item w (every lane calls it): waits until the slot's
// previous item has been read, then writes the description (lane 0) and issues the copies.
// QBytes: q's element size (1: e4m3 q).
template <typename S, int HeadDim, int QBytes>
__device__ __forceinline__ void hand_over(const LaunchArgs& a, const Item& w, uint8_t* slots, int n, int lane) {
    constexpr int kPiecesPerRow = HeadDim * QBytes / 16;
    ItemSlotHeader* const h = item_slot<S>(slots, n);
    uint8_t* const raw = item_slot_q<S>(slots, n);
    if (n >= S::kItemSlots) tma::wait(&h->empty, ((n / S::kItemSlots) + 1) & 1);  // its previous item, read
    const int group = a.num_heads_q / a.num_heads_k;
    const uint8_t* const q = static_cast<const uint8_t*>(a.q);
    for (int i = lane; i < 16 * kPiecesPerRow; i += 32) {
        const int row = i / kPiecesPerRow, packed = w.qo_tile * 16 + row, token = packed / group;
        const bool valid = token < w.qo_len;
        const int64_t at = static_cast<int64_t>(w.q_begin + (valid ? token : 0)) * a.q_row_stride +
                           (w.kv_head * group + packed % group) * HeadDim;
        handoff::copy<16>(raw + i * 16, q + at * QBytes + (i % kPiecesPerRow) * 16, valid ? 16 : 0);
    }
    if (lane < 16 && QBytes == 1 && a.q_descale != nullptr) {
        handoff::copy<4>(&h->q_descale[lane], a.q_descale + w.kv_head * group + (w.qo_tile * 16 + lane) % group, 4);
    }
    if (lane == 16 && a.k_descale != nullptr) handoff::copy<4>(&h->k_scale, a.k_descale + w.kv_head, 4);
    if (lane == 17 && a.v_descale != nullptr) handoff::copy<4>(&h->v_scale, a.v_descale + w.kv_head, 4);
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(tma::smem(&h->full)) : "memory");
    if (lane == 0) {
        h->item = w;
        tma::arrive(&h->full);  // release: the description before the arrival
    }
}

}  // namespace decode
}  // namespace fas_paged

#endif  // FAS_PAGED_DECODE_HANDOFF_CUH
