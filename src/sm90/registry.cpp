// The SM90 kernels of this build, from the build-generated kernel_registry.inc (their
// declarations and their list): each is an explicit specialization of fas_sm90::launch_ragged,
// launch_ragged_fp8_window, launch_ragged_fp8_softcap, launch_paged_ragged,
// launch_paged_ragged_softcap, launch_ragged_softcap or launch_ragged_packed (its Kind, sm90.h),
// defined in its own kernel TU (kernels/sm90_*.cu).
#include "core/status.h"
#include "sm90/packed_args.h"
#include "sm90/sm90.h"
#include "sm90/tiles.h"

// This build's SM90 kernels, declared as generated with their TUs (kernelgen.registry_text).
#define FAS_DECLARE_SM90
#include "kernel_registry.inc"

namespace fas_sm90 {

namespace {

// Ends with a sentinel (launch == nullptr) so that a build without SM90 kernels still has a
// valid array; the count excludes it.
#define FAS_SM90_PREFILL(InEnum, OutEnum, HeadDim, IsCausal, InfoFamily) \
    {InEnum, OutEnum, HeadDim, IsCausal, Kind::kPlain, InfoFamily, &fas_sm90::launch_ragged<InEnum, OutEnum, HeadDim, IsCausal>},
#define FAS_SM90_WINDOWED_FP8(OutEnum, HeadDim, IsCausal, InfoFamily) \
    {FAS_DTYPE_E4M3, OutEnum, HeadDim, IsCausal, Kind::kFp8Window, InfoFamily, &fas_sm90::launch_ragged_fp8_window<OutEnum, HeadDim, IsCausal>},
#define FAS_SM90_FP8_SOFTCAP(OutEnum, HeadDim, IsCausal, InfoFamily) \
    {FAS_DTYPE_E4M3, OutEnum, HeadDim, IsCausal, Kind::kSoftcap, InfoFamily, &fas_sm90::launch_ragged_fp8_softcap<OutEnum, HeadDim, IsCausal>},
#define FAS_SM90_PAGED(DtypeEnum, HeadDim, IsCausal, InfoFamily) \
    {DtypeEnum, DtypeEnum, HeadDim, IsCausal, Kind::kPaged, InfoFamily, &fas_sm90::launch_paged_ragged<DtypeEnum, HeadDim, IsCausal>},
#define FAS_SM90_PAGED_SOFTCAP(DtypeEnum, HeadDim, IsCausal, InfoFamily) \
    {DtypeEnum, DtypeEnum, HeadDim, IsCausal, Kind::kPagedSoftcap, InfoFamily, &fas_sm90::launch_paged_ragged_softcap<DtypeEnum, HeadDim, IsCausal>},
#define FAS_SM90_SOFTCAP(DtypeEnum, HeadDim, IsCausal, InfoFamily) \
    {DtypeEnum, DtypeEnum, HeadDim, IsCausal, Kind::kSoftcap, InfoFamily, &fas_sm90::launch_ragged_softcap<DtypeEnum, HeadDim, IsCausal>},
#define FAS_SM90_PACKED(DtypeEnum, HeadDim, IsCausal, InfoFamily) \
    {DtypeEnum, DtypeEnum, HeadDim, IsCausal, Kind::kPacked, InfoFamily, &fas_sm90::launch_ragged_packed<DtypeEnum, HeadDim, IsCausal>},
const Kernel kTable[] = {
#include "kernel_registry.inc"
    {FAS_DTYPE_FP16, FAS_DTYPE_FP16, 0, false, Kind::kPlain, nullptr, nullptr},
};
constexpr int kNumKernels = static_cast<int>(sizeof(kTable) / sizeof(kTable[0])) - 1;

const char* kind_suffix(Kind kind) {
    switch (kind) {
        case Kind::kSoftcap: return "/softcap";
        case Kind::kPaged: return "/paged";
        case Kind::kPagedSoftcap: return "/paged/softcap";
        case Kind::kFp8Window: return "/window";
        case Kind::kPlain:
        case Kind::kPacked: break;  // packed: in place of the mask word
    }
    return "";
}

// e.g. "bf16/hd128/causal/paged/softcap", "e4m3->bf16/hd256/causal/window", "fp16/hd96/packed".
std::string kernel_name(fas_dtype dtype, fas_dtype out_dtype, int head_dim, bool causal, Kind kind) {
    return fas::concat(fas::dtype_name(dtype), dtype == out_dtype ? "" : fas::concat("->", fas::dtype_name(out_dtype)),
                       "/hd", head_dim, kind == Kind::kPacked ? "/packed" : causal ? "/causal" : "/full",
                       kind_suffix(kind));
}

}  // namespace

int num_kernels() { return kNumKernels; }

const Kernel& kernel(int index) { return kTable[index]; }

bool rounds_up(fas_dtype dtype, Kind kind, int head_dim, int kernel_head_dim) {
    if (reads_pages(kind) || kernel_head_dim <= head_dim) return false;
    return dtype != FAS_DTYPE_E4M3 || fp8_kernel_serves(kernel_head_dim, head_dim);
}

const Kernel* find_kernel(fas_dtype dtype, int out_dtype, int head_dim, bool causal, Kind kind) {
    // The exact head dim, else (varlen kinds: rounds_up) the narrowest built one above it.
    // Packed kernels are built non-causal and serve either mask.
    const Kernel* best = nullptr;
    for (int i = 0; i < kNumKernels; ++i) {
        const Kernel& entry = kTable[i];
        if (entry.kind != kind || entry.dtype != dtype || (out_dtype >= 0 && entry.out_dtype != out_dtype) ||
            (entry.causal != causal && kind != Kind::kPacked)) {
            continue;
        }
        const bool fits = entry.head_dim == head_dim || rounds_up(dtype, kind, head_dim, entry.head_dim);
        if (fits && (best == nullptr || entry.head_dim < best->head_dim)) best = &entry;
    }
    return best;
}

std::string kernel_unavailable_reason(fas_dtype dtype, int out_dtype, int head_dim, bool causal,
                                      const fas::DeviceProps& device, Kind kind) {
    if (!device.is_sm90()) {
        return fas::concat("the device has compute capability ", device.cc_major, ".", device.cc_minor,
                           "; SM90 kernels need 9.0");
    }
    if (find_kernel(dtype, out_dtype, head_dim, causal, kind) != nullptr) return std::string();
    std::string built;
    for (int i = 0; i < kNumKernels; ++i) {
        const Kernel& entry = kTable[i];
        built += fas::concat(built.empty() ? "" : ", ",
                             kernel_name(entry.dtype, entry.out_dtype, entry.head_dim, entry.causal, entry.kind));
    }
    const fas_dtype wanted_out = out_dtype < 0 ? dtype : static_cast<fas_dtype>(out_dtype);
    return fas::concat("no SM90 kernel ", kernel_name(dtype, wanted_out, head_dim, causal, kind),
                       " is built (SM90 kernels of this build: ", built.empty() ? "none" : built,
                       "; fp16/bf16 varlen kernels also serve narrower head dims, FP8 ones of head dim <= ",
                       kFp8RoundUpMaxHeadDim, " narrower multiples of 16, paged ones their exact head dim only)");
}

int query_tile_rows(const Kernel& kernel) {
    const TileFor tile = reads_pages(kernel.kind)          ? TileFor::kPaged
                         : kernel.kind == Kind::kPacked ? TileFor::kPacked
                                                        : TileFor::kVarlen;
    return tile_shape(kernel.dtype == FAS_DTYPE_E4M3, kernel.head_dim, kernel.causal, tile).q_rows;
}

}  // namespace fas_sm90
