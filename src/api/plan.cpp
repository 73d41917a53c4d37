// fas_plan: validation of a plan's layout (host offsets, the KV cache), the family choice, and
// runs and releases through the family's plan (api/family_plan.h); what a plan reports of
// itself: plan_info.cpp.
#include "api/plan.h"
#include "api/plan_object.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <memory>
#include <string>
#include <utility>

#include "core/device.h"
#include "core/kv_cache.h"
#include "core/layout.h"
#include "api/mixed.h"
#include "api/registry.h"
#include "core/status.h"
#include "fa2/plan.h"
#include "paged/paged.h"
#include "sm90/sm90.h"

namespace fas {

// A plan runs and is released on its own device, the calling thread's current one.
fas_status check_plan_device(const fas_plan* plan, const char* call) {
    int device = 0;
    const cudaError_t error = cudaGetDevice(&device);
    if (error != cudaSuccess) return fail_cuda(error, "cudaGetDevice");
    if (device == plan->device) return FAS_SUCCESS;
    return fail(FAS_ERROR_INVALID_ARGUMENT,
                concat("the current device is ", device, " but the plan was made on device ", plan->device,
                       "; call cudaSetDevice(", plan->device, ") before ", call, ", or make a plan per device"));
}

fas_status check_plan(const fas_plan* plan) {
    if (plan == nullptr) return fail(FAS_ERROR_INVALID_ARGUMENT, "plan is NULL; pass a plan from fas_plan_create()");
    if (plan->magic != kPlanMagic) {
        return fail(FAS_ERROR_INVALID_ARGUMENT,
                    "plan is not a live fas_plan (destroyed, or not from fas_plan_create()); using it is undefined");
    }
    return FAS_SUCCESS;
}

namespace {

int max_length(const int32_t* offsets, int batch_size) {
    int longest = 0;
    for (int i = 0; i < batch_size; ++i) longest = std::max(longest, offsets[i + 1] - offsets[i]);
    return longest;
}



// The softcap, the sinks, and the local window in the layout's terms: -1 or a width up to max_seqlen_k per
// side, the right side 0 for causal plans, and a window whose right side is 0 made causal (the
// kernels' mask).
fas_status resolve_masks(const fas_plan_args& args, Layout* layout) {
    if (!(args.softcap >= 0.f) || std::isinf(args.softcap)) {
        return fail(FAS_ERROR_INVALID_ARGUMENT,
                    concat("softcap is ", args.softcap, "; it must be a finite value > 0 (the cap) or 0 (off)"));
    }
    // FP8 plans over paged caches run on the decode kernel, which takes both masks.
    const bool sm90_fp8 = layout->dtype == FAS_DTYPE_E4M3 && !layout->paged;
    layout->softcap = args.softcap;
    if (args.use_sinks != 0 && sm90_fp8) {
        return fail(FAS_ERROR_NOT_BUILT, "FP8 (e4m3) plans over contiguous K and V take no sinks yet; set use_sinks to 0");
    }
    layout->sinks = args.use_sinks != 0;
    if (args.use_window == 0) return FAS_SUCCESS;
    for (const auto& [value, name] : {std::pair<int, const char*>{args.window_size_left, "window_size_left"},
                                      std::pair<int, const char*>{args.window_size_right, "window_size_right"}}) {
        if (value < -1) {
            return fail(FAS_ERROR_INVALID_ARGUMENT,
                        concat(name, " is ", value, "; it must be >= 0 (keys on that side of the diagonal) or -1 "
                               "(no limit)"));
        }
    }
    const auto clamp = [&](int width) { return width < 0 ? -1 : std::min(width, layout->max_seqlen_k); };
    layout->window_left = clamp(args.window_size_left);
    layout->window_right = layout->causal ? 0 : clamp(args.window_size_right);
    if (layout->window_right == 0) layout->causal = true;
    return FAS_SUCCESS;
}

// The plan's layout from its arguments, host offsets and KV cache, validated.
fas_status resolve_plan_layout(const fas_plan_args& args, fas_dtype out_dtype, KvCache* kv, Layout* layout) {
    const int batch_size = args.batch_size;
    Layout& l = *layout;
    l.dtype = args.dtype;
    l.out_dtype = out_dtype;
    l.varlen = true;
    if (const fas_status status = resolve_kv_dtype(args, &l.kv_dtype); status != FAS_SUCCESS) return status;
    copy_shared_fields(args, layout);
    l.max_seqlen_q = max_length(args.cu_seqlens_q, batch_size);
    l.total_q = args.cu_seqlens_q[batch_size];
    if (const fas_status status = read_kv_cache(args, kv, layout); status != FAS_SUCCESS) return status;
    if (l.max_seqlen_q == 0 || l.max_seqlen_k == 0) {
        const bool no_queries = l.max_seqlen_q == 0;
        return fail(FAS_ERROR_INVALID_ARGUMENT,
                    concat("the layout has ", no_queries ? "no query rows" : "no keys", " (every sequence of ",
                           no_queries ? "cu_seqlens_q" : kv->paged ? "kv_lengths" : "cu_seqlens_k",
                           " is empty); nothing to plan"));
    }
    if (const fas_status status = resolve_layout(layout); status != FAS_SUCCESS) return status;
    if (const fas_status status = resolve_masks(args, layout); status != FAS_SUCCESS) return status;
    if (kv->paged) {
        if (const fas_status status = resolve_paged_strides(args, kv, layout); status != FAS_SUCCESS) return status;
    }
    if (l.dtype == FAS_DTYPE_E4M3) {
        // TMA moves 16-byte units: a row of 1-byte elements must start 16-byte aligned.
        const std::pair<int64_t, const char*> fp8_strides[] = {
            {l.q_row_stride, "q_row_stride"}, {l.k_row_stride, "k_row_stride"}, {l.v_row_stride, "v_row_stride"}};
        for (const auto& [stride, name] : fp8_strides) {
            if (stride % 16 != 0) {
                return fail(FAS_ERROR_INVALID_ARGUMENT,
                            concat(name, " is ", stride, " elements; e4m3 rows must be multiples of 16 elements "
                                   "(16 bytes) apart"));
            }
        }
    }
    return FAS_SUCCESS;
}

// Why the paged family cannot serve the plan ("" if it can, with *kernel and *request set).
std::string paged_unusable_reason(const Layout& layout, const KvCache& kv, const fas_plan_args& args,
                                  const DeviceProps& device, const fas_paged::Kernel** kernel,
                                  fas_paged::PlanRequest* request) {
    if (!device.is_sm90()) {
        return concat("the device has compute capability ", device.cc_major, ".", device.cc_minor,
                      "; the paged kernels are built for 9.0");
    }
    if (!is_16bit_dtype(layout.dtype) && !has_fp8_kv_cache(layout)) {
        return "the paged family takes fp16/bf16 q, or e4m3 q over a paged e4m3 cache (FP8 plans over contiguous K "
               "and V run on the SM90 FP8 kernels)";
    }
    const int64_t out_width = static_cast<int64_t>(layout.num_heads_q) * layout.head_dim;
    if (layout.out_row_stride != out_width) {
        return concat("out_row_stride is ", layout.out_row_stride, "; the paged kernels write out contiguously (",
                      out_width, " elements per row): pass 0");
    }
    std::string why;
    // The kernels are named by out's type: q's, or (e4m3 q) out_dtype.
    *kernel = fas_paged::choose_kernel(layout.out_dtype, layout.kv_dtype, layout.head_dim, layout.causal, layout.max_seqlen_q,
                                       layout.num_heads_q / layout.num_heads_k,
                                       fas_paged::pair_tiles(!kv.paged, kv.page_size), &why);
    if (*kernel == nullptr) return why;
    if ((*kernel)->tile_q != 16 && (has_local_window(layout) || layout.softcap > 0.f || layout.sinks)) {
        return concat("paged plans take a window, softcap or sinks on the decode kernel only, whose tiles hold 16 rows "
                      "(queries per sequence x query heads per KV head; here ", layout.max_seqlen_q, " x ",
                      layout.num_heads_q / layout.num_heads_k, "); the 64-row paged tiles take none of them yet");
    }
    if (kv.table_stride > 0 && (*kernel)->tile_q != 16) {
        return concat("device-length plans run on the decode kernel, whose tiles hold 16 rows (32 where pages hold a "
                      "multiple of 8 rows) of queries per sequence x query heads per KV head; here ",
                      layout.max_seqlen_q, " x ", layout.num_heads_q / layout.num_heads_k);
    }
    request->cu_seqlens_q = args.cu_seqlens_q;
    request->batch_size = layout.batch_size;
    request->table_stride = kv.table_stride;
    if (kv.paged) {
        request->kv_lengths = kv.kv_lengths;
        request->num_pages = kv.num_pages;
        request->page_size = kv.page_size;
        request->k_page_stride = kv.k_page_stride;
        request->v_page_stride = kv.v_page_stride;
        return std::string();
    }
    // Contiguous KV as pages whose ids are row numbers (paged.h, kContiguousPageSize).
    request->cu_seqlens_k = kv.cu_seqlens_k;
    request->page_size = fas_paged::kContiguousPageSize;
    request->num_pages = 0;  // the plan lists its own pages over cu_seqlens_k[batch] rows
    request->k_page_stride = layout.k_row_stride;
    request->v_page_stride = layout.v_row_stride;
    if (std::max(request->k_page_stride, request->v_page_stride) > kMaxPagedStride) {
        return "the K/V row strides are too large for the paged kernels' 32-bit strides";
    }
    return std::string();
}

std::string decode_shaped_reason() {
    return concat("every sequence has at most ", kMaxDecodeQueries, " queries: decode-shaped plans take the paged family");
}

// Why the SM90 family cannot serve the plan ("" if it can, with *kernel set; *schedule is set
// either way). Paged caches take it for chunked prefill only (more than kMaxDecodeQueries
// queries in some sequence): the paged family keeps decode-shaped plans, whose packed query
// tiles and KV splits suit them better.
std::string sm90_unusable_reason(const Layout& layout, const KvCache& kv, const fas_plan_args& args,
                                 const DeviceProps& device, const fas_sm90::Kernel** kernel,
                                 fas_sm90::PlanLayout* schedule) {
    *schedule = fas_sm90::PlanLayout{args.cu_seqlens_q,     kv.cu_seqlens_k,    kv.kv_lengths,   kv.page_size,
                                     layout.batch_size,     layout.num_heads_q, layout.num_heads_k,
                                     layout.head_dim,       layout.causal,      layout.dtype == FAS_DTYPE_E4M3,
                                     device.sm_count, layout.window_left};
    if (args.disable_sm90 != 0) return "disabled by fas_plan_args.disable_sm90";
    if (args.device_lengths != 0) return "device-length plans run on the paged family's decode kernel";
    if (has_fp8_kv_cache(layout)) return "FP8 (e4m3) KV caches run on the paged family's decode kernel";
    if (layout.window_right > 0) {
        // A right window runs on the causal kernels, their diagonal moved right by it (our kernel
        // body; packed plans: the row table); one that reaches every row's last key is no limit.
        if (layout.window_right < layout.max_seqlen_q - 1) {
            schedule->causal = true;
            schedule->window_right = layout.window_right;
        }
    }
    const bool softcap = layout.softcap > 0.f;
    if (softcap && layout.sinks) return "the SM90 softcap kernels take no sinks yet";
    if (kv.paged && layout.max_seqlen_q <= kMaxDecodeQueries) {
        return decode_shaped_reason();
    }
    // Batches of short sequences share query tiles where a packed kernel is built and packing pays
    // (sm90/packed_args.h); the packed kernel takes causal plans and left windows through its row table.
    if (!kv.paged && !softcap && device.is_sm90()) {
        if (const fas_sm90::Kernel* packed = fas_sm90::find_kernel(layout.dtype, layout.out_dtype, layout.head_dim,
                                                                   schedule->causal, fas_sm90::Kind::kPacked)) {
            fas_sm90::PlanLayout candidate = *schedule;
            candidate.head_dim = packed->head_dim;
            candidate.packed = true;
            if (fas_sm90::packs_pay(candidate) && fas_sm90::layout_unsupported_reason(candidate).empty()) {
                *schedule = candidate;
                *kernel = packed;
                return std::string();
            }
        }
    }
    // FP8 plans with a left window run on FP8 kernels of their own (family sm90_fp8_window), and with
    // a softcap on the FP8 softcap kernels, window or not (family sm90_fp8_softcap).
    using fas_sm90::Kind;
    const Kind kind = kv.paged ? (softcap ? Kind::kPagedSoftcap : Kind::kPaged)
                      : softcap ? Kind::kSoftcap
                      : layout.dtype == FAS_DTYPE_E4M3 && layout.window_left >= 0 ? Kind::kFp8Window
                                                                                   : Kind::kPlain;
    const fas_sm90::Kernel* found =
        device.is_sm90() ? fas_sm90::find_kernel(layout.dtype, layout.out_dtype, layout.head_dim, schedule->causal, kind)
                         : nullptr;
    if (found == nullptr) {  // the table searched once; the message names what is built
        return fas_sm90::kernel_unavailable_reason(layout.dtype, layout.out_dtype, layout.head_dim, schedule->causal,
                                                   device, kind);
    }
    schedule->head_dim = found->head_dim;  // the kernel's (round-up): its tile shape plans the work
    std::string why;
    if (kv.paged) why = fas_sm90::paged_strides_unsupported_reason(layout, kv.k_page_stride, kv.v_page_stride);
    if (why.empty()) why = fas_sm90::layout_unsupported_reason(*schedule);
    if (why.empty()) *kernel = found;
    return why;
}

}  // namespace

namespace {

// Hands out a plan object that holds its family's plan.
fas_status adopt(std::unique_ptr<fas_plan> plan, std::unique_ptr<FamilyPlan> impl, fas_plan** out) {
    if (impl == nullptr) return fail(FAS_ERROR_INTERNAL, "out of host memory for the plan");
    plan->impl = std::move(impl);
    *out = plan.release();
    return FAS_SUCCESS;
}

fas_status create(const fas_plan_args* user_args, fas_plan** plan_out, bool may_mix, bool no_fa2 = false) {
    if (plan_out == nullptr) return fail(FAS_ERROR_INVALID_ARGUMENT, "plan is NULL; pass a fas_plan* to receive the plan");
    *plan_out = nullptr;
    fas_plan_args args;
    if (const fas_status status = read_args_struct(user_args, offsetof(fas_plan_args, kv_layout), "fas_plan_args",
                                                   "fas_plan_args_init()", &args);
        status != FAS_SUCCESS) {
        return status;
    }
    const bool fp8 = args.dtype == FAS_DTYPE_E4M3;
    if (!fp8 && !is_16bit_dtype(args.dtype)) return fail_bad_dtype(args.dtype);
    if (fp8 && !is_16bit_dtype(args.out_dtype)) {
        return fail(FAS_ERROR_INVALID_ARGUMENT,
                    concat("out_dtype ", static_cast<int>(args.out_dtype), " is not FAS_DTYPE_FP16 or FAS_DTYPE_BF16; ",
                           "an FAS_DTYPE_E4M3 plan needs the element type of out there"));
    }
    const fas_dtype out_dtype = fp8 ? args.out_dtype : args.dtype;
    if (args.batch_size <= 0 || args.batch_size > kMaxGridDimYZ) {
        return fail(FAS_ERROR_INVALID_ARGUMENT,
                    concat("batch_size ", args.batch_size, " is out of range; it must be in [1, ", kMaxGridDimYZ, "]"));
    }
    fas_status status = check_host_offsets(args.cu_seqlens_q, args.batch_size, "cu_seqlens_q");
    if (status != FAS_SUCCESS) return status;
    Layout layout;
    KvCache kv;
    status = resolve_plan_layout(args, out_dtype, &kv, &layout);
    if (status != FAS_SUCCESS) return status;

    DeviceProps device{};
    int device_index = 0;
    const cudaError_t device_error = cudaGetDevice(&device_index);
    if (device_error != cudaSuccess) return fail_cuda(device_error, "cudaGetDevice (is a CUDA driver and GPU present?)");
    status = check_device(device_index, &device);
    if (status != FAS_SUCCESS) return status;

    if (args.device_lengths != 0 && (!kv.paged || layout.batch_size > fas_paged::kMaxDeviceBatch)) {
        return fail(FAS_ERROR_INVALID_ARGUMENT,
                    concat("device_lengths needs a paged KV cache (kv_layout FAS_KV_PAGED) and at most ",
                           fas_paged::kMaxDeviceBatch, " sequences (here ", layout.batch_size, ")"));
    }
    // A paged batch of decode and prefill sequences: a plan per part (mixed.h).
    if (const int split = may_mix && args.device_lengths == 0 ? mixed_split(args) : 0; split > 0) {
        std::unique_ptr<MixedPlan> mixed;
        status = create_mixed_plan(args, split, &mixed);
        if (status != FAS_SUCCESS) return status;
        if (mixed != nullptr) {
            std::unique_ptr<fas_plan> plan(new fas_plan());
            plan->device = device_index;
            plan->layout = layout;
            plan->family = FAS_FAMILY_MIXED;
            return adopt(std::move(plan), family_plan(std::move(mixed)), plan_out);
        }
    }

    // Family choice: decode-shaped varlen plans, and paged caches the SM90 family cannot serve
    // (it takes their chunked prefill), go to the paged family; the rest to SM90 where a kernel
    // is built for the request and the layout fits it, else FA2.
    const fas_sm90::Kernel* sm90_kernel = nullptr;
    fas_sm90::PlanLayout schedule_layout{};
    const std::string sm90_reason = sm90_unusable_reason(layout, kv, args, device, &sm90_kernel, &schedule_layout);
    const fas_paged::Kernel* paged_kernel = nullptr;
    fas_paged::PlanRequest paged_request{};
    if (kv.paged ? sm90_kernel == nullptr : layout.max_seqlen_q <= kMaxDecodeQueries && args.disable_sm90 == 0) {
        const std::string why = paged_unusable_reason(layout, kv, args, device, &paged_kernel, &paged_request);
        if (kv.paged && !why.empty()) {
            return fail(device.is_sm90() ? FAS_ERROR_NOT_BUILT : FAS_ERROR_UNSUPPORTED_DEVICE,
                        concat("a paged KV cache runs only on the paged family, which cannot serve this plan: ", why));
        }
        if (!why.empty()) paged_kernel = nullptr;
    }
    if (paged_kernel != nullptr) {
        std::unique_ptr<fas_paged::Plan> paged;
        status = fas_paged::create_plan(layout, paged_kernel, paged_request, device, &paged);
        if (status != FAS_SUCCESS) return status;
        std::unique_ptr<fas_plan> plan(new fas_plan());
        plan->device = device_index;
        plan->layout = layout;
        plan->family = FAS_FAMILY_PAGED;
        plan->kernel_head_dim = paged_kernel->head_dim;
        plan->sm90_unused_reason = kv.paged ? sm90_reason : decode_shaped_reason();
        return adopt(std::move(plan), family_plan(std::move(paged)), plan_out);
    }
    if (fp8 && sm90_kernel == nullptr) {
        const bool wrong_device = !device.is_sm90();
        return fail(wrong_device ? FAS_ERROR_UNSUPPORTED_DEVICE : FAS_ERROR_NOT_BUILT,
                    concat("FP8 (e4m3) plans run only on the SM90 family, which cannot serve this one: ", sm90_reason,
                           wrong_device ? "" : "; rebuild with a matching sm90_fp8_prefill kernel (matrix full)"));
    }
    if (layout.sinks && sm90_kernel == nullptr) {
        return fail(FAS_ERROR_NOT_BUILT,
                    concat("sinks are applied by the SM90 16-bit kernels and the paged decode kernel, and neither "
                           "serves this plan (SM90: ", sm90_reason, "); FA2 takes no sinks"));
    }
    if (no_fa2 && sm90_kernel == nullptr) return FAS_SUCCESS;  // *plan_out stays NULL: FA2 would serve it
    const bool fa2_causal = layout.causal && !has_local_window(layout);  // windows: FA2's local path
    const fas_fa2::Kernel* fa2_kernel =
        sm90_kernel != nullptr ? nullptr : fas_fa2::find_plain_kernel(out_dtype, layout.head_dim, fa2_causal);
    if (sm90_kernel == nullptr && fa2_kernel == nullptr) {
        return fail(FAS_ERROR_NOT_BUILT,
                    concat("no kernel serves this plan: SM90 is not usable (", sm90_reason, ") and this build has no ",
                           dtype_name(out_dtype), fa2_causal ? " causal" : " non-causal", " FA2 kernel for head_dim ",
                           layout.head_dim, " (FA2 head dims built: ",
                           fas_fa2::built_head_dims(out_dtype, fa2_causal), "); rebuild with a matching kernel"));
    }

    std::unique_ptr<fas_plan> plan(new fas_plan());
    plan->device = device_index;
    plan->layout = layout;
    if (sm90_kernel != nullptr) {
        std::unique_ptr<fas_sm90::Plan> sm90;
        status = fas_sm90::create_plan(layout, sm90_kernel, schedule_layout, args.cu_seqlens_q[0], kv, device, &sm90);
        if (status != FAS_SUCCESS) return status;
        plan->family = FAS_FAMILY_SM90;
        plan->kernel_head_dim = sm90_kernel->head_dim;
        return adopt(std::move(plan), family_plan(std::move(sm90)), plan_out);
    }
    std::unique_ptr<fas_fa2::Plan> fa2;
    status = fas_fa2::create_plan(layout, fa2_kernel, args.cu_seqlens_q, args.cu_seqlens_k, args.stream, &fa2);
    if (status != FAS_SUCCESS) return status;
    plan->family = FAS_FAMILY_FA2;
    plan->kernel_head_dim = fa2_kernel->head_dim;
    plan->sm90_unused_reason = sm90_reason;
    return adopt(std::move(plan), family_plan(std::move(fa2)), plan_out);
}

}  // namespace

fas_status create_plan(const fas_plan_args* args, fas_plan** plan) { return create(args, plan, true); }

fas_status create_plan_part(const fas_plan_args* args, fas_plan** plan) { return create(args, plan, false); }

fas_status create_plan_without_fa2(const fas_plan_args* args, fas_plan** plan) { return create(args, plan, false, true); }

fas_status run_plan(const fas_plan* plan, const fas_plan_run_args* user_args) {
    fas_status status = check_plan(plan);
    if (status != FAS_SUCCESS) return status;
    fas_plan_run_args args;
    status = read_args_struct(user_args, offsetof(fas_plan_run_args, page_indices), "fas_plan_run_args",
                              "fas_plan_run_args_init()", &args);
    if (status != FAS_SUCCESS) return status;
    status = check_tensors(plan->layout, args.q, args.k, args.v, args.out, args.softmax_lse);
    if (status != FAS_SUCCESS) return status;
    // Null and alignment only, as the other run pointers: a run does no runtime pointer query.
    if (plan->layout.sinks && (args.sinks == nullptr || !is_aligned(args.sinks, sizeof(float)))) {
        return fail(FAS_ERROR_INVALID_ARGUMENT,
                    concat("sinks is ", args.sinks == nullptr ? "NULL" : "not 4-byte aligned",
                           "; the plan was made with use_sinks: pass the DEVICE fp32 sink logits, one per query head"));
    }
    if (!plan->layout.sinks && args.sinks != nullptr) {
        return fail(FAS_ERROR_INVALID_ARGUMENT,
                    "sinks is set but the plan was made without use_sinks; make the plan with use_sinks = 1 or "
                    "pass sinks = NULL");
    }
    status = check_plan_device(plan, "fas_plan_run");
    if (status != FAS_SUCCESS) return status;
    status = check_no_pending_cuda_error();
    if (status != FAS_SUCCESS) return status;
    return plan->impl->run(args);
}

fas_status destroy_plan(fas_plan* plan) {
    if (plan == nullptr) return FAS_SUCCESS;
    const fas_status status = check_plan(plan);
    if (status != FAS_SUCCESS) return status;
    delete plan;
    return FAS_SUCCESS;
}

fas_status destroy_plan_async(fas_plan* plan, cudaStream_t stream) {
    if (plan == nullptr) return FAS_SUCCESS;
    fas_status status = check_plan(plan);
    if (status != FAS_SUCCESS) return status;
    status = check_plan_device(plan, "fas_plan_destroy_async");
    if (status != FAS_SUCCESS) return status;
    status = plan->impl->retire(stream);
    if (status != FAS_SUCCESS) return status;
    delete plan;
    return FAS_SUCCESS;
}

}  // namespace fas
