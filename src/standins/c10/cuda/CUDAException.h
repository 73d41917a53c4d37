// Stand-in for PyTorch's <c10/cuda/CUDAException.h>: FA2's launch templates include it for
// C10_CUDA_CHECK and C10_CUDA_KERNEL_LAUNCH_CHECK, and this build has no torch. Both macros throw
// fas_detail::cuda_error instead of c10::Error; the C API catches it.
#pragma once

#include "fas_cuda_error.h"

#define C10_CUDA_CHECK(EXPR)                                                           \
    do {                                                                               \
        const cudaError_t fas_checked_status_ = (EXPR);                                \
        if (fas_checked_status_ != cudaSuccess) {                                      \
            ::fas_detail::throw_cuda_error(fas_checked_status_, #EXPR, __FILE__, __LINE__); \
        }                                                                              \
    } while (0)

// cudaGetLastError (not Peek) so that a reported launch error does not linger in the
// thread's CUDA error state, matching c10's behaviour.
#define C10_CUDA_KERNEL_LAUNCH_CHECK() C10_CUDA_CHECK(cudaGetLastError())
