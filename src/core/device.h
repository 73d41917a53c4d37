// The devices a call runs on: compute capability and SM count, queried once per device, and
// whether this build's kernels run there.
#ifndef FAS_CORE_DEVICE_H
#define FAS_CORE_DEVICE_H

#include "flash_attn_standalone.h"

namespace fas {

struct DeviceProps {
    int index;
    int cc_major;
    int cc_minor;
    int sm_count;
    int sm_clock_khz;      // peak
    int memory_clock_khz;  // peak
    int memory_bus_bits;

    bool is_sm90() const { return cc_major == 9 && cc_minor == 0; }
    // Peak DRAM bytes the card moves per SM per SM clock (double data rate): the H100 SXM's
    // 3.35 TB/s over 132 SMs at 1.98 GHz is 12.8, the H200's 4.8 TB/s 18.4. 0 if unknown.
    double dram_bytes_per_sm_clock() const {
        if (sm_count <= 0 || sm_clock_khz <= 0) return 0.0;
        return 2.0 * memory_clock_khz * (memory_bus_bits / 8.0) / (static_cast<double>(sm_count) * sm_clock_khz);
    }
};

// Properties of `device`, and FAS_ERROR_UNSUPPORTED_DEVICE when this build cannot run there.
fas_status check_device(int device, DeviceProps* props);

// check_device on the calling thread's current device. Must run before any FA2 host code:
// FA2's hardware_info.h calls exit(1) when cudaGetDevice fails.
fas_status check_current_device(DeviceProps* props);

}  // namespace fas

#endif  // FAS_CORE_DEVICE_H
