// FA2's attention kernels dispatched by the switches a plan sets at run time (even tiles, even
// head dim, a local window, softcap), with FA2's own reductions of that set, and launched with
// their shared memory: what our forward (fwd_launch.cuh) and split-KV (split_launch.cuh)
// launches share. Included by those two only.
#ifndef FAS_FA2_VARIANT_LAUNCH_CUH
#define FAS_FA2_VARIANT_LAUNCH_CUH

#include <type_traits>

#include "flash_fwd_launch_template.h"

namespace fas_fa2 {
namespace launch_detail {

// fn(std::bool_constant<value>{}): a runtime flag as a compile-time one.
template <typename Fn>
void with_flag(bool value, const Fn& fn) {
    if (value) {
        fn(std::true_type{});
    } else {
        fn(std::false_type{});
    }
}

// with_flag where Compiled, else fn(std::false_type{}): a switch no caller of a launch can set
// compiles no branch for it.
template <bool Compiled, typename Fn>
void with_flag_if(bool value, const Fn& fn) {
    if constexpr (Compiled) {
        with_flag(value, fn);
    } else {
        fn(std::false_type{});
    }
}

// fn(even_mn, even_k, local, softcap), each a std::bool_constant: the variant of an FA2 attention
// kernel with Traits' tiles that a plan's params select, with FA2's own reductions of the set (an
// uneven head dim or a window takes the uneven-tile code, and so does every head dim over 128; a
// causal plan has no window). The forward and split-KV launches dispatch through it alike; Masks
// false (the split-KV launch: fas_fwd sets neither, fa2/plan.cpp) compiles no window or softcap.
template <typename Traits, int HeadDim, bool Causal, bool Masks, typename Fn>
void with_variant(const FLASH_NAMESPACE::Flash_fwd_params& params, const Fn& fn) {
    const bool even_mn = params.cu_seqlens_q == nullptr && params.cu_seqlens_k == nullptr &&
                         params.seqlen_k % Traits::kBlockN == 0 && params.seqlen_q % Traits::kBlockM == 0;
    const bool even_k = params.d == HeadDim;
    const bool local = (params.window_size_left >= 0 || params.window_size_right >= 0) && !Causal;
    with_flag(even_mn, [&](auto even_mn_flag) {
        with_flag(even_k, [&](auto even_k_flag) {
            with_flag_if<Masks>(local, [&](auto local_flag) {
                with_flag_if<Masks>(params.softcap > 0.f, [&](auto softcap_flag) {
                    constexpr bool kEvenK = decltype(even_k_flag)::value;
                    constexpr bool kLocal = decltype(local_flag)::value;
                    constexpr bool kEvenMN = decltype(even_mn_flag)::value && kEvenK && !kLocal && HeadDim <= 128;
                    fn(std::bool_constant<kEvenMN>{}, even_k_flag, std::bool_constant<kLocal && !Causal>{},
                       softcap_flag);
                });
            });
        });
    });
}

// Launches one FA2 attention kernel with Traits' threads and dynamic shared memory.
template <typename Traits, typename Kernel>
void launch_attention(Kernel kernel, dim3 grid, FLASH_NAMESPACE::Flash_fwd_params& params, cudaStream_t stream) {
    constexpr size_t kSmem = Traits::kSmemSize;
    if (kSmem >= 48 * 1024) {
        C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
    }
    kernel<<<grid, Traits::kNThreads, kSmem, stream>>>(params);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace launch_detail
}  // namespace fas_fa2

#endif  // FAS_FA2_VARIANT_LAUNCH_CUH
