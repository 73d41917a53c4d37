// fas_merge_states (MERGE STATES in flash_attn_standalone_merge.h): every field checked on the
// host, the strides resolved, then one launch on the caller's stream. Nothing is allocated and
// nothing waits.
#include "api/merge.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "api/stream_op.h"
#include "core/device.h"
#include "core/layout.h"
#include "core/merge_states.h"
#include "core/status.h"

namespace fas {

namespace {

// A tensor of num_tokens x num_heads rows of `width` elements, addressed by two strides.
struct Rows {
    const char* name;
    int64_t token_stride, head_stride;
};

// 0 means the token-major default; else positive (and a multiple of 8 where rows are 16-bit).
// The message names the field, name[index] for a per-partial one (index >= 0).
fas_status resolve_stride(int64_t* stride, int64_t fallback, int multiple, const char* name, int index = -1) {
    if (*stride == 0) *stride = fallback;
    if (*stride < 0 || *stride % multiple != 0) {
        return fail(FAS_ERROR_INVALID_ARGUMENT,
                    concat(name, index >= 0 ? concat("[", index, "]") : std::string(), " is ", *stride,
                           "; it must be 0 (the token-major default) or a positive multiple of ", multiple));
    }
    return FAS_SUCCESS;
}

// Elements from a tensor's base to the end of its last row.
int64_t span(const Rows& r, int tokens, int heads, int width) {
    return (tokens - 1) * r.token_stride + static_cast<int64_t>(heads - 1) * r.head_stride + width;
}

// No two rows of an output on one element: with the strides ordered, each must step over
// everything the dimensions inside it cover.
fas_status check_distinct_rows(const Rows& r, int tokens, int heads, int width) {
    std::pair<int64_t, int> dims[2] = {{r.token_stride, tokens}, {r.head_stride, heads}};
    std::sort(std::begin(dims), std::end(dims));
    int64_t covered = width;
    for (const auto& [stride, count] : dims) {
        if (count == 1) continue;
        if (stride < covered) {
            return fail(FAS_ERROR_INVALID_ARGUMENT,
                        concat(r.name, "'s strides (token ", r.token_stride, ", head ", r.head_stride,
                               ") put two (token, head) rows on the same elements; use e.g. the token-major default "
                               "(0, 0)"));
        }
        covered = stride * (count - 1) + covered;
    }
    return FAS_SUCCESS;
}

fas_status validate(const fas_merge_states_args& args, MergeLaunch* m) {
    if (!is_16bit_dtype(args.dtype)) return fail_bad_dtype(args.dtype);
    if (args.num_states < 1 || args.num_states > FAS_MERGE_MAX_STATES) {
        return fail(FAS_ERROR_INVALID_ARGUMENT,
                    concat("num_states is ", args.num_states, "; merge 1 to ", FAS_MERGE_MAX_STATES,
                           " partials per call (merge more in a tree)"));
    }
    if (args.num_tokens < 0 || args.num_heads <= 0) {
        return fail(FAS_ERROR_INVALID_ARGUMENT, concat("num_tokens is ", args.num_tokens, " and num_heads ",
                                                       args.num_heads, "; they must be >= 0 and > 0"));
    }
    if (args.head_dim < 8 || args.head_dim > 512 || args.head_dim % 8 != 0) {
        return fail(FAS_ERROR_INVALID_ARGUMENT,
                    concat("head_dim is ", args.head_dim, "; fas_merge_states takes multiples of 8 in [8, 512]"));
    }
    *m = MergeLaunch{};
    m->dtype = args.dtype;
    m->num_states = args.num_states;
    m->num_tokens = args.num_tokens;
    m->num_heads = args.num_heads;
    m->head_dim = args.head_dim;
    m->token_stride = args.token_stride;
    m->head_stride = args.head_stride;
    m->out = args.out;
    m->out_token_stride = args.out_token_stride;
    m->out_head_stride = args.out_head_stride;
    m->out_lse = args.out_lse;
    m->out_lse_token_stride = args.out_lse_token_stride;
    m->out_lse_head_stride = args.out_lse_head_stride;
    const int64_t row = static_cast<int64_t>(args.num_heads) * args.head_dim;
    const struct {
        int64_t* stride;
        int64_t fallback;
        int multiple;
        const char* name;
    } strides[] = {{&m->token_stride, row, 8, "token_stride"},
                   {&m->head_stride, args.head_dim, 8, "head_stride"},
                   {&m->out_token_stride, row, 8, "out_token_stride"},
                   {&m->out_head_stride, args.head_dim, 8, "out_head_stride"},
                   {&m->out_lse_token_stride, args.num_heads, 1, "out_lse_token_stride"},
                   {&m->out_lse_head_stride, 1, 1, "out_lse_head_stride"}};
    for (const auto& s : strides) {
        if (const fas_status status = resolve_stride(s.stride, s.fallback, s.multiple, s.name); status != FAS_SUCCESS) {
            return status;
        }
    }
    for (int s = 0; s < args.num_states; ++s) {
        m->lse_token_stride[s] = args.lse_token_stride[s];
        m->lse_head_stride[s] = args.lse_head_stride[s];
        fas_status status = resolve_stride(&m->lse_token_stride[s], args.num_heads, 1, "lse_token_stride", s);
        if (status == FAS_SUCCESS) status = resolve_stride(&m->lse_head_stride[s], 1, 1, "lse_head_stride", s);
        if (status != FAS_SUCCESS) return status;
    }
    if (args.num_tokens == 0) return FAS_SUCCESS;
    const Rows out_rows{"out", m->out_token_stride, m->out_head_stride};
    const Rows out_lse_rows{"out_lse", m->out_lse_token_stride, m->out_lse_head_stride};
    if (fas_status status = check_distinct_rows(out_rows, args.num_tokens, args.num_heads, args.head_dim);
        status != FAS_SUCCESS) {
        return status;
    }
    if (args.out_lse != nullptr) {
        if (fas_status status = check_distinct_rows(out_lse_rows, args.num_tokens, args.num_heads, 1);
            status != FAS_SUCCESS) {
            return status;
        }
    }
    // Where each tensor lies: checked, then kept as one span each for the overlap rule.
    const size_t bytes = element_bytes(args.dtype);
    const auto extent = [&](const void* base, const Rows& r, int width, size_t element) {
        const int64_t elements = span(r, args.num_tokens, args.num_heads, width);
        return tensor_extent(base, 1, elements, elements, element, r.name);
    };
    std::string names[2 * FAS_MERGE_MAX_STATES];  // v[s] and lse[s], for the messages
    Extent inputs[2 * FAS_MERGE_MAX_STATES];
    for (int s = 0; s < args.num_states; ++s) {
        names[2 * s] = concat("v[", s, "]");
        names[2 * s + 1] = concat("lse[", s, "]");
        if (fas_status status = check_device_pointer(args.v[s], 16, names[2 * s].c_str(), "partial output");
            status != FAS_SUCCESS) {
            return status;
        }
        if (fas_status status =
                check_device_pointer(args.lse[s], sizeof(float), names[2 * s + 1].c_str(), "fp32 LSE of the partial");
            status != FAS_SUCCESS) {
            return status;
        }
        inputs[2 * s] = extent(args.v[s], Rows{names[2 * s].c_str(), m->token_stride, m->head_stride}, args.head_dim,
                               bytes);
        inputs[2 * s + 1] = extent(args.lse[s], Rows{names[2 * s + 1].c_str(), m->lse_token_stride[s],
                                                     m->lse_head_stride[s]}, 1, sizeof(float));
        m->v[s] = args.v[s];
        m->lse[s] = args.lse[s];
    }
    if (fas_status status = check_device_pointer(args.out, 16, "out", "merged output"); status != FAS_SUCCESS) {
        return status;
    }
    Extent outputs[2] = {extent(args.out, out_rows, args.head_dim, bytes), {}};
    int num_outputs = 1;
    if (args.out_lse != nullptr) {
        if (!is_aligned(args.out_lse, sizeof(float))) {
            return fail(FAS_ERROR_INVALID_ARGUMENT, "out_lse is not 4-byte aligned; pass a device fp32 array or NULL");
        }
        outputs[num_outputs++] = extent(args.out_lse, out_lse_rows, 1, sizeof(float));
        if (overlaps(outputs[0], outputs[1])) {
            return fail(FAS_ERROR_INVALID_ARGUMENT, "out overlaps out_lse; give the merged LSE its own buffer");
        }
    }
    for (int o = 0; o < num_outputs; ++o) {
        for (int i = 0; i < 2 * args.num_states; ++i) {
            if (overlaps(outputs[o], inputs[i])) {
                return fail(FAS_ERROR_INVALID_ARGUMENT,
                            concat(outputs[o].name, " overlaps ", inputs[i].name,
                                   "; fas_merge_states does not merge in place: write to a separate buffer"));
            }
        }
    }
    return FAS_SUCCESS;
}

}  // namespace

fas_status merge_states(const fas_merge_states_args* args) {
    return run_stream_op<fas_merge_states_args, MergeLaunch>(
        args, "fas_merge_states_args", "fas_merge_states_args_init()", "merge kernel launch", validate,
        [](const MergeLaunch& launch, const DeviceProps& device, cudaStream_t stream) {
            return launch_merge_states(launch, device.sm_count, stream);
        });
}

}  // namespace fas
