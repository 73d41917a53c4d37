// The thread-local last error behind fas_get_last_error.
#include "core/status.h"

namespace fas {

namespace {
thread_local std::string t_last_error;
}  // namespace

fas_status fail(fas_status status, const std::string& message) noexcept {
    try {
        t_last_error = message;
    } catch (...) {
        // Out of host memory while storing the message: keep the status, lose the text.
    }
    return status;
}

fas_status fail_cuda(cudaError_t error, const std::string& what) noexcept {
    cudaGetLastError();
    return fail(FAS_ERROR_CUDA,
                concat(what, " failed: ", cudaGetErrorName(error), " (", cudaGetErrorString(error), ")"));
}

fas_status check_no_pending_cuda_error() noexcept {
    const cudaError_t pending = cudaPeekAtLastError();
    if (pending == cudaSuccess) return FAS_SUCCESS;
    return fail(FAS_ERROR_CUDA,
                concat("a CUDA error from earlier work on this thread is still pending: ", cudaGetErrorName(pending),
                       " (", cudaGetErrorString(pending), "); nothing was launched. Handle it with "
                       "cudaGetLastError() (a sticky error needs a process restart) and call again"));
}

const char* last_error() noexcept { return t_last_error.c_str(); }

}  // namespace fas
