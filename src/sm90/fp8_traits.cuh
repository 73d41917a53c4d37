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
// 9} of column n. A unit of work is four such rows by four columns: one 32-bit word of each row
// read, a 4 x 4 byte transpose in registers (__byte_perm: PRMT), one word of each of the four V^T rows written.
//
// Lanes: eight column words (of a 32-column chunk) by four c; a warp: one 16-key half d and the
// parity of the 32-key group; the unrolled steps: the group's other bits and the column chunks.
// Bank conflicts (a model of the hd96 layouts): lanes with c >= 2 read rows +1 before +0 (and +9
// before +8) and lanes write their four V^T rows in an order rotated by column_word / 2, so that
// every load and store instruction of a warp touches 32 distinct banks.
//
// Addresses: a lane's offset (its own, its warp's and the stage's parts) is swizzled once; a
// step's part has no bit in common with it below bit 10 (the swizzle reads bits 7-9 at most and
// moves bits 4-6), so a step XORs its swizzled low part and adds its high part: a LOP3 at most
// beside each LDS/STS, whose immediate offsets carry the rest.
template <typename Traits>
struct Fp8Transpose {
    static constexpr int kKeys = Traits::CTA_KV;
    static constexpr int kDim = Traits::HEAD_DIM;
    static constexpr int kThreads = Traits::NUM_PRODUCER_THREADS;
    static_assert(kThreads == 128 && kKeys % 64 == 0 && kDim % 32 == 0, "four warps: (16-key half, group parity)");
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
        const int column_word = lane % 8;
        const int c = lane / 8;
        const int swap = c / 2;
        const int rotate = column_word / 2;
        const int half_keys = 16 * (warp % 2) + 32 * (warp / 2);  // the warp's d and group parity
        // Loads: rows 2c + (a ^ swap) of the warp's rows; a = 0, 1 (+8 rows: a step's part).
        int v_base[2];
        CUTLASS_PRAGMA_UNROLL
        for (int a = 0; a < 2; ++a) {
            v_base[a] = LayoutV{}.layout_a()(v_linear(make_coord(2 * c + (a ^ swap) + half_keys, 4 * column_word, stage)));
        }
        // Stores: V^T row 4 column_word + (j + rotate) % 4 of the chunk, keys 4c.. of the warp's half.
        int vt_base[4];
        CUTLASS_PRAGMA_UNROLL
        for (int j = 0; j < 4; ++j) {
            vt_base[j] = LayoutVt{}.layout_a()(
                vt_linear(make_coord(4 * column_word + (j + rotate) % 4, 4 * c + half_keys, stage)));
        }
        // Transpose selectors with the rotation (byte j of a word is column (j + rotate) % 4) and
        // the swap (x[0] holds row +1) folded in: lo = columns s0, s1 of rows (0, 1); hi = s2, s3.
        const auto pair = [&](int k) {
            const uint32_t s = (k + rotate) % 4;
            return s | (s + 4) << 4;
        };
        const uint32_t swap_mask = swap ? 0x4444u : 0u;
        const uint32_t sel_lo = (pair(0) | pair(1) << 8) ^ swap_mask;
        const uint32_t sel_hi = (pair(2) | pair(3) << 8) ^ swap_mask;
        CUTLASS_PRAGMA_UNROLL
        for (int chunk = 0; chunk < kDim / 32; ++chunk) {
            CUTLASS_PRAGMA_UNROLL
            for (int group = 0; group < kKeys / 64; ++group) {  // pairs of 32-key groups
                uint32_t x[4];
                CUTLASS_PRAGMA_UNROLL
                for (int r = 0; r < 4; ++r) {
                    const int step = v_linear(make_coord(64 * group + 8 * (r >> 1), 32 * chunk, 0));
                    x[r] = *reinterpret_cast<const uint32_t*>(v + step_offset<LayoutV>(v_base[r & 1], step));
                }
                const uint32_t lo01 = __byte_perm(x[0], x[1], sel_lo), hi01 = __byte_perm(x[0], x[1], sel_hi);
                const uint32_t lo23 = __byte_perm(x[2], x[3], sel_lo), hi23 = __byte_perm(x[2], x[3], sel_hi);
                const uint32_t y[4] = {__byte_perm(lo01, lo23, 0x5410), __byte_perm(lo01, lo23, 0x7632), __byte_perm(hi01, hi23, 0x5410),
                                       __byte_perm(hi01, hi23, 0x7632)};
                CUTLASS_PRAGMA_UNROLL
                for (int j = 0; j < 4; ++j) {
                    const int step = vt_linear(make_coord(32 * chunk, 64 * group, 0));
                    *reinterpret_cast<uint32_t*>(vt + step_offset<LayoutVt>(vt_base[j], step)) = y[j];
                }
            }
        }
        // Every producer thread's part written before any of them signals the stage.
        cutlass::arch::NamedBarrier::sync(kThreads, static_cast<int>(flashinfer::NamedBarriers::kProducerWG));
    }
};

}  // namespace fas_sm90

#endif  // FAS_SM90_FP8_TRAITS_CUH
