// fas_kv_append: validation of its arguments and the launch (paged/append.h).
#ifndef FAS_API_KV_APPEND_H
#define FAS_API_KV_APPEND_H

#include "flash_attn_standalone.h"

namespace fas {

fas_status kv_append(const fas_kv_append_args* args);

}  // namespace fas

#endif  // FAS_API_KV_APPEND_H
