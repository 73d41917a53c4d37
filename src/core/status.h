// Status codes and the thread's last error: how every exported function reports failure.
// A failure stores a message (what is wrong, how to fix it) and returns its status; nothing
// escapes the C boundary as an exception (guarded).
#ifndef FAS_CORE_STATUS_H
#define FAS_CORE_STATUS_H

#include "flash_attn_standalone.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <new>
#include <sstream>
#include <string>

namespace fas {

template <typename... Parts>
std::string concat(const Parts&... parts) {
    std::ostringstream stream;
    (stream << ... << parts);
    return stream.str();
}

fas_status fail(fas_status status, const std::string& message) noexcept;

// Reports a failed CUDA call made by the library itself and consumes the (non-sticky) error it
// left in the thread's CUDA error state, so the caller's later cudaGetLastError is not blamed.
fas_status fail_cuda(cudaError_t error, const std::string& what) noexcept;

// A non-sticky error left by the caller's earlier work would otherwise be reported as ours.
fas_status check_no_pending_cuda_error() noexcept;

const char* last_error() noexcept;

// Runs an API body, turning every escaping exception into a status at the C boundary.
template <typename Body>
fas_status guarded(Body&& body) noexcept {
    try {
        return body();
    } catch (const std::bad_alloc&) {
        return fail(FAS_ERROR_INTERNAL, "out of host memory");
    } catch (const std::exception& error) {
        return fail(FAS_ERROR_INTERNAL, concat("internal error: ", error.what()));
    } catch (...) {
        return fail(FAS_ERROR_INTERNAL, "internal error: unknown exception");
    }
}

// Zeroes a size-prefixed struct and sets its size: what the exported *_init functions do, and
// what the library does for the structs it fills itself.
template <typename Args>
void init_args_struct(Args* args) noexcept {
    if (args == nullptr) return;
    std::memset(static_cast<void*>(args), 0, sizeof(*args));
    args->struct_size = sizeof(*args);
}

// Every size-prefixed argument struct: present, and at least as large as this version's, so
// the library never reads past what the caller allocated.
template <typename Args>
fas_status check_args_struct(const Args* args, const char* type_name, const char* initialiser) noexcept {
    if (args == nullptr) {
        return fail(FAS_ERROR_INVALID_ARGUMENT, concat("args is NULL; pass a ", type_name, " set up with ", initialiser));
    }
    if (args->struct_size < sizeof(Args)) {
        return fail(FAS_ERROR_INVALID_ARGUMENT,
                    concat("args->struct_size is ", args->struct_size, " but this library needs at least ",
                           sizeof(Args), " (sizeof(", type_name, ")); initialise the struct with ", initialiser));
    }
    return FAS_SUCCESS;
}

// A size-prefixed struct of any version from the first on (first_version_bytes: the offset of
// the first appended field): copies what the caller's struct_size covers into *out and zeroes
// the fields appended after it, so that older callers keep working and nothing is read past
// what they allocated.
template <typename Args>
fas_status read_args_struct(const Args* args, size_t first_version_bytes, const char* type_name,
                            const char* initialiser, Args* out) noexcept {
    if (args == nullptr) {
        return fail(FAS_ERROR_INVALID_ARGUMENT, concat("args is NULL; pass a ", type_name, " set up with ", initialiser));
    }
    if (args->struct_size < first_version_bytes) {
        return fail(FAS_ERROR_INVALID_ARGUMENT,
                    concat("args->struct_size is ", args->struct_size, " but even the first version of ", type_name,
                           " has ", first_version_bytes, " bytes; initialise the struct with ", initialiser));
    }
    std::memset(static_cast<void*>(out), 0, sizeof(Args));
    std::memcpy(static_cast<void*>(out), args, std::min(args->struct_size, sizeof(Args)));
    return FAS_SUCCESS;
}

}  // namespace fas

#endif  // FAS_CORE_STATUS_H
