// Kernel traits of the FP8 SM90 kernels, and the V transpose that goes with them.
//
// FlashInfer's FP8 traits (hopper/quantization/kernel_traits.cuh) lay V and V^T out for an
// ldmatrix transpose of 64 x 64 blocks, so a head dim that is not a multiple of 64 has no kernel
// (hd96 ran on the hd128 kernel, a quarter of its tensor work on zero columns: issue 35 asks FP8
// hd96 at 1.3x our bf16 hd96). Fp8OwnTraits has the members the FP8 collectives and our kernel body
// read, with V and V^T in the GMMA layouts CuTe selects for any head dim that is a multiple of 32,
// and Fp8Transpose (below) writes V^T. The kernels keep FlashInfer's traits where its transpose
// fits (FAS_SM90_FP8_OWN_TRANSPOSE=1 takes ours everywhere: the check that both write the same V^T).
#ifndef FAS_SM90_FP8_TRAITS_CUH
#define FAS_SM90_FP8_TRAITS_CUH

#include <cstdint>
#include <type_traits>

#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/pipeline/pipeline.hpp>

#include <flashinfer/attention/hopper/named_barrier.cuh>
#include <flashinfer/attention/hopper/quantization/kernel_traits.cuh>

#ifndef FAS_SM90_FP8_OWN_TRANSPOSE
#define FAS_SM90_FP8_OWN_TRANSPOSE 0
#endif

namespace fas_sm90 {

template <int HeadDim, int CtaQ, int CtaKV, int Stages, typename Output, typename Variant>
struct Fp8OwnTraits {
    using AttentionVariant = Variant;
    using DTypeQ = cutlass::float_e4m3_t;
    using DTypeKV = cutlass::float_e4m3_t;
    using DTypeO = Output;
    using IdType = int32_t;
    using DTypeQKAccum = float;
    static constexpr bool kOwnTranspose = true;

    static constexpr int CTA_Q = CtaQ;
    static constexpr int CTA_KV = CtaKV;
    static constexpr int HEAD_DIM = HeadDim;
    static_assert(CTA_Q % 64 == 0 && CTA_KV % 32 == 0 && HEAD_DIM % 32 == 0, "FP8 WGMMA: k in steps of 32");
    static constexpr int NUM_WARPS = (CTA_Q / 64 + 1) * 4;
    static constexpr int NUM_THREADS = NUM_WARPS * cutlass::NumThreadsPerWarp;
    static constexpr int NUM_PRODUCER_THREADS = cutlass::NumThreadsPerWarpGroup;  // all four warps transpose
    static constexpr int NUM_STAGES = Stages;
    using TileShape_QKD = cute::Shape<cute::Int<CTA_Q>, cute::Int<CTA_KV>, cute::Int<HEAD_DIM>>;

    using AtomLayoutQKD = cute::Layout<cute::Shape<cute::Int<CTA_Q / 64>, cute::_1, cute::_1>>;
    using TiledMmaQK = decltype(cute::make_tiled_mma(
        cute::GMMA::ss_op_selector<DTypeQ, DTypeKV, DTypeQKAccum, TileShape_QKD>(), AtomLayoutQKD{}));
    // P from registers, V^T K-major (FP8 WGMMA reads no MN-major operand).
    using TiledMmaPV = decltype(cute::make_tiled_mma(
        cute::GMMA::rs_op_selector<DTypeKV, DTypeKV, float, decltype(cute::select<0, 2, 1>(TileShape_QKD{})),
                                   cute::GMMA::Major::K, cute::GMMA::Major::K>(),
        AtomLayoutQKD{}));
    static constexpr int NUM_MMA_THREADS = cute::size(TiledMmaQK{});

