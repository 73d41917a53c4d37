// The paged kernels of this build, from the build-generated kernel_registry.inc: each is a pair
// of explicit specializations (launch_paged, occupancy_paged) defined in its own kernel TU
// (kernels/paged_*.cu). Which kernel serves a layout is decided here.
#include "core/status.h"
#include "paged/paged.h"

// This build's paged kernels, declared as generated with their TUs (kernelgen.registry_text).
#define FAS_DECLARE_PAGED
#include "kernel_registry.inc"

namespace fas_paged {

namespace {

// Ends with a sentinel (launch == nullptr) so that a build without paged kernels still has a
// valid array; the count excludes it.
#define FAS_PAGED(DtypeEnum, KvEnum, HeadDim, IsCausal, TileQ, InfoFamily)                 \
    {DtypeEnum,                                                                            \
     KvEnum,                                                                               \
     HeadDim,                                                                              \
     IsCausal,                                                                             \
     TileQ,                                                                                \
     InfoFamily,                                                                           \
     &launch_paged<DtypeEnum, KvEnum, HeadDim, IsCausal, TileQ>,                           \
     &occupancy_paged<DtypeEnum, KvEnum, HeadDim, IsCausal, TileQ>},
const Kernel kTable[] = {
#include "kernel_registry.inc"
    {FAS_DTYPE_FP16, FAS_DTYPE_FP16, 0, false, 0, nullptr, nullptr, nullptr},
};
constexpr int kNumKernels = static_cast<int>(sizeof(kTable) / sizeof(kTable[0])) - 1;

const Kernel* find(fas_dtype dtype, fas_dtype kv_dtype, int head_dim, bool causal, int tile_q) {
    for (int i = 0; i < kNumKernels; ++i) {
        const Kernel& entry = kTable[i];
        if (entry.dtype == dtype && entry.kv_dtype == kv_dtype && entry.head_dim == head_dim &&
            entry.causal == causal && entry.tile_q == tile_q) {
            return &entry;
        }
    }
    return nullptr;
}

// "bf16", or "bf16 with e4m3 KV" where the caches differ from q.
std::string dtypes_name(fas_dtype dtype, fas_dtype kv_dtype) {
    return kv_dtype == dtype ? std::string(fas::dtype_name(dtype))
                             : fas::concat(fas::dtype_name(dtype), " with ", fas::dtype_name(kv_dtype), " KV");
}

}  // namespace

int num_kernels() { return kNumKernels; }

const Kernel& kernel(int index) { return kTable[index]; }

bool has_kernel(fas_dtype dtype, fas_dtype kv_dtype, int head_dim, bool causal) {
    for (int i = 0; i < kNumKernels; ++i) {
        const Kernel& entry = kTable[i];
        if (entry.dtype == dtype && entry.kv_dtype == kv_dtype && entry.head_dim == head_dim &&
            entry.causal == causal) {
            return true;
        }
    }
    return false;
}

const Kernel* choose_kernel(fas_dtype dtype, fas_dtype kv_dtype, int head_dim, bool causal, int max_query_len,
                            int group, bool pair_tiles, std::string* why) {
    const int64_t packed_rows = static_cast<int64_t>(max_query_len) * group;
    // E4M3 caches have only the 16-row kernel; it takes any query length as several tiles.
    const bool fp8 = kv_dtype == FAS_DTYPE_E4M3;
    const bool paired = pair_tiles && has_pair_stream(head_dim, fp8) && packed_rows <= kPairTileRows;
    if (packed_rows <= 16 || fp8 || paired) {
        // One query sees every key with or without the (bottom-right) causal mask.
        const Kernel* small = find(dtype, kv_dtype, head_dim, causal || max_query_len <= 1, 16);
        if (small != nullptr) return small;
    }
    if (!fp8) {
        if (const Kernel* wide = find(dtype, kv_dtype, head_dim, causal, 64)) return wide;
    }
    std::string built;
    for (int i = 0; i < kNumKernels; ++i) {
        const Kernel& entry = kTable[i];
        built += fas::concat(built.empty() ? "" : ", ", fas::dtype_name(entry.dtype),
                             entry.kv_dtype != entry.dtype ? fas::concat("/", fas::dtype_name(entry.kv_dtype), "-kv")
                                                           : std::string(),
                             "/hd", entry.head_dim, entry.causal ? "/causal" : "/full", "/tile", entry.tile_q);
    }
    *why = fas::concat("no paged kernel ", dtypes_name(dtype, kv_dtype), "/hd", head_dim, causal ? "/causal" : "/full",
                       " is built for ", max_query_len, " queries x ", group,
                       " packed heads per tile (paged kernels of this build: ", built.empty() ? "none" : built,
                       "; they serve their exact head dim, fp16/bf16 q with caches of q's type or e4m3; e4m3 q runs on the "
                       "e4m3-KV kernel of its out_dtype)");
    return nullptr;
}

}  // namespace fas_paged
