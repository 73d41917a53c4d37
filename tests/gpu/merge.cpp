// fas_merge_states: partial attentions merged by their LSE.
//   * random partials against a CPU merge in double: 1, 2, 3 and 16 partials, head dims 64 to
//     512, token-major and head-major layouts (padded strides whose gaps must keep their NaN),
//     rows that some or all partials did not see (LSE +infinity or -infinity), out_lse or not;
//     out within one rounding of the dtype (2 ulp of max |ref|), lse within 1e-4;
//   * cascade: the keys of each sequence split into a prefix (every query sees all of it) and a
//     suffix (causal), one plan per part with its LSE in the plan's own layout, merged, then
//     judged by reference.h's rule against the causal attention over all the keys;
//   * misuse: refused with FAS_ERROR_INVALID_ARGUMENT and a message, no CUDA error pending.
#include "reference.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <deque>
#include <iterator>
#include <limits>

namespace gpu_test {
namespace {

struct RandomMerge {
    std::string name;
    int states, tokens, heads, head_dim;
    bool head_major;  // partials and out [heads, tokens, head_dim + pad], LSE [heads, tokens]
    bool with_lse;    // out_lse requested
    int pad;          // extra elements per row of out (head-major) or per token (token-major)
};

float ulp_of(fas_dtype dtype) { return dtype == FAS_DTYPE_BF16 ? 0.0078125f : 0.0009765625f; }

CaseOutcome run_random_merge(const RandomMerge& c, fas_dtype dtype, uint64_t seed, cudaStream_t stream) {
    std::mt19937_64 rng(seed);
    const int64_t d = c.head_dim, rows = static_cast<int64_t>(c.tokens) * c.heads;
    // Partials packed [tokens, heads, d] (or [heads, tokens, d]); out with `pad` extra elements.
    const int64_t token_stride = c.head_major ? d : c.heads * d;
    const int64_t head_stride = c.head_major ? c.tokens * d : d;
    const int64_t out_token_stride = c.head_major ? d + c.pad : c.heads * d + c.pad;
    const int64_t out_head_stride = c.head_major ? c.tokens * (d + c.pad) : d;
    const int64_t lse_token_stride = c.head_major ? 1 : c.heads, lse_head_stride = c.head_major ? c.tokens : 1;
    const size_t out_elements = static_cast<size_t>(c.head_major ? c.heads * out_head_stride : c.tokens * out_token_stride);
    std::vector<RoundedTensor> v;
    std::vector<std::vector<float>> lse(c.states, std::vector<float>(rows));
    std::uniform_real_distribution<float> logit(-6.f, 6.f);
    std::uniform_int_distribution<int> pick(0, 9);
    const float inf = std::numeric_limits<float>::infinity();
    for (int s = 0; s < c.states; ++s) {
        v.push_back(random_tensor(dtype, static_cast<size_t>(rows * d), rng));
        for (int64_t r = 0; r < rows; ++r) {
            const int p = pick(rng);  // a tenth of the rows unseen by this partial, both conventions
            lse[s][r] = p == 0 ? inf : p == 1 && c.states > 1 ? -inf : logit(rng);
        }
    }
    if (rows > 3) {  // one row no partial saw
        for (int s = 0; s < c.states; ++s) lse[s][3] = s % 2 ? -inf : inf;
    }
    // The device images: LSE of row (t, h) where the layout puts it.
    std::deque<DeviceBuffer> v_dev, lse_dev;  // a deque: DeviceBuffer does not move
    fas_merge_states_args args;
    fas_merge_states_args_init(&args);
    for (int s = 0; s < c.states; ++s) {
        std::vector<float> image(rows);
        for (int t = 0; t < c.tokens; ++t) {
            for (int h = 0; h < c.heads; ++h) image[t * lse_token_stride + h * lse_head_stride] = lse[s][t * c.heads + h];
        }
        std::vector<uint16_t> bits(rows * d);
        for (int t = 0; t < c.tokens; ++t) {
            for (int h = 0; h < c.heads; ++h) {
                std::memcpy(&bits[t * token_stride + h * head_stride], &v[s].bits[(t * c.heads + h) * d], d * 2);
            }
        }
        v_dev.emplace_back(bits.size() * 2);
        lse_dev.emplace_back(image.size() * sizeof(float));
        upload(v_dev.back().as<void>(), bits.data(), bits.size() * 2);
        upload(lse_dev.back().as<void>(), image.data(), image.size() * sizeof(float));
    }
    DeviceBuffer out_dev(out_elements * 2), out_lse_dev(rows * sizeof(float));
    fill(out_dev.as<void>(), 0xFF, out_dev.bytes());
    fill(out_lse_dev.as<void>(), 0xFF, out_lse_dev.bytes());
    args.dtype = dtype;
    args.num_states = c.states;
    args.num_tokens = c.tokens;
    args.num_heads = c.heads;
    args.head_dim = c.head_dim;
    for (int s = 0; s < c.states; ++s) {
        args.v[s] = v_dev[s].as<void>();
        args.lse[s] = lse_dev[s].as<float>();
    }
    args.token_stride = c.head_major ? token_stride : 0;  // token-major: the defaults
    args.head_stride = c.head_major ? head_stride : 0;
    for (int s = 0; s < c.states; ++s) {  // token-major: the defaults
        args.lse_token_stride[s] = c.head_major ? lse_token_stride : 0;
        args.lse_head_stride[s] = c.head_major ? lse_head_stride : 0;
    }
    args.out = out_dev.as<void>();
    args.out_token_stride = out_token_stride;
    args.out_head_stride = out_head_stride;
    args.out_lse = c.with_lse ? out_lse_dev.as<float>() : nullptr;
    args.out_lse_token_stride = lse_token_stride;
    args.out_lse_head_stride = lse_head_stride;
    args.stream = stream;
    if (fas_merge_states(&args) != FAS_SUCCESS) return {false, std::string("fas_merge_states failed: ") + fas_get_last_error()};
    CUDA_CHECK(cudaStreamSynchronize(stream));
    std::vector<uint16_t> out(out_elements);
    std::vector<float> out_lse(rows);
    CUDA_CHECK(cudaMemcpy(out.data(), out_dev.as<void>(), out_dev.bytes(), cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(out_lse.data(), out_lse_dev.as<void>(), out_lse_dev.bytes(), cudaMemcpyDeviceToHost));

    // The CPU merge in double, and the comparison.
    double max_ref = 0.0, max_error = 0.0, max_lse_error = 0.0;
    size_t wrong_empty = 0, touched = 0;
    std::vector<char> written(out_elements, 0);
    for (int t = 0; t < c.tokens; ++t) {
        for (int h = 0; h < c.heads; ++h) {
            const int64_t r = t * c.heads + h;
            double top = -inf;
            for (int s = 0; s < c.states; ++s) {
                if (std::isfinite(lse[s][r])) top = std::max(top, static_cast<double>(lse[s][r]));
            }
            const uint16_t* got = &out[t * out_token_stride + h * out_head_stride];
            std::memset(&written[t * out_token_stride + h * out_head_stride], 1, d);
            const float got_lse = out_lse[t * lse_token_stride + h * lse_head_stride];
            if (top == -inf) {  // no partial saw a key: out 0, lse +infinity
                for (int e = 0; e < d; ++e) wrong_empty += got[e] != 0 && got[e] != 0x8000;
                if (c.with_lse) wrong_empty += !(got_lse == inf);
                continue;
            }
            double sum = 0.0;
            std::vector<double> acc(d, 0.0);
            for (int s = 0; s < c.states; ++s) {
                if (!std::isfinite(lse[s][r])) continue;
                const double w = std::exp(lse[s][r] - top);
                sum += w;
                for (int e = 0; e < d; ++e) acc[e] += w * v[s].values[r * d + e];
            }
            for (int e = 0; e < d; ++e) {
                const double want = acc[e] / sum;
                max_ref = std::max(max_ref, std::fabs(want));
                const double have = from_dtype_bits(dtype, got[e]);
                max_error = std::isfinite(have) ? std::max(max_error, std::fabs(have - want)) : inf;
            }
            if (c.with_lse) {
                const double want = top + std::log(sum);
                max_lse_error = std::isfinite(got_lse) ? std::max(max_lse_error, std::fabs(got_lse - want)) : inf;
            }
        }
    }
    for (size_t i = 0; i < out_elements; ++i) touched += !written[i] && out[i] != kPoisonBits;
    const double limit = 2.0 * ulp_of(dtype) * std::max(max_ref, 1.0), lse_limit = 1e-4;
    char detail[256];
    std::snprintf(detail, sizeof detail, "out_err=%.3e (tol %.3e) lse_err=%.3e (tol %.0e) wrong_empty=%zu touched_gaps=%zu",
                  max_error, limit, max_lse_error, lse_limit, wrong_empty, touched);
    const bool passed = max_error <= limit && max_lse_error <= lse_limit && wrong_empty == 0 && touched == 0;
    return {passed, detail};
}

// A varlen plan over K/V rows [total_k, heads_kv, d] with its LSE: out and lse written on stream.
fas_status run_part(const AttentionCase& c, const std::vector<int32_t>& cu_q, const std::vector<int32_t>& cu_k,
                    const void* q, const void* k, const void* v, void* out, float* lse, cudaStream_t stream,
                    fas_lse_layout* layout, std::string* family) {
    fas_plan_args plan_args = varlen_plan_args(c.dtype, cu_q.data(), cu_k.data(), static_cast<int>(c.seqlens_q.size()),
                                               c.heads_q, c.heads_kv, c.head_dim, c.causal);
    plan_args.disable_sm90 = c.disable_sm90 ? 1 : 0;
    plan_args.stream = stream;
    fas_plan* plan = nullptr;
    fas_status status = fas_plan_create(&plan_args, &plan);
    if (status != FAS_SUCCESS) return status;
    fas_plan_info info;
    std::memset(&info, 0, sizeof info);
    info.struct_size = sizeof info;
    status = fas_plan_get_info(plan, &info);
    *layout = info.lse_layout;
    *family = status == FAS_SUCCESS && info.family_name != nullptr ? info.family_name : "?";
    fas_plan_run_args run = plan_run_args(q, k, v, out, stream);
    run.softmax_lse = lse;
    if (status == FAS_SUCCESS) status = fas_plan_run(plan, &run);
    CUDA_CHECK(cudaStreamSynchronize(stream));  // a plan is destroyed only after its runs
    fas_plan_destroy(plan);
    return status;
}

// The keys of every sequence: a prefix that all its queries see, then a causal suffix of at
// least as many keys as queries (so that the full causal mask sees the whole prefix too).
CaseOutcome run_cascade(fas_dtype dtype, bool causal_suffix, bool fa2, uint64_t seed, cudaStream_t stream) {
    const std::vector<int> seqlens_q = {1, 4, 1, 3, 1}, prefix = {300, 0, 1024, 77, 64}, suffix = {40, 129, 5, 3, 1};
    const int heads_q = 8, heads_kv = 2, d = 128, batch = static_cast<int>(seqlens_q.size());
    std::vector<int> seqlens_k(batch);
    for (int b = 0; b < batch; ++b) seqlens_k[b] = prefix[b] + suffix[b];
    AttentionCase full = varlen_case("cascade", dtype, heads_q, heads_kv, d, causal_suffix, seqlens_q);
    full.seqlens_k = seqlens_k;
    full.disable_sm90 = fa2;  // the FA2 family's plans, whose LSE is head-major
    AttentionCase prefix_case = full, suffix_case = full;
    prefix_case.causal = false;
    prefix_case.seqlens_k = prefix;
    suffix_case.seqlens_k = suffix;
    std::mt19937_64 rng(seed);
    const size_t total_q = std::accumulate(seqlens_q.begin(), seqlens_q.end(), size_t{0});
    const size_t total_k = std::accumulate(seqlens_k.begin(), seqlens_k.end(), size_t{0});
    const size_t q_row = static_cast<size_t>(heads_q) * d, kv_row = static_cast<size_t>(heads_kv) * d;
    RoundedTensor q = random_tensor(dtype, total_q * q_row, rng);
    RoundedTensor k = random_tensor(dtype, total_k * kv_row, rng);
    RoundedTensor v = random_tensor(dtype, total_k * kv_row, rng);
    // Each part's K/V rows, sequences packed in order.
    std::vector<uint16_t> part_k[2], part_v[2];
    std::vector<int32_t> cu_q(batch + 1, 0), cu_part[2] = {std::vector<int32_t>(batch + 1, 0), std::vector<int32_t>(batch + 1, 0)};
    size_t row = 0;
    for (int b = 0; b < batch; ++b) {
        cu_q[b + 1] = cu_q[b] + seqlens_q[b];
        const int lengths[2] = {prefix[b], suffix[b]};
        for (int part = 0; part < 2; ++part) {
            cu_part[part][b + 1] = cu_part[part][b] + lengths[part];
            for (int key = 0; key < lengths[part]; ++key, ++row) {
                part_k[part].insert(part_k[part].end(), &k.bits[row * kv_row], &k.bits[(row + 1) * kv_row]);
                part_v[part].insert(part_v[part].end(), &v.bits[row * kv_row], &v.bits[(row + 1) * kv_row]);
            }
        }
    }
    DeviceBuffer q_dev(q.bits.size() * 2), out_dev(total_q * q_row * 2), lse_out_dev(total_q * heads_q * sizeof(float));
    upload(q_dev.as<void>(), q.bits.data(), q_dev.bytes());
    fas_merge_states_args args;
    fas_merge_states_args_init(&args);
    std::deque<DeviceBuffer> buffers;
    std::string families;
    for (int part = 0; part < 2; ++part) {
        buffers.emplace_back(std::max<size_t>(2, part_k[part].size() * 2));
        upload(buffers.back().as<void>(), part_k[part].data(), part_k[part].size() * 2);
        const void* k_part = buffers.back().as<void>();
        buffers.emplace_back(std::max<size_t>(2, part_v[part].size() * 2));
        upload(buffers.back().as<void>(), part_v[part].data(), part_v[part].size() * 2);
        const void* v_part = buffers.back().as<void>();
        buffers.emplace_back(total_q * q_row * 2);
        void* out_part = buffers.back().as<void>();
        buffers.emplace_back(total_q * heads_q * sizeof(float));
        float* lse_part = buffers.back().as<float>();
        fas_lse_layout layout = FAS_LSE_TOKEN_MAJOR;
        std::string family;
        const fas_status status = run_part(part == 0 ? prefix_case : suffix_case, cu_q, cu_part[part], q_dev.as<void>(),
                                           k_part, v_part, out_part, lse_part, stream, &layout, &family);
        if (status != FAS_SUCCESS) return {false, std::string("a part's plan failed: ") + fas_get_last_error()};
        args.v[part] = out_part;
        args.lse[part] = lse_part;
        if (layout == FAS_LSE_HEAD_MAJOR) {  // each part's LSE in its own plan's layout
            args.lse_token_stride[part] = 1;
            args.lse_head_stride[part] = static_cast<int64_t>(total_q);
        }
        families += std::string(part == 0 ? " prefix plan " : ", suffix plan ") + family;
    }
    fill(out_dev.as<void>(), 0xFF, out_dev.bytes());
    fill(lse_out_dev.as<void>(), 0xFF, lse_out_dev.bytes());
    args.dtype = dtype;
    args.num_states = 2;
    args.num_tokens = static_cast<int>(total_q);
    args.num_heads = heads_q;
    args.head_dim = d;
    args.out = out_dev.as<void>();
    args.out_lse = lse_out_dev.as<float>();
    args.stream = stream;
    if (fas_merge_states(&args) != FAS_SUCCESS) return {false, std::string("fas_merge_states failed: ") + fas_get_last_error()};
    CUDA_CHECK(cudaStreamSynchronize(stream));
    std::vector<uint16_t> out(total_q * q_row);
    std::vector<float> lse(total_q * heads_q);
    CUDA_CHECK(cudaMemcpy(out.data(), out_dev.as<void>(), out_dev.bytes(), cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(lse.data(), lse_out_dev.as<void>(), lse_out_dev.bytes(), cudaMemcpyDeviceToHost));
    const Reference ref = compute_reference(full, q.values, k.values, v.values, 1.f / std::sqrt(static_cast<float>(d)));
    OutputView view{out.data(), q_row};
    view.lse = lse.data();
    view.lse_layout = LseLayout::kTokenMajor;
    const Comparison result = compare_with_reference(full, ref, view);
    char detail[200];
    std::snprintf(detail, sizeof detail, "out_err=%.3e (tol %.3e) lse_err=%.3e (tol %.3e) lse_mismatches=%zu",
                  result.max_out_error, result.out_limit, result.max_lse_error, result.lse_limit, result.lse_mismatches);
    return {result.passed, detail + families};
}

// Each bad argument alone: refused with FAS_ERROR_INVALID_ARGUMENT, a message, and no CUDA
// error left pending.
CaseOutcome run_merge_misuse(fas_dtype dtype) {
    DeviceBuffer v0(64 * 2 * 128), v1(64 * 2 * 128), l0(64 * 4), l1(64 * 4), out(64 * 2 * 128), out_lse(64 * 4);
    const auto base = [&] {
        fas_merge_states_args a;
        fas_merge_states_args_init(&a);
        a.dtype = dtype;
        a.num_states = 2;
        a.num_tokens = 16;
        a.num_heads = 4;
        a.head_dim = 64;
        a.v[0] = v0.as<void>(), a.v[1] = v1.as<void>();
        a.lse[0] = l0.as<float>(), a.lse[1] = l1.as<float>();
        a.out = out.as<void>();
        a.out_lse = out_lse.as<float>();
        return a;
    };
    std::vector<uint16_t> host(16);
    const struct {
        const char* what;
        void (*mutate)(fas_merge_states_args*, const std::vector<uint16_t>&);
    } cases[] = {
        {"num_states 0", [](fas_merge_states_args* a, const std::vector<uint16_t>&) { a->num_states = 0; }},
        {"num_states 17", [](fas_merge_states_args* a, const std::vector<uint16_t>&) { a->num_states = FAS_MERGE_MAX_STATES + 1; }},
        {"head_dim 12", [](fas_merge_states_args* a, const std::vector<uint16_t>&) { a->head_dim = 12; }},
        {"dtype e4m3", [](fas_merge_states_args* a, const std::vector<uint16_t>&) { a->dtype = FAS_DTYPE_E4M3; }},
        {"v[1] NULL", [](fas_merge_states_args* a, const std::vector<uint16_t>&) { a->v[1] = nullptr; }},
        {"v[0] host memory", [](fas_merge_states_args* a, const std::vector<uint16_t>& h) { a->v[0] = h.data(); }},
        {"lse[1] misaligned", [](fas_merge_states_args* a, const std::vector<uint16_t>&) {
             a->lse[1] = reinterpret_cast<const float*>(reinterpret_cast<const char*>(a->lse[1]) + 2);
         }},
        {"out aliases v[0]", [](fas_merge_states_args* a, const std::vector<uint16_t>&) { a->out = const_cast<void*>(a->v[0]); }},
        {"out_lse aliases lse[0]", [](fas_merge_states_args* a, const std::vector<uint16_t>&) {
             a->out_lse = const_cast<float*>(a->lse[0]);
         }},
        {"token_stride 4", [](fas_merge_states_args* a, const std::vector<uint16_t>&) { a->token_stride = 4; }},
        {"out rows on one another", [](fas_merge_states_args* a, const std::vector<uint16_t>&) { a->out_token_stride = 64; }},
        {"struct_size 0", [](fas_merge_states_args* a, const std::vector<uint16_t>&) { a->struct_size = 0; }},
    };
    std::string failures;
    for (const auto& c : cases) {
        fas_merge_states_args a = base();
        c.mutate(&a, host);
        const fas_status status = fas_merge_states(&a);
        const std::string message = fas_get_last_error();
        const cudaError_t pending = cudaGetLastError();
        if (status != FAS_ERROR_INVALID_ARGUMENT || message.empty() || pending != cudaSuccess) {
            failures += std::string(failures.empty() ? "" : "; ") + c.what + " -> status " + std::to_string(status);
        }
    }
    fas_merge_states_args a = base();
    a.num_tokens = 0;  // no work: success, nothing launched
    if (fas_merge_states(&a) != FAS_SUCCESS) failures += "; num_tokens 0 refused";
    if (fas_merge_states(nullptr) != FAS_ERROR_INVALID_ARGUMENT) failures += "; NULL args accepted";
    return {failures.empty(), failures.empty() ? std::to_string(std::size(cases)) + " bad arguments refused" : failures};
}

}  // namespace

void report_merge_cases(fas_dtype dtype, bool quick, cudaStream_t stream, Tally* tally) {
    const std::string dt = dtype_name(dtype);
    std::vector<RandomMerge> cases = {
        {"merge-two", 2, 37, 5, 128, false, true, 0},
        {"merge-one", 1, 9, 3, 64, false, true, 0},
        {"merge-head-major-padded", 3, 21, 4, 80, true, true, 8},
        {"merge-sixteen-no-lse", FAS_MERGE_MAX_STATES, 13, 2, 256, false, false, 16},
        {"merge-hd512", 2, 5, 3, 512, true, true, 0},
    };
    if (quick) cases.resize(3);
    uint64_t seed = 7001;
    for (const RandomMerge& c : cases) {
        const CaseOutcome outcome = guarded([&] { return run_random_merge(c, dtype, seed++, stream); });
        char label[160];
        std::snprintf(label, sizeof label, "%-26s %s states=%d tokens=%d heads=%d hd=%d %s", c.name.c_str(), dt.c_str(),
                      c.states, c.tokens, c.heads, c.head_dim, c.head_major ? "head-major" : "token-major");
        report(label, outcome, tally);
    }
    // The planner's choice where SM90 kernels are built (it may give the two parts different
    // families, and so different LSE layouts), then FA2 alone (disable_sm90).
    for (const char* family : {"sm90", "fa2"}) {
        for (bool causal : {true, false}) {
            if (!has_kernel(family, dtype, 128, causal) || !has_kernel(family, dtype, 128, false)) continue;
            const bool fa2 = std::strcmp(family, "fa2") == 0;
            const CaseOutcome outcome = guarded([&] { return run_cascade(dtype, causal, fa2, seed++, stream); });
            report(std::string("merge-cascade-") + (causal ? "causal " : "full   ") + "     " + dt + " hdim=128 8/2 " +
                       (fa2 ? "FA2 plans" : "the planner's plans") + " of a prefix and a suffix, merged",
                   outcome, tally);
        }
    }
    report("merge-misuse               " + dt, guarded([&] { return run_merge_misuse(dtype); }), tally);
}

}  // namespace gpu_test
