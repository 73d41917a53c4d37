// Exception type behind the C10_CUDA_* stand-ins. FA2's launch code reports CUDA failures through
// those macros; upstream they throw c10::Error, here they throw fas_detail::cuda_error, which the
// FA2 launch (src/fa2/launch.cu) turns into FAS_ERROR_CUDA plus a last-error message. The library
// must never abort the host process, so nothing in here prints or exits.
#pragma once

#include <cuda_runtime_api.h>

#include <stdexcept>
#include <string>

namespace fas_detail {

class cuda_error : public std::runtime_error {
public:
    cuda_error(cudaError_t code, const std::string& message)
        : std::runtime_error(message), code_(code) {}

    cudaError_t code() const noexcept { return code_; }

private:
    cudaError_t code_;
};

[[noreturn]] inline void throw_cuda_error(cudaError_t code, const char* expression, const char* file,
                                          int line) {
    throw cuda_error(code, std::string(cudaGetErrorName(code)) + " (" + cudaGetErrorString(code) +
                               ") from " + expression + " at " + file + ":" + std::to_string(line));
}

}  // namespace fas_detail
