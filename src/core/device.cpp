// Device properties, cached per device, and the check that this build runs on a device.
#include "core/device.h"

#include <cuda_runtime_api.h>

#include <map>
#include <mutex>
#include <string>

#include "core/status.h"

namespace fas {

namespace {

std::mutex g_device_props_mutex;
std::map<int, DeviceProps> g_device_props;

fas_status get_device_props(int device, DeviceProps* props) {
    std::lock_guard<std::mutex> lock(g_device_props_mutex);
    const auto cached = g_device_props.find(device);
    if (cached != g_device_props.end()) {
        *props = cached->second;
        return FAS_SUCCESS;
    }
    int device_count = 0;
    cudaError_t error = cudaGetDeviceCount(&device_count);
    if (error != cudaSuccess) return fail_cuda(error, "cudaGetDeviceCount (is a CUDA driver and GPU present?)");
    if (device < 0 || device >= device_count) {
        return fail(FAS_ERROR_INVALID_ARGUMENT,
                    concat("CUDA device ", device, " does not exist; ", device_count,
                           " device(s) are visible (check CUDA_VISIBLE_DEVICES)"));
    }
    DeviceProps queried{};
    queried.index = device;
    const struct {
        int* value;
        cudaDeviceAttr attribute;
        const char* name;
    } queries[] = {
        {&queried.cc_major, cudaDevAttrComputeCapabilityMajor, "compute capability major"},
        {&queried.cc_minor, cudaDevAttrComputeCapabilityMinor, "compute capability minor"},
        {&queried.sm_count, cudaDevAttrMultiProcessorCount, "multiprocessor count"},
        {&queried.sm_clock_khz, cudaDevAttrClockRate, "SM clock"},
        {&queried.memory_clock_khz, cudaDevAttrMemoryClockRate, "memory clock"},
        {&queried.memory_bus_bits, cudaDevAttrGlobalMemoryBusWidth, "memory bus width"},
    };
    for (const auto& query : queries) {
        error = cudaDeviceGetAttribute(query.value, query.attribute, device);
        if (error != cudaSuccess) {
            return fail_cuda(error, concat("cudaDeviceGetAttribute(", query.name, ", device ", device, ")"));
        }
    }
    g_device_props.emplace(device, queried);
    *props = queried;
    return FAS_SUCCESS;
}

bool device_runs_this_build(const DeviceProps& props) {
    if (props.is_sm90()) return true;
#if defined(FAS_BUILT_SM80) && FAS_BUILT_SM80
    if (props.cc_major == 8) return true;
#endif
    return false;
}

}  // namespace

fas_status check_device(int device, DeviceProps* props) {
    const fas_status status = get_device_props(device, props);
    if (status != FAS_SUCCESS) return status;
    if (device_runs_this_build(*props)) return FAS_SUCCESS;
    std::string device_name;
    cudaDeviceProp device_properties;
    if (cudaGetDeviceProperties(&device_properties, device) == cudaSuccess) {
        device_name = concat(" (", device_properties.name, ")");
    } else {
        cudaGetLastError();
    }
#if defined(FAS_BUILT_SM80) && FAS_BUILT_SM80
    const char* supported = "compute capability 9.0 (sm_90a: H100/H200/GH200) and 8.x (sm_80 code)";
#else
    const char* supported =
        "only compute capability 9.0 (sm_90a: H100/H200/GH200); rebuild with sm_80 kernels "
        "(FAS_BUILT_SM80=1) to run on 8.x GPUs";
#endif
    return fail(FAS_ERROR_UNSUPPORTED_DEVICE,
                concat("CUDA device ", device, device_name, " has compute capability ", props->cc_major, ".",
                       props->cc_minor, "; this build of flash_attn_standalone supports ", supported));
}

fas_status check_current_device(DeviceProps* props) {
    int device = 0;
    const cudaError_t error = cudaGetDevice(&device);
    if (error != cudaSuccess) return fail_cuda(error, "cudaGetDevice (is a CUDA driver and GPU present?)");
    return check_device(device, props);
}

}  // namespace fas
