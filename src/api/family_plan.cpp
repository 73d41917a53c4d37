// The FamilyPlan of each kind of plan (api/family_plan.h): runs, releases and the info of one
// family's plan, in one place per family.
#include "api/family_plan.h"

#include <new>
#include <utility>

#include "core/status.h"

namespace fas {

fas_status FamilyPlan::update(const int32_t*, cudaStream_t) {
    return fail(FAS_ERROR_INVALID_ARGUMENT,
                "the plan was made without device_lengths, so its lengths are fixed; make it with "
                "fas_plan_args.device_lengths = 1 (DEVICE LENGTHS) to update them on the device");
}

namespace {

class Fa2Plan final : public FamilyPlan {
public:
    explicit Fa2Plan(std::unique_ptr<fas_fa2::Plan> plan) : plan_(std::move(plan)) {}
    fas_status run(const fas_plan_run_args& a) override {
        return fas_fa2::run_plan(*plan_, a.q, a.k, a.v, a.out, a.softmax_lse, a.stream);
    }
    fas_status retire(cudaStream_t stream) override {
        // FA2 plan memory is freed with cudaFree, which may not overlap its runs.
        const cudaError_t error = cudaStreamSynchronize(stream);
        if (error != cudaSuccess) return fail_cuda(error, "cudaStreamSynchronize before freeing the FA2 plan");
        return FAS_SUCCESS;
    }
    void fill_info(fas_plan_info* info) const override { info->device_bytes = plan_->device_bytes; }

private:
    std::unique_ptr<fas_fa2::Plan> plan_;
};

class Sm90Plan final : public FamilyPlan {
public:
    explicit Sm90Plan(std::unique_ptr<fas_sm90::Plan> plan) : plan_(std::move(plan)) {}
    fas_status run(const fas_plan_run_args& a) override {
        const fas_sm90::RunTensors tensors{a.q,         a.k,         a.v,         a.out,          a.softmax_lse,
                                           a.q_descale, a.k_descale, a.v_descale, a.page_indices, a.sinks};
        return fas_sm90::run_plan(*plan_, tensors, a.stream);
    }
    fas_status retire(cudaStream_t stream) override { return fas_sm90::retire_plan(plan_.get(), stream); }
    void fill_info(fas_plan_info* info) const override {  // one CTA per SM, query heads not packed, no KV split
        info->device_bytes = fas_sm90::schedule_device_bytes(plan_->schedule);
        info->kv_splits = 1;
        info->packed_gqa = 1;
        info->query_tile_rows = fas_sm90::query_tile_rows(*plan_->kernel);
        info->num_ctas = plan_->args.num_ctas;
        info->total_pages = plan_->total_pages;
        info->ctas_per_sm = 1;
        info->query_tiles = plan_->args.num_units * plan_->args.tiles_per_unit;
        info->packed = plan_->kernel->kind == fas_sm90::Kind::kPacked ? 1 : 0;
    }

private:
    std::unique_ptr<fas_sm90::Plan> plan_;
};

class PagedPlan final : public FamilyPlan {
public:
    explicit PagedPlan(std::unique_ptr<fas_paged::Plan> plan) : plan_(std::move(plan)) {}
    fas_status run(const fas_plan_run_args& a) override { return fas_paged::run_plan(*plan_, a); }
    fas_status retire(cudaStream_t stream) override { return fas_paged::retire_plan(plan_.get(), stream); }
    fas_status update(const int32_t* kv_lengths, cudaStream_t stream) override {
        if (plan_->args.device_ctas == nullptr) return FamilyPlan::update(kv_lengths, stream);  // a host plan
        return fas_paged::update_plan(*plan_, kv_lengths, stream);
    }
    void fill_info(fas_plan_info* info) const override {
        info->device_bytes = plan_->block->bytes;
        info->kv_splits = plan_->kv_splits;
        info->packed_gqa = plan_->group;
        info->query_tile_rows = plan_->tile_rows;
        info->num_ctas = plan_->args.num_ctas;
        info->total_pages = plan_->contiguous_kv ? 0 : plan_->total_pages;
        info->ctas_per_sm = plan_->ctas_per_sm;
    }

private:
    std::unique_ptr<fas_paged::Plan> plan_;
};

class MixedFamilyPlan final : public FamilyPlan {
public:
    explicit MixedFamilyPlan(std::unique_ptr<MixedPlan> plan) : plan_(std::move(plan)) {}
    fas_status run(const fas_plan_run_args& a) override { return run_mixed_plan(*plan_, a); }
    fas_status retire(cudaStream_t stream) override { return retire_mixed_plan(plan_.get(), stream); }
    void fill_info(fas_plan_info* info) const override { mixed_plan_info(*plan_, info); }

private:
    std::unique_ptr<MixedPlan> plan_;
};

// NULL when out of host memory (the callers report it) or when given no plan.
template <typename Wrapper, typename Plan>
std::unique_ptr<FamilyPlan> wrap(std::unique_ptr<Plan> plan) {
    if (plan == nullptr) return nullptr;
    return std::unique_ptr<FamilyPlan>(new (std::nothrow) Wrapper(std::move(plan)));
}

}  // namespace

std::unique_ptr<FamilyPlan> family_plan(std::unique_ptr<fas_fa2::Plan> plan) { return wrap<Fa2Plan>(std::move(plan)); }
std::unique_ptr<FamilyPlan> family_plan(std::unique_ptr<fas_sm90::Plan> plan) { return wrap<Sm90Plan>(std::move(plan)); }
std::unique_ptr<FamilyPlan> family_plan(std::unique_ptr<fas_paged::Plan> plan) {
    return wrap<PagedPlan>(std::move(plan));
}
std::unique_ptr<FamilyPlan> family_plan(std::unique_ptr<MixedPlan> plan) {
    return wrap<MixedFamilyPlan>(std::move(plan));
}

}  // namespace fas
