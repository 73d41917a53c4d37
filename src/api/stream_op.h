// The path of every stream-ordered op of the API (fas_kv_append, fas_merge_states): its
// size-prefixed arguments checked and copied, validated into a launch, the current device and
// any pending CUDA error checked, then one launch on the caller's stream. Nothing allocated,
// nothing waited for.
#ifndef FAS_API_STREAM_OP_H
#define FAS_API_STREAM_OP_H

#include <cstring>

#include "core/device.h"
#include "core/status.h"

namespace fas {

// validate(const Args&, Launch*) -> fas_status; enqueue(const Launch&, const DeviceProps&,
// cudaStream_t) -> cudaError_t. `what` names the launch in a CUDA failure's message.
template <typename Args, typename Launch, typename Validate, typename Enqueue>
fas_status run_stream_op(const Args* user_args, const char* type_name, const char* initialiser, const char* what,
                         Validate validate, Enqueue enqueue) {
    if (const fas_status status = check_args_struct(user_args, type_name, initialiser); status != FAS_SUCCESS) {
        return status;
    }
    Args args;
    std::memcpy(static_cast<void*>(&args), user_args, sizeof(args));
    Launch launch{};
    fas_status status = validate(args, &launch);
    DeviceProps device{};
    if (status == FAS_SUCCESS) status = check_current_device(&device);
    if (status == FAS_SUCCESS) status = check_no_pending_cuda_error();
    if (status != FAS_SUCCESS) return status;
    const cudaError_t error = enqueue(launch, device, args.stream);
    return error == cudaSuccess ? FAS_SUCCESS : fail_cuda(error, what);
}

}  // namespace fas

#endif  // FAS_API_STREAM_OP_H
