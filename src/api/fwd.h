// fas_fwd: the one-call forward pass on the FA2 family (decode-shaped calls on the paged family:
// fwd_route.h), and its workspace size.
#ifndef FAS_API_FWD_H
#define FAS_API_FWD_H

#include "flash_attn_standalone.h"

namespace fas {

fas_status run_forward(const fas_fwd_args* args);
fas_status forward_workspace_size(const fas_fwd_args* args, size_t* bytes);

}  // namespace fas

#endif  // FAS_API_FWD_H