    template <typename T, int Rows, int Cols>
    using KMajorAtom = decltype(cutlass::gemm::collective::detail::ss_smem_selector<
                                cute::GMMA::Major::K, T, cute::Int<Rows>, cute::Int<Cols>>());
    using SmemLayoutQ = decltype(cute::tile_to_shape(KMajorAtom<DTypeQ, CTA_Q, HEAD_DIM>{},
                                                     cute::select<0, 2>(TileShape_QKD{})));
    using SmemLayoutK = decltype(cute::tile_to_shape(
        KMajorAtom<DTypeKV, CTA_KV, HEAD_DIM>{},
        cute::make_shape(cute::Int<CTA_KV>{}, cute::Int<HEAD_DIM>{}, cute::Int<NUM_STAGES>{})));
    // V as TMA lands it (keys x head dim, the head dim contiguous), read by Fp8Transpose alone.
    using SmemLayoutV = SmemLayoutK;
    // V^T (head dim x keys, the keys contiguous), the PV GEMM's B operand.
    using SmemLayoutVt = decltype(cute::tile_to_shape(
        KMajorAtom<DTypeKV, HEAD_DIM, CTA_KV>{},
        cute::make_shape(cute::Int<HEAD_DIM>{}, cute::Int<CTA_KV>{}, cute::Int<NUM_STAGES>{})));
    using SmemLayoutO = decltype(cute::tile_to_shape(KMajorAtom<DTypeO, CTA_Q, HEAD_DIM>{},
                                                     cute::select<0, 2>(TileShape_QKD{})));

    using MainloopPipeline = cutlass::PipelineTmaAsync<NUM_STAGES>;
    using MainloopPipelineNoTMA = cutlass::PipelineAsync<NUM_STAGES>;
    using PipelineState = cutlass::PipelineState<NUM_STAGES>;
    using SharedStorage = flashinfer::SharedStorageQKVOVt<MainloopPipeline, DTypeQ, DTypeKV, DTypeO, IdType, CTA_KV,
                                                          SmemLayoutQ, SmemLayoutK, SmemLayoutV, SmemLayoutO>;
};

// The traits an FP8 kernel is built with: FlashInfer's where its 64 x 64 transpose fits.
template <int HeadDim, int CtaQ, int CtaKV, int Stages, typename Output, typename Variant>
using Fp8Traits = std::conditional_t<HeadDim % 64 == 0 && !FAS_SM90_FP8_OWN_TRANSPOSE,
                                     flashinfer::FP8AttentionKernelTraits</*USE_TMA_LOAD_KV=*/true, HeadDim, CtaQ, CtaKV,
                                                                          Stages, cutlass::float_e4m3_t,
                                                                          cutlass::float_e4m3_t, Output, int32_t, Variant>,
                                     Fp8OwnTraits<HeadDim, CtaQ, CtaKV, Stages, Output, Variant>>;

template <typename Traits, typename = void>
struct OwnsTranspose : std::false_type {};
template <typename Traits>
struct OwnsTranspose<Traits, std::enable_if_t<Traits::kOwnTranspose>> : std::true_type {};

// V -> V^T for Fp8OwnTraits, by the producer warpgroup, one pipeline stage at a time.
//
// The PV GEMM's A operand is P in registers as FlashInfer's FP8 key loop leaves it
// (convert_layout_acc_Aregs_fp8, then permute_regs_A_to_C): in each 32-key group, the thread of
// quad lane c holds in its k slots 4c + u + 16d (u < 4, d < 2) the probabilities of keys
// 2c + (u & 1) + 8 (u >> 1) + 16d, the keys its QK^T accumulators cover. So V^T's k index runs in
// that order: the four bytes of V^T row n at k = 4c + 16d .. + 3 are V's rows 2c + 16d + {0, 1, 8,
// 9} of column n.
//
// A warp's unit is one 32-key group by 16 columns: ldmatrix.x4.trans reads the group's rows 0-7,
// 8-15, 16-23 and 24-31 as 16-bit elements (lane L addresses row L's 16 bytes) and leaves lane t,
// per matrix, rows 2c and 2c + 1 (c = t % 4) of columns 2c' and 2c' + 1 (c' = t / 4); two PRMTs
// per 16-row half pair the bytes into the words of V^T rows 2c' and 2c' + 1 at keys 4c + 16d..,
// which stmatrix.x4 writes (matrix m: V^T rows 2j + (m & 1), keys 16 (m >> 1)..; lane L addresses
// row L % 8 of matrix L / 8). Warps take (group parity, 16-column block parity), the unrolled
// steps the rest. Per unit 1 LDSM, 4 PRMT and 1 STSM; the transpose of 4-byte words by LDS/PRMT/STS
// it replaced took 4 LDS, 8 PRMT, 4 STS and their LOP3s and ran 1.02-1.04x the kernel's time
// (docs/design/fp8-speed.md).
//
// Addresses: a lane's offset (its own, its warp's and the stage's parts) is swizzled once; a
// step's part has no bit in common with it below bit 10 (the swizzle reads bits 7-9 at most and
// moves bits 4-6), so a step XORs its swizzled low part and adds its high part, folded into the
// instructions' immediate offsets.
template <typename Traits>
struct Fp8Transpose {
    static constexpr int kKeys = Traits::CTA_KV;
    static constexpr int kDim = Traits::HEAD_DIM;
    static constexpr int kThreads = Traits::NUM_PRODUCER_THREADS;
    static_assert(kThreads == 128 && kKeys % 64 == 0 && kDim % 32 == 0, "four warps: (group, column block) parities");
    using LayoutV = decltype(cute::as_position_independent_swizzle_layout(typename Traits::SmemLayoutV{}));
    using LayoutVt = decltype(cute::as_position_independent_swizzle_layout(typename Traits::SmemLayoutVt{}));

