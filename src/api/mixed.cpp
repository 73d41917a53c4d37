// Mixed plans (mixed.h): the split of a paged batch into its decode and prefill parts, each an
// ordinary plan of its sequences, and runs that launch both with the part's share of the page ids.
#include "api/mixed.h"

#include <algorithm>
#include <cstring>
#include <new>

#include "core/kv_cache.h"
#include "api/plan.h"
#include "core/status.h"

namespace fas {

namespace {

// fas_plan_info of a part (a plan of this library: the call cannot fail).
fas_plan_info part_info(const fas_plan* part) {
    fas_plan_info info;
    std::memset(&info, 0, sizeof(info));
    info.struct_size = sizeof(info);
    plan_info(part, &info);
    return info;
}

bool decode_shaped(const fas_plan_args& args, int sequence) {
    return args.cu_seqlens_q[sequence + 1] - args.cu_seqlens_q[sequence] <= kMaxDecodeQueries;
}

int64_t pages_before(const fas_plan_args& args, int sequence) {
    int64_t pages = 0;
    for (int i = 0; i < sequence; ++i) pages += (args.kv_lengths[i] + args.page_size - 1) / args.page_size;
    return pages;
}

// The plan of sequences [first, first + count) of args, with its share of the host page ids.
fas_status create_part(const fas_plan_args& args, int first, int count, MixedPart* part) {
    part->first_sequence = first;
    part->sequences = count;
    part->first_page = pages_before(args, first);
    fas_plan_args sub = args;
    sub.batch_size = count;
    sub.cu_seqlens_q = args.cu_seqlens_q + first;
    sub.kv_lengths = args.kv_lengths + first;
    if (args.page_indices_host != nullptr) sub.page_indices_host = args.page_indices_host + part->first_page;
    return create_plan_part(&sub, &part->plan);
}

}  // namespace

MixedPlan::~MixedPlan() {
    destroy_plan(decode.plan);
    destroy_plan(prefill.plan);
    // Released once the work queued on them completes (the runtime's rule), so no wait here.
    if (fork != nullptr) cudaEventDestroy(fork);
    if (join != nullptr) cudaEventDestroy(join);
    if (side != nullptr) cudaStreamDestroy(side);
}

int mixed_split(const fas_plan_args& args) {
    if (args.kv_layout != FAS_KV_PAGED || args.kv_dtype == FAS_DTYPE_E4M3 || args.dtype == FAS_DTYPE_E4M3) return 0;
    const int n = args.batch_size;
    int head = 0, tail = 0;
    while (head < n && decode_shaped(args, head)) ++head;
    if (head == n) return 0;  // every sequence decodes: one paged plan
    while (tail < n && decode_shaped(args, n - 1 - tail)) ++tail;
    if (head == 0 && tail == 0) return 0;
    return head >= tail ? head : n - tail;
}

fas_status create_mixed_plan(const fas_plan_args& args, int split, std::unique_ptr<MixedPlan>* out) {
    std::unique_ptr<MixedPlan> plan(new (std::nothrow) MixedPlan());
    if (plan == nullptr) return fail(FAS_ERROR_INTERNAL, "out of host memory for the mixed plan");
    const bool decode_first = decode_shaped(args, 0);
    MixedPart& first = decode_first ? plan->decode : plan->prefill;
    MixedPart& second = decode_first ? plan->prefill : plan->decode;
    // A part that cannot be planned alone (e.g. decodes without any key, which the family choice
    // of a whole batch never sees alone) leaves the batch one plan, as before mixed plans.
    if (create_part(args, 0, split, &first) != FAS_SUCCESS ||
        create_part(args, split, args.batch_size - split, &second) != FAS_SUCCESS) {
        return FAS_SUCCESS;
    }
    // Worth two launches only where the decode part gets the decode kernel (16-row tiles); its
    // 64-row tiles are what one plan of the whole batch would give those sequences anyway.
    const fas_plan_info decode = part_info(plan->decode.plan);
    if (decode.family != FAS_FAMILY_PAGED || decode.query_tile_rows != 16) return FAS_SUCCESS;
    // The parts run concurrently: a prefill of few query tiles leaves SMs to the decode CTAs
    // (measured against back-to-back launches: docs/design/mixed-and-fp8-kv.md).
    cudaError_t error = cudaStreamCreateWithFlags(&plan->side, cudaStreamNonBlocking);
    if (error == cudaSuccess) error = cudaEventCreateWithFlags(&plan->fork, cudaEventDisableTiming);
    if (error == cudaSuccess) error = cudaEventCreateWithFlags(&plan->join, cudaEventDisableTiming);
    if (error != cudaSuccess) return fail_cuda(error, "creating the mixed plan's stream and events");
    *out = std::move(plan);
    return FAS_SUCCESS;
}

namespace {

fas_status run_part(const MixedPart& part, const fas_plan_run_args& args, cudaStream_t stream) {
    fas_plan_run_args sub = args;
    sub.stream = stream;
    if (args.page_indices != nullptr) sub.page_indices = args.page_indices + part.first_page;
    return run_plan(part.plan, &sub);
}

}  // namespace

fas_status run_mixed_plan(MixedPlan& plan, const fas_plan_run_args& args) {
    // Prefill first: its CTAs are the longer ones and take their SMs before the decode CTAs.
    std::lock_guard<std::mutex> guard(plan.lock);
    cudaError_t error = cudaEventRecord(plan.fork, args.stream);
    if (error == cudaSuccess) error = cudaStreamWaitEvent(plan.side, plan.fork, 0);
    if (error != cudaSuccess) return fail_cuda(error, "forking the mixed plan's decode part onto its stream");
    fas_status status = run_part(plan.prefill, args, args.stream);
    if (status == FAS_SUCCESS) status = run_part(plan.decode, args, plan.side);
    // Joined whatever happened, so that the run's stream (or a graph capture) never misses it.
    error = cudaEventRecord(plan.join, plan.side);
    if (error == cudaSuccess) error = cudaStreamWaitEvent(args.stream, plan.join, 0);
    if (error != cudaSuccess) return fail_cuda(error, "joining the mixed plan's decode part");
    return status;
}

fas_status retire_mixed_plan(MixedPlan* plan, cudaStream_t stream) {
    for (MixedPart* part : {&plan->prefill, &plan->decode}) {
        const fas_status status = destroy_plan_async(part->plan, stream);
        if (status != FAS_SUCCESS) return status;
        part->plan = nullptr;
    }
    return FAS_SUCCESS;
}

void mixed_plan_info(const MixedPlan& plan, fas_plan_info* info) {
    const fas_plan_info decode = part_info(plan.decode.plan), prefill = part_info(plan.prefill.plan);
    info->kernel_head_dim = prefill.kernel_head_dim;
    info->device_bytes = decode.device_bytes + prefill.device_bytes;
    info->kv_splits = std::max(decode.kv_splits, prefill.kv_splits);
    info->packed_gqa = decode.packed_gqa;
    info->query_tile_rows = prefill.query_tile_rows;
    info->num_ctas = decode.num_ctas + prefill.num_ctas;
    info->total_pages = decode.total_pages + prefill.total_pages;
    info->ctas_per_sm = prefill.ctas_per_sm;
    info->query_tiles = prefill.query_tiles;
    info->packed = 0;
    info->prefill_family = prefill.family;
    info->decode_sequences = plan.decode.sequences;
}

}  // namespace fas
