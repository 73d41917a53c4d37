// The paged kernels of this build, from the build-generated kernel_registry.inc: each is a pair
// of explicit specializations (launch_paged, occupancy_paged) defined in its own kernel TU
// (kernels/paged_*.cu). Which kernel serves a layout is decided here.
#include "api/status.h"
#include "paged/paged.h"

#define FAS_PAGED(DtypeEnum, HeadDim, IsCausal, TileQ)                                                   \
    namespace fas_paged {                                                                                \
    template <>                                                                                          \
    cudaError_t launch_paged<DtypeEnum, HeadDim, IsCausal, TileQ>(const LaunchArgs&, cudaStream_t);      \
    template <>                                                                                          \
    cudaError_t occupancy_paged<DtypeEnum, HeadDim, IsCausal, TileQ>(bool, int*);                        \
    }
#include "kernel_registry.inc"

namespace fas_paged {

namespace {

// Ends with a sentinel (launch == nullptr) so that a build without paged kernels still has a
// valid array; the count excludes it.
#define FAS_PAGED(DtypeEnum, HeadDim, IsCausal, TileQ)                                        \
    {DtypeEnum, HeadDim, IsCausal, TileQ, &launch_paged<DtypeEnum, HeadDim, IsCausal, TileQ>, \
     &occupancy_paged<DtypeEnum, HeadDim, IsCausal, TileQ>},
const Kernel kTable[] = {
#include "kernel_registry.inc"
    {FAS_DTYPE_FP16, 0, false, 0, nullptr, nullptr},
};
constexpr int kNumKernels = static_cast<int>(sizeof(kTable) / sizeof(kTable[0])) - 1;

const Kernel* find(fas_dtype dtype, int head_dim, bool causal, int tile_q) {
    for (int i = 0; i < kNumKernels; ++i) {
        const Kernel& entry = kTable[i];
        if (entry.dtype == dtype && entry.head_dim == head_dim && entry.causal == causal && entry.tile_q == tile_q) {
            return &entry;
        }
    }
    return nullptr;
}

}  // namespace

int num_kernels() { return kNumKernels; }

const Kernel& kernel(int index) { return kTable[index]; }

bool has_kernel(fas_dtype dtype, int head_dim, bool causal) {
    for (int i = 0; i < kNumKernels; ++i) {
        const Kernel& entry = kTable[i];
        if (entry.dtype == dtype && entry.head_dim == head_dim && entry.causal == causal) return true;
    }
    return false;
}

const Kernel* choose_kernel(fas_dtype dtype, int head_dim, bool causal, int max_query_len, int group,
                            std::string* why) {
    const int64_t packed_rows = static_cast<int64_t>(max_query_len) * group;
    if (packed_rows <= 16) {
        // One query sees every key with or without the (bottom-right) causal mask.
        const Kernel* small = find(dtype, head_dim, causal || max_query_len <= 1, 16);
        if (small != nullptr) return small;
    }
    if (const Kernel* wide = find(dtype, head_dim, causal, 64)) return wide;
    std::string built;
    for (int i = 0; i < kNumKernels; ++i) {
        const Kernel& entry = kTable[i];
        built += fas::concat(built.empty() ? "" : ", ", fas::dtype_name(entry.dtype), "/hd", entry.head_dim,
                             entry.causal ? "/causal" : "/full", "/tile", entry.tile_q);
    }
    *why = fas::concat("no paged kernel ", fas::dtype_name(dtype), "/hd", head_dim, causal ? "/causal" : "/full",
                       " is built for ", max_query_len, " queries x ", group,
                       " packed heads per tile (paged kernels of this build: ", built.empty() ? "none" : built,
                       "; they serve their exact head dim, fp16/bf16)");
    return nullptr;
}

}  // namespace fas_paged