    // A step's part of an offset: its swizzled low bits (to XOR) and its high bits (to add).
    template <typename Layout>
    CUTLASS_DEVICE static int step_offset(int base, int step) {
        const int low = step % 1024;
        return (base ^ Layout{}.layout_a()(low)) + (step - low);
    }

    CUTLASS_DEVICE void operator()(uint8_t* v, uint8_t* vt, int stage) const {
        using namespace cute;
        constexpr auto v_linear = LayoutV{}.layout_b();
        constexpr auto vt_linear = LayoutVt{}.layout_b();
        const int lane = threadIdx.x % 32;
        const int warp = (threadIdx.x / 32) % 4;
        const int group_bit = warp % 2, block_bit = warp / 2;
        const uint32_t v_smem = static_cast<uint32_t>(__cvta_generic_to_shared(v));
        const uint32_t vt_smem = static_cast<uint32_t>(__cvta_generic_to_shared(vt));
        const int v_base = LayoutV{}.layout_a()(v_linear(make_coord(lane + 32 * group_bit, 16 * block_bit, stage)));
        const int m = lane / 8, j = lane % 8;
        const int vt_base = LayoutVt{}.layout_a()(
            vt_linear(make_coord(16 * block_bit + 2 * j + (m & 1), 32 * group_bit + 16 * (m >> 1), stage)));
        CUTLASS_PRAGMA_UNROLL
        for (int block = 0; block < kDim / 32; ++block) {  // pairs of 16-column blocks
            CUTLASS_PRAGMA_UNROLL
            for (int group = 0; group < kKeys / 64; ++group) {  // pairs of 32-key groups
                uint32_t a[4];
                const int v_step = v_linear(make_coord(64 * group, 32 * block, 0));
                asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                             : "=r"(a[0]), "=r"(a[1]), "=r"(a[2]), "=r"(a[3])
                             : "r"(v_smem + step_offset<LayoutV>(v_base, v_step)));
                // Keys +0, +1, +8, +9 of column 2c' (bytes 0 and 2 of each word) and 2c' + 1 (1 and 3).
                const uint32_t w[4] = {__byte_perm(a[0], a[1], 0x6420), __byte_perm(a[0], a[1], 0x7531),
                                       __byte_perm(a[2], a[3], 0x6420), __byte_perm(a[2], a[3], 0x7531)};
                const int vt_step = vt_linear(make_coord(32 * block, 64 * group, 0));
                asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n"
                             :: "r"(vt_smem + step_offset<LayoutVt>(vt_base, vt_step)),
                                "r"(w[0]), "r"(w[1]), "r"(w[2]), "r"(w[3]));
            }
        }
        // Every producer thread's part written before any of them signals the stage.
        cutlass::arch::NamedBarrier::sync(kThreads, static_cast<int>(flashinfer::NamedBarriers::kProducerWG));
    }
};

}  // namespace fas_sm90

#endif  // FAS_SM90_FP8_TRAITS_CUH
