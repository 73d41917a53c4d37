// Stand-in for PyTorch's <ATen/cuda/CUDAGeneratorImpl.h>: FA2's flash.h includes it for the type
// of Flash_fwd_params::philox_args, and this build has no torch. This library never enables
// dropout, so the Philox state is only carried through the parameter struct, never consumed for
// random numbers; a plain seed/offset pair is all the kernels need.
#pragma once

#include <stdint.h>

namespace at {

struct PhiloxCudaState {
    uint64_t seed = 0;
    uint64_t offset = 0;
};

}  // namespace at
