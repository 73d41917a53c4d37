// The devices a call runs on: compute capability and SM count, queried once per device, and
// whether this build's kernels run there.
#ifndef FAS_API_DEVICE_H
#define FAS_API_DEVICE_H

#include "flash_attn_standalone.h"

namespace fas {

struct DeviceProps {
    int index;
    int cc_major;
    int cc_minor;
    int sm_count;

    bool is_sm90() const { return cc_major == 9 && cc_minor == 0; }
};

// Properties of `device`, and FAS_ERROR_UNSUPPORTED_DEVICE when this build cannot run there.
fas_status check_device(int device, DeviceProps* props);

// check_device on the calling thread's current device. Must run before any FA2 host code:
// FA2's hardware_info.h calls exit(1) when cudaGetDevice fails.
fas_status check_current_device(DeviceProps* props);

}  // namespace fas

#endif  // FAS_API_DEVICE_H
