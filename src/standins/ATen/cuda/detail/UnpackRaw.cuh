// Stand-in for PyTorch's <ATen/cuda/detail/UnpackRaw.cuh>: FA2's philox_unpack.cuh includes it for
// at::cuda::philox::unpack, which the forward kernel calls unconditionally, and this build has no
// torch. Without CUDA-graph-captured offsets the state is simply (seed, offset).
#pragma once

#include <tuple>

#include "ATen/cuda/CUDAGeneratorImpl.h"

#if defined(__CUDACC__)
#define FAS_HOST_DEVICE __host__ __device__
#else
#define FAS_HOST_DEVICE
#endif

namespace at {
namespace cuda {
namespace philox {

FAS_HOST_DEVICE inline std::tuple<uint64_t, uint64_t> unpack(const at::PhiloxCudaState& state) {
    return std::tuple<uint64_t, uint64_t>(state.seed, state.offset);
}

}  // namespace philox
}  // namespace cuda
}  // namespace at

#undef FAS_HOST_DEVICE
