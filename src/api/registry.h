// The kernels of this build across families, as the capability queries report them: FA2's
// first, then SM90's, then the paged family's, each in registry order (kernel_registry.inc).
#ifndef FAS_API_REGISTRY_H
#define FAS_API_REGISTRY_H

#include "flash_attn_standalone.h"

namespace fas {

int num_kernels();
fas_status kernel_info(int index, fas_kernel_info* info);
const char* family_name(fas_family family);  // static string

// fas_fwd's family (FA2): the kernel head dim that serves head_dim.
fas_status query_support(fas_dtype dtype, int head_dim, int causal, int* kernel_head_dim);
// The plan API's choice on the current device: SM90 where built, else FA2.
fas_status query_plan_support(fas_dtype dtype, int head_dim, int causal, fas_family* family, int* kernel_head_dim);

// The paged family's kernel for decode-shaped and paged-KV plans on the current device.
fas_status query_paged_support(fas_dtype dtype, int head_dim, int causal, int max_query_len, int group,
                               int* query_tile_rows);

}  // namespace fas

#endif  // FAS_API_REGISTRY_H
