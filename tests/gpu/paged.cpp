// Plans over a paged KV cache: K/V scattered into pages of a cache in shuffled order (unused
// slots and pages poisoned with NaN, so a read outside a sequence's keys shows), run through a
// FAS_KV_PAGED plan and judged by the rule in reference.h against the contiguous reference.
// A second run uses a new page table (pages re-shuffled, cache rewritten) with the same plan:
// the header lets the page ids change between runs, and the output must not change at all.
#include "paged_case.h"
#include "reference.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>

namespace gpu_test {
namespace {

// The cache image [num_pages, page_size, heads_kv, head_dim] holding rows [total_k, heads_kv,
// head_dim] where the page table says; everything else NaN (16-bit or e4m3 bits).
template <typename Bits>
std::vector<Bits> scatter(const std::vector<Bits>& rows, const PagedCase& c, const std::vector<int32_t>& ids,
                          int num_pages) {
    const size_t row = static_cast<size_t>(c.heads_kv) * c.head_dim;
    const Bits poison = sizeof(Bits) == 1 ? static_cast<Bits>(kE4m3Nan) : static_cast<Bits>(kPoisonBits);
    std::vector<Bits> cache(static_cast<size_t>(num_pages) * c.page_size * row, poison);
    size_t first_row = 0, first_page = 0;
    for (size_t i = 0; i < c.seqlens_k.size(); ++i) {
        for (int t = 0; t < c.seqlens_k[i]; ++t) {
            const size_t page = ids[first_page + t / c.page_size];
            std::copy_n(rows.begin() + (first_row + t) * row, row,
                        cache.begin() + (page * c.page_size + t % c.page_size) * row);
        }
        first_row += c.seqlens_k[i];
        first_page += ceil_div(c.seqlens_k[i], c.page_size);
    }
    return cache;
}

CaseOutcome run_paged_case(const PagedCase& c, fas_dtype dtype, uint64_t seed, cudaStream_t stream) {
    const int batch = static_cast<int>(c.seqlens_q.size());
    const size_t total_q = std::accumulate(c.seqlens_q.begin(), c.seqlens_q.end(), size_t{0});
    const size_t total_k = std::accumulate(c.seqlens_k.begin(), c.seqlens_k.end(), size_t{0});
    int total_pages = 0;
    for (int length : c.seqlens_k) total_pages += ceil_div(length, c.page_size);
    const int num_pages = total_pages + 3;  // pages no sequence owns stay poisoned
    const size_t q_elements = total_q * c.heads_q * c.head_dim;
    const size_t cache_elements = static_cast<size_t>(num_pages) * c.page_size * c.heads_kv * c.head_dim;

    std::mt19937_64 rng(seed);
    RoundedTensor q;
    QuantizedTensor q8;
    if (c.fp8_q) {
        q8 = random_e4m3_tensor(total_q, c.heads_q, c.head_dim, rng);
        q.values.resize(q_elements);
        for (size_t i = 0; i < q_elements; ++i) q.values[i] = fp16_to_float(float_to_fp16(q8.values[i]));
    } else {
        q = random_tensor(dtype, q_elements, rng);
    }
    // 16-bit caches hold k and v rounded to dtype; e4m3 ones e4m3 values whose reference values
    // are stored value * descale of the head.
    const CacheTensors caches = random_caches(dtype, c.fp8_kv, total_k, c.heads_kv, c.head_dim, rng);
    const RoundedTensor &k = caches.k, &v = caches.v;
    const QuantizedTensor &k8 = caches.k8, &v8 = caches.v8;
    std::vector<float> sinks(c.sinks ? c.heads_q : 0);  // drawn after the tensors: other cases' values stay
    std::uniform_real_distribution<float> sink_logit(-2.f, 8.f);
    for (float& sink : sinks) sink = sink_logit(rng);
    const size_t kv_bytes = c.fp8_kv ? 1 : 2;
    DeviceBuffer q_dev(q_elements * (c.fp8_q ? 1 : 2)), k_dev(cache_elements * kv_bytes), v_dev(cache_elements * kv_bytes);
    DeviceBuffer out_dev(q_elements * 2), lse_dev(total_q * c.heads_q * sizeof(float));
    DeviceBuffer ids_dev(std::max(total_pages, 1) * sizeof(int32_t));
    DeviceBuffer descale_dev((2 * c.heads_kv + c.heads_q) * sizeof(float));  // k, v, q
    DeviceBuffer sinks_dev(c.heads_q * sizeof(float));
    if (c.sinks) upload(sinks_dev.as<void>(), sinks.data(), sinks_dev.bytes());
    if (c.fp8_q) {
        upload(q_dev.as<void>(), q8.bits.data(), q_dev.bytes());
        upload(descale_dev.as<float>() + 2 * c.heads_kv, q8.descale.data(), c.heads_q * sizeof(float));
    } else {
        upload(q_dev.as<void>(), q.bits.data(), q_dev.bytes());
    }
    if (c.fp8_kv) {
        upload(descale_dev.as<void>(), k8.descale.data(), c.heads_kv * sizeof(float));
        upload(descale_dev.as<float>() + c.heads_kv, v8.descale.data(), c.heads_kv * sizeof(float));
    }
    const auto load_cache = [&](const std::vector<int32_t>& ids) {
        if (c.fp8_kv) {
            upload(k_dev.as<void>(), scatter(k8.bits, c, ids, num_pages).data(), k_dev.bytes());
            upload(v_dev.as<void>(), scatter(v8.bits, c, ids, num_pages).data(), v_dev.bytes());
        } else {
            upload(k_dev.as<void>(), scatter(k.bits, c, ids, num_pages).data(), k_dev.bytes());
            upload(v_dev.as<void>(), scatter(v.bits, c, ids, num_pages).data(), v_dev.bytes());
        }
        upload(ids_dev.as<void>(), ids.data(), ids.size() * sizeof(int32_t));
    };
    std::vector<int32_t> ids = shuffled_pages(total_pages, num_pages, rng);
    load_cache(ids);

    std::vector<int32_t> cu_q{0}, kv_lengths(c.seqlens_k.begin(), c.seqlens_k.end());
    for (int length : c.seqlens_q) cu_q.push_back(cu_q.back() + length);
    fas_plan_args args = paged_plan_args(c.fp8_q ? FAS_DTYPE_E4M3 : dtype, cu_q.data(), kv_lengths.data(), batch,
                                         c.heads_q, c.heads_kv, c.head_dim, c.causal, c.page_size, num_pages, ids.data());
    args.out_dtype = dtype;
    args.use_window = c.window_left >= 0 || c.window_right > 0 ? 1 : 0;
    args.window_size_left = c.window_left;
    args.window_size_right = c.causal ? 0 : c.window_right;
    args.softcap = c.softcap;
    args.kv_dtype = c.fp8_kv && !c.fp8_q ? FAS_DTYPE_E4M3 : FAS_DTYPE_FP16;  // FP8 plans: 0 = e4m3 caches
    args.use_sinks = c.sinks ? 1 : 0;
    fas_plan* plan = nullptr;
    if (fas_plan_create(&args, &plan) != FAS_SUCCESS) {
        return {false, std::string("fas_plan_create failed: ") + fas_get_last_error()};
    }
    fas_plan_info info;
    std::memset(&info, 0, sizeof info);
    info.struct_size = sizeof info;
    CUDA_CHECK(fas_plan_get_info(plan, &info) == FAS_SUCCESS ? cudaSuccess : cudaErrorUnknown);
    const std::string plan_detail = std::string(" plan=") + info.family_name + "/hd" +
                                    std::to_string(info.kernel_head_dim) + " tile=" +
                                    std::to_string(info.query_tile_rows) + " splits=" + std::to_string(info.kv_splits) +
                                    " ctas=" + std::to_string(info.num_ctas) + " ctas/sm=" + std::to_string(info.ctas_per_sm) +
                                    " pages=" + std::to_string(info.total_pages) +
                                    (info.family == FAS_FAMILY_MIXED
                                         ? " decode_sequences=" + std::to_string(info.decode_sequences) +
                                               " prefill_family=" + std::to_string(info.prefill_family)
                                         : std::string());
    int queried_tile = 0;
    const int max_q = *std::max_element(c.seqlens_q.begin(), c.seqlens_q.end());
    const bool causal_kernel = c.causal || c.window_right > 0;  // right windows run on the causal kernels
    const fas_status queried =
        fas_query_paged_support(dtype, c.head_dim, causal_kernel ? 1 : 0, max_q, c.heads_q / c.heads_kv, &queried_tile);
    // Chunked prefill (more than 8 queries) takes the SM90 paged kernel where one is built: one
    // query head per tile row, no split; otherwise the paged family packs the group into rows.
    // Mixed plans: the decode part on the paged family (its packing), the prefill part as above.
    const bool mixed = c.expect_decode_sequences > 0;
    const char* sm90_paged = c.softcap > 0.f ? "sm90_paged_softcap" : "sm90_paged";
    const bool sm90 = c.expect_family >= 0 ? c.expect_family == FAS_FAMILY_SM90
                                           : max_q > 8 && !c.fp8_kv && has_kernel(sm90_paged, dtype, c.head_dim, causal_kernel);
    const int packed = sm90 && !mixed ? 1 : c.heads_q / c.heads_kv;
    const int family = mixed ? FAS_FAMILY_MIXED : sm90 ? FAS_FAMILY_SM90 : FAS_FAMILY_PAGED;
    if (info.family != family || info.total_pages != total_pages || info.packed_gqa != packed ||
        (mixed && (info.decode_sequences != c.expect_decode_sequences ||
                   info.prefill_family != (sm90 ? FAS_FAMILY_SM90 : FAS_FAMILY_PAGED))) ||
        (!mixed && (info.decode_sequences != 0 || info.prefill_family != 0)) ||
        // fas_query_paged_support answers for caches of q's type only, so not for e4m3 caches.
        (c.expect_split && info.kv_splits < 2) || info.lse_layout != FAS_LSE_TOKEN_MAJOR ||
        (!c.fp8_kv && queried != FAS_SUCCESS) ||
        (c.expect_ctas_per_sm != 0 && info.ctas_per_sm != c.expect_ctas_per_sm) || info.ctas_per_sm < 1 ||
        // The query assumes a layout the SM90 paged kernels take; expect_family cases break that.
        (c.fp8_kv && info.query_tile_rows != 16) ||
        (c.expect_tile_rows > 0 && info.query_tile_rows != c.expect_tile_rows) ||
        (c.expect_family < 0 && !mixed && !c.fp8_kv && queried_tile != info.query_tile_rows)) {
        fas_plan_destroy(plan);
        return {false, "unexpected plan info (or fas_query_paged_support: status " + std::to_string(queried) +
                           ", tile " + std::to_string(queried_tile) + "):" + plan_detail};
    }

    fas_plan_run_args run =
        plan_run_args(q_dev.as<void>(), k_dev.as<void>(), v_dev.as<void>(), out_dev.as<void>(), stream);
    run.softmax_lse = lse_dev.as<float>();
    run.page_indices = ids_dev.as<int32_t>();
    run.sinks = c.sinks ? sinks_dev.as<float>() : nullptr;
    if (c.fp8_kv) {
        run.k_descale = descale_dev.as<float>();
        run.v_descale = descale_dev.as<float>() + c.heads_kv;
        if (c.fp8_q) run.q_descale = descale_dev.as<float>() + 2 * c.heads_kv;
    }
    std::vector<uint16_t> outs[2];
    std::vector<float> lses[2];
    for (int pass = 0; pass < 2; ++pass) {
        if (pass == 1) load_cache(ids = shuffled_pages(total_pages, num_pages, rng));  // a new step's page table
        fill(out_dev.as<void>(), 0xFF, out_dev.bytes());
        fill(lse_dev.as<void>(), 0xFF, lse_dev.bytes());
        if (fas_plan_run(plan, &run) != FAS_SUCCESS) {
            const std::string message = fas_get_last_error();
            fas_plan_destroy(plan);
            return {false, "fas_plan_run failed: " + message + plan_detail};
        }
        CUDA_CHECK(cudaStreamSynchronize(stream));
        outs[pass].resize(q_elements);
        lses[pass].resize(total_q * c.heads_q);
        CUDA_CHECK(cudaMemcpy(outs[pass].data(), out_dev.as<void>(), out_dev.bytes(), cudaMemcpyDeviceToHost));
        CUDA_CHECK(cudaMemcpy(lses[pass].data(), lse_dev.as<void>(), lse_dev.bytes(), cudaMemcpyDeviceToHost));
    }
    if (fas_plan_destroy(plan) != FAS_SUCCESS) return {false, std::string("fas_plan_destroy: ") + fas_get_last_error()};
    const bool same_runs = outs[0] == outs[1] && std::memcmp(lses[0].data(), lses[1].data(), lse_dev.bytes()) == 0;

    AttentionCase ref_case{c.name, dtype, c.heads_q, c.heads_kv, c.head_dim, c.causal, true, c.seqlens_q, c.seqlens_k};
    ref_case.use_window = c.window_left >= 0 || c.window_right > 0;
    ref_case.window_left = c.window_left;
    ref_case.window_right = c.causal ? 0 : c.window_right;
    ref_case.softcap = c.softcap;
    ref_case.sinks = sinks;
    const Reference ref = compute_reference(ref_case, q.values, k.values, v.values, 1.f / std::sqrt(float(c.head_dim)));
    OutputView view{outs[0].data(), static_cast<size_t>(c.heads_q) * c.head_dim};
    view.lse = lses[0].data();
    view.lse_layout = LseLayout::kTokenMajor;
    view.lse_rows = total_q;
    const Comparison result = compare_with_reference(ref_case, ref, view);
    char numbers[200];
    std::snprintf(numbers, sizeof numbers, "out_err=%.3e (tol %.3e) lse_err=%.3e (tol %.3e)", result.max_out_error,
                  result.out_limit, result.max_lse_error, result.lse_limit);
    std::string detail = numbers + plan_detail;
    if (!same_runs) detail += " the run with a re-shuffled page table differs from the first";
    if (result.non_finite_out) detail += " non-finite outputs=" + std::to_string(result.non_finite_out);
    if (result.lse_mismatches) detail += " unexpected LSE=" + std::to_string(result.lse_mismatches);
    return {result.passed && same_runs, detail};
}

std::string describe(const PagedCase& c, fas_dtype dtype) {
    char text[200];
    const std::string masks = (c.window_left >= 0 ? " window=" + std::to_string(c.window_left) : std::string()) +
                              (c.window_right > 0 ? " right=" + std::to_string(c.window_right) : std::string()) +
                              (c.softcap > 0.f ? " softcap=" + std::to_string(static_cast<int>(c.softcap)) : std::string()) +
                              (c.sinks ? " sinks" : "");
    std::snprintf(text, sizeof text, "%-26s %s%s hdim=%d %d/%d %s%s page=%d b=%zu q=%d..%d k=%d..%d", c.name.c_str(),
                  c.fp8_q ? (std::string("e4m3->") + dtype_name(dtype)).c_str() : dtype_name(dtype),
                  c.fp8_kv ? " kv=e4m3" : "", c.head_dim, c.heads_q, c.heads_kv, c.causal ? "causal" : "full", masks.c_str(),
                  c.page_size,
                  c.seqlens_q.size(), *std::min_element(c.seqlens_q.begin(), c.seqlens_q.end()),
                  *std::max_element(c.seqlens_q.begin(), c.seqlens_q.end()),
                  *std::min_element(c.seqlens_k.begin(), c.seqlens_k.end()),
                  *std::max_element(c.seqlens_k.begin(), c.seqlens_k.end()));
    return text;
}

}  // namespace

void report_paged_cases(fas_dtype dtype, bool quick, cudaStream_t stream, Tally* tally) {
    std::vector<PagedCase> cases;
    const bool on_stream_card = stream_card();
    for (int head_dim : {64, 128, 256}) {
        if (!has_kernel("paged", dtype, head_dim, true)) continue;
        // Decode: one query per sequence against 0, 1, 7 and 4097 keys, GQA 8 (Qwen2.5-VL: 16/2).
        cases.push_back({"paged-decode", 16, 2, head_dim, true, 16, {1, 1, 1, 1}, {0, 1, 7, 4097}});
        // Page size 1 and 256, shuffled pages; GQA 1, 7 and 16.
        cases.push_back({"paged-decode-page1", 8, 8, head_dim, true, 1, {1, 1, 1}, {300, 1, 77}});
        cases.push_back({"paged-decode-gqa7", 14, 2, head_dim, true, 256, {1, 1, 1}, {4097, 513, 9}});
        cases.push_back({"paged-decode-gqa16", 16, 1, head_dim, true, 16, {1, 1}, {1000, 31}});
        // One long sequence: the KV split across CTAs and merged.
        cases.push_back({"paged-decode-split", 16, 2, head_dim, true, 16, {1}, {quick ? 20000 : 65536}, true});
        // A split plan over sequences of mixed lengths (chunks of some, whole short ones).
        cases.push_back({"paged-decode-split-mixed", 16, 2, head_dim, true, 16, {1, 1, 1, 1, 1, 1},
                         {3000, 10, 5000, 64, 2047, 9000}, true});
        // Speculative decoding: 2..8 queries per sequence, causal (bottom-right), the 16-row tile
        // (2 x 8) and the 64-row tile (8 x 8), with a split.
        cases.push_back({"paged-spec", 16, 2, head_dim, true, 16, {2, 8, 5, 1}, {40, 4097, 6, 9}});
        cases.push_back({"paged-spec-split", 16, 2, head_dim, true, 64, {8}, {30000}, true});
        // 17-32 rows (4 queries x GQA 8, 2 x GQA 16): the decode kernel's 32-row tiles up to head
        // dim 128 on every card (two 16-row blocks; sequences with fewer rows leave the second
        // idle, one without keys writes zeros), a split; pages of 4 take no TMA boxes of 8 rows,
        // so the 64-row tile, as head dim 256.
        const bool pairs = head_dim <= 128;
        const int pair_rows = pairs ? 32 : 64;
        const auto pair_case = [&](PagedCase c, int tile_rows) {
            c.expect_tile_rows = tile_rows;
            cases.push_back(c);
        };
        pair_case({"paged-spec-pair", 16, 2, head_dim, true, 16, {4, 3, 1, 2, 4}, {40, 4097, 6, 9, 0}}, pair_rows);
        pair_case({"paged-spec-pair-gqa16", 16, 1, head_dim, true, 32, {2, 2, 1}, {1000, 31, 5}}, pair_rows);
        pair_case({"paged-spec-pair-split", 16, 2, head_dim, true, 16, {4}, {quick ? 20000 : 65536}, true}, pair_rows);
        pair_case({"paged-spec-pair-page4", 16, 2, head_dim, true, 4, {4, 1}, {300, 77}, false, 0, FAS_FAMILY_PAGED}, 64);
        if (pairs) {  // windows and softcaps: the decode kernel only
            pair_case({"paged-spec-pair-window-softcap", 14, 2, head_dim, true, 32, {4, 2, 3}, {5000, 40, 300}, false, 0,
                       FAS_FAMILY_PAGED, 64, 30.f},
                      32);
        }
        // More work items than a stream card's CTAs, unsplit: each persistent CTA takes rounds of
        // items, the last round partial; mixed lengths with one empty, a window, 32-row tiles
        // (the other cards: their own shapes).
        const auto lengths = [](int n, int most) {  // one sequence without keys
            std::vector<int> k = spread_lengths(n, most);
            k[5] = 0;
            return k;
        };
        cases.push_back({"paged-decode-rounds", 16, 2, head_dim, true, 16, std::vector<int>(131, 1), lengths(131, 5000)});
        cases.push_back({"paged-decode-rounds-window", 16, 2, head_dim, true, 16, std::vector<int>(67, 1),
                         lengths(67, 6000), false, 0, FAS_FAMILY_PAGED, 300});
        if (pairs) {
            pair_case({"paged-spec-pair-rounds", 16, 2, head_dim, true, 16, std::vector<int>(67, 4), lengths(67, 3000)}, 32);
        }
        // Chunked prefill (queries fewer than keys, bottom-right causal): the SM90 paged kernel
        // where built. A sequence without queries, one whose queries end a page, pages of 48.
        cases.push_back({"paged-chunked-small", 8, 2, head_dim, true, 48, {20, 0, 37}, {100, 64, 37}});
        // Queries without keys: the SM90 kernels refuse the layout, the paged family serves it
        // (3 queries x GQA 8 exceed the decode kernel's 16 rows, so the batch is not mixed).
        cases.push_back({"paged-chunked-no-keys", 16, 2, head_dim, true, 16, {12, 3}, {40, 0}, false, 0,
                         FAS_FAMILY_PAGED});
        // Mixed batches (MIXED PLANS): decodes first, chunked prefill over cached pages after; the
        // reverse order with a keyless decode and one without queries; speculative decodes; a
        // decode part whose KV splits; decodes between prefills stay in the prefill part.
        cases.push_back({"paged-mixed-decode-first", 16, 2, head_dim, true, 16, {1, 1, 1, 1, 1, 40, 97},
                         {1, 700, 3000, 64, 9, 300, 1200}, false, 0, -1, -1, 0.f, 5});
        cases.push_back({"paged-mixed-prefill-first", 8, 2, head_dim, true, 32, {130, 1, 1, 0, 4},
                         {500, 0, 77, 20, 2000}, false, 0, -1, -1, 0.f, 4});
        cases.push_back({"paged-mixed-spec", 8, 4, head_dim, true, 16, {4, 2, 8, 1, 60}, {40, 4097, 8, 9, 60}, false,
                         0, -1, -1, 0.f, 4});
        cases.push_back({"paged-mixed-split", 16, 2, head_dim, true, 16, {1, 1, 300}, {quick ? 20000 : 65536, 17, 900},
                         true, 0, -1, -1, 0.f, 2});
        cases.push_back({"paged-mixed-interleaved", 16, 2, head_dim, true, 64, {1, 1, 33, 1, 20, 1},
                         {100, 5000, 400, 50, 20, 7}, false, 0, -1, -1, 0.f, 2});
        // Windows (0, 1, 64, 4096 keys left of the diagonal) and softcaps (30, 50) on the decode
        // kernel (queries x group <= 16 rows): KVs shorter and longer than the window, speculative
        // queries (each row its own first key), a split whose chunks cover only the window, and
        // the long shape.
        for (int left : {0, 1, 64, 4096}) {
            cases.push_back({"paged-decode-window", 16, 2, head_dim, true, 16, {1, 1, 1, 1}, {0, 1, 100, 5000}, false,
                             0, FAS_FAMILY_PAGED, left});
        }
        cases.push_back({"paged-spec-window", 8, 4, head_dim, true, 16, {2, 8, 5, 1}, {40, 4097, 6, 9}, false, 0,
                         FAS_FAMILY_PAGED, 64});
        cases.push_back({"paged-decode-window-split", 16, 2, head_dim, true, 16, {1, 1}, {quick ? 20000 : 65536, 3000},
                         true, 0, FAS_FAMILY_PAGED, 4096});
        cases.push_back({"paged-decode-softcap", 16, 2, head_dim, true, 16, {1, 1, 1, 1}, {0, 1, 7, 4097}, false, 0,
                         FAS_FAMILY_PAGED, -1, 50.f});
        cases.push_back({"paged-spec-softcap-window-split", 14, 2, head_dim, true, 32, {2, 1}, {30000, 700}, true, 0,
                         FAS_FAMILY_PAGED, 1000, 30.f});
        // Sinks (gpt-oss: GQA 64/8, 128-key windows alternating with full layers) on the decode
        // kernel: empty and long KVs, a split (the sink counted once, in the first chunk), a
        // window, 32-row tiles; chunked prefill and a mixed batch on the SM90 paged kernel.
        std::vector<PagedCase> with_sinks = {
            {"paged-decode-sinks", 64, 8, head_dim, true, 16, {1, 1, 1, 1}, {0, 1, 7, 4097}},
            {"paged-decode-sinks-split", 64, 8, head_dim, true, 16, {1, 1}, {quick ? 20000 : 65536, 300}, true},
            {"paged-decode-sinks-window", 64, 8, head_dim, true, 16, {1, 1, 1}, {100, 5000, 128}, false, 0,
             FAS_FAMILY_PAGED, 128},
            // 136 items: a last round of 4 on a stream card's 132 CTAs.
            {"paged-decode-sinks-rounds", 64, 8, head_dim, true, 16, std::vector<int>(17, 1),
             std::vector<int>(17, 3000)}};
        if (pairs) with_sinks.push_back({"paged-spec-pair-sinks", 16, 2, head_dim, true, 16, {4, 3, 1}, {40, 4097, 6}});
        if (has_kernel("sm90_paged", dtype, head_dim, true)) {
            with_sinks.push_back({"paged-chunked-sinks", 64, 8, head_dim, true, 16, {20, 37}, {100, 37}});
            // gpt-oss's windowed layers in chunked prefill: 128-key windows with sinks.
            with_sinks.push_back({"paged-chunked-sinks-window", 64, 8, head_dim, true, 16, {40, 300}, {1000, 300},
                                  false, 0, -1, 128});
            with_sinks.push_back({"paged-mixed-sinks", 64, 8, head_dim, true, 16, {1, 1, 1, 40}, {700, 3000, 64, 300},
                                  false, 0, -1, -1, 0.f, 3});
        }
        for (PagedCase& c : with_sinks) {
            c.sinks = true;
            cases.push_back(c);
        }
        // Left windows on the SM90 paged kernel (chunked prefill): each query tile's keys start at
        // the page holding its first row's first key, so pages of 1 start exactly, pages of 16 and
        // 256 up to a page early (masked); a window of 0 sees the diagonal key only.
        if (has_kernel("sm90_paged", dtype, head_dim, true)) {
            cases.push_back({"paged-chunked-window", 16, 2, head_dim, true, 16, {200, 100, 37}, {1500, 100, 700},
                             false, 0, -1, 200});
            cases.push_back({"paged-chunked-window-page1", 14, 2, head_dim, true, 1, {130, 9}, {300, 4097}, false, 0,
                             -1, 50});
            cases.push_back({"paged-chunked-window-page256", 8, 8, head_dim, true, 256, {300, 17}, {4097, 700}, false,
                             0, -1, 300});
            cases.push_back({"paged-chunked-window-0", 16, 2, head_dim, true, 16, {100, 20}, {600, 20}, false, 0, -1,
                             0});
            // Right windows (the causal kernel's diagonal moved right): 100 keys with a left window
            // of 64, and 20 alone over pages of 1 (sequences with fewer keys than queries + right).
            PagedCase right{"paged-chunked-window-right", 16, 2, head_dim, false, 16, {200, 100, 37}, {1500, 100, 700},
                            false, 0, -1, 64};
            right.window_right = 100;
            cases.push_back(right);
            PagedCase right_only{"paged-chunked-right-only", 14, 2, head_dim, false, 1, {130, 40}, {300, 30}, false, 0,
                                 -1, -1};
            right_only.window_right = 20;
            cases.push_back(right_only);
            // A mixed batch under one window: the decode part on the paged family, the prefill on SM90.
            cases.push_back({"paged-mixed-window", 16, 2, head_dim, true, 16, {1, 1, 40, 100}, {700, 3000, 300, 600},
                             false, 0, -1, 128, 0.f, 2});
        }
        // Gemma 2's chunked prefill (softcap 50; a 4096-key window on every other layer, here 300)
        // on the SM90 paged softcap kernel; mixed with decodes, which the decode kernel caps.
        if (has_kernel("sm90_paged_softcap", dtype, head_dim, true)) {
            cases.push_back({"paged-chunked-softcap", 16, 8, head_dim, true, 16, {200, 100, 37}, {1500, 100, 700},
                             false, 0, -1, -1, 50.f});
            cases.push_back({"paged-chunked-softcap-window", 16, 8, head_dim, true, 16, {300, 17}, {4097, 700}, false,
                             0, -1, 300, 50.f});
            cases.push_back({"paged-mixed-softcap", 16, 8, head_dim, true, 16, {1, 1, 40, 100}, {700, 3000, 300, 600},
                             false, 0, -1, -1, 50.f, 2});
        }
        if (!quick && head_dim == 128) {
            cases.push_back({"paged-decode-long-window", 16, 2, head_dim, true, 16, std::vector<int>(40, 1),
                             std::vector<int>(40, 6000), false, 0, FAS_FAMILY_PAGED, 3000, 30.f});
        }
        if (!quick) {
            cases.push_back({"paged-spec-gqa7", 7, 1, head_dim, true, 32, {3, 8, 1}, {100, 2000, 8}});
            // Chunked prefill over cached pages (queries fewer than keys), causal and not.
            cases.push_back({"paged-chunked-prefill", 16, 2, head_dim, true, 16, {512, 100}, {4096, 100}});
            cases.push_back({"paged-chunked-page1-gqa7", 14, 2, head_dim, true, 1, {130, 9, 300}, {300, 9, 4097}});
            cases.push_back({"paged-chunked-page256-gqa1", 8, 8, head_dim, true, 256, {1000, 17}, {4097, 700}});
            cases.push_back({"paged-prefill-full", 8, 2, head_dim, false, 128, {300, 7}, {700, 7}});
            // Many short CTAs: the short shape (2 CTAs per SM); on a stream card (one persistent
            // CTA per SM) where pages hold a multiple of 8 rows (see the loop at the end).
            cases.push_back({"paged-decode-many", 16, 2, head_dim, true, 16, std::vector<int>(300, 1),
                             std::vector<int>(300, 1500), false, 2});
            cases.push_back({"paged-decode-many-page4", 16, 2, head_dim, true, 4, std::vector<int>(300, 1),
                             std::vector<int>(300, 1500), false, 2});
            // One prefill chunk and 255 decodes (the shape, shorter for the CPU reference).
            std::vector<int> one_prefill_q(255, 1), one_prefill_k(255);
            for (int i = 0; i < 255; ++i) one_prefill_k[i] = 1 + (i * 37) % 1500;
            one_prefill_q.insert(one_prefill_q.begin(), 256);
            one_prefill_k.insert(one_prefill_k.begin(), 1024);
            cases.push_back({"paged-mixed-1p-255d", 16, 2, head_dim, true, 16, one_prefill_q, one_prefill_k, false, 0,
                             -1, -1, 0.f, 255});
            if (head_dim == 128) {  // CTAs of 2048+ keys: the decode kernel's long shape (paged.h)
                cases.push_back({"paged-decode-long", 16, 2, head_dim, true, 16, std::vector<int>(40, 1),
                                 std::vector<int>(40, 4100), false, 1});
                cases.push_back({"paged-decode-long-page4", 16, 2, head_dim, true, 4, std::vector<int>(40, 1),
                                 std::vector<int>(40, 4100), false, 1});
                cases.push_back({"paged-decode-long-split", 16, 2, head_dim, true, 64, {1, 1}, {70000, 65000}, true, 1});
            }
        }
    }
    const std::vector<PagedCase> fp8 = fp8_kv_cases(dtype, quick);  // paged_fp8_cases.cpp
    cases.insert(cases.end(), fp8.begin(), fp8.end());
    // On a stream card every decode plan whose pages hold a multiple of 8 rows takes a stream shape
    // (1 CTA per SM), and on every card e4m3 plans of head dim 128 and 256 do; smaller pages: as above.
    for (PagedCase& c : cases) {
        const bool streams = on_stream_card || (c.fp8_kv && c.head_dim >= 128);
        if (c.expect_ctas_per_sm != 0 && c.page_size % 8 == 0 && streams) {
            c.expect_ctas_per_sm = 1;
        }
    }
    uint64_t seed = 7000 + static_cast<uint64_t>(dtype);
    for (const PagedCase& c : cases) {
        report(describe(c, dtype), guarded([&] { return run_paged_case(c, dtype, seed++, stream); }), tally);
    }
    report_device_length_cases(dtype, quick, stream, tally);
    // The misuse plan is head dim 128.
    if (std::none_of(cases.begin(), cases.end(), [](const PagedCase& c) { return c.head_dim == 128; })) return;
    report_paged_misuse_cases(dtype, stream, tally);
}

}  // namespace gpu_test
