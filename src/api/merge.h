// fas_merge_states: validation of its arguments and the launch (core/merge_states.h).
#ifndef FAS_API_MERGE_H
#define FAS_API_MERGE_H

#include "flash_attn_standalone.h"

namespace fas {

fas_status merge_states(const fas_merge_states_args* args);

}  // namespace fas

#endif  // FAS_API_MERGE_H
