// fas_kv_append: new K/V rows written into paged caches through a slot mapping, then read.
//   * append-then-attend: the keys of a batch written in two steps (a prefill step with padded
//     tokens of slot -1, then the last tokens of every sequence in reverse order, pages in
//     shuffled order), the caches read back (every written slot holds its row bit for bit, every
//     other slot still the poison), then a paged plan over them judged by reference.h's rule;
//   * an e4m3 cache: every slot holds e4m3(value / scale[head]) as the host rounds it;
//   * slots beyond the caches without a host copy: skipped, counted in invalid_slots, and the
//     bytes after the caches untouched;
//   * misuse: refused with FAS_ERROR_INVALID_ARGUMENT, a message, no CUDA error left pending.
#include "reference.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>

namespace gpu_test {
namespace {

struct AppendCase {
    std::string name;
    int heads_q, heads_kv, head_dim, page_size;
    std::vector<int> seqlens_q, seqlens_k;
    int tail;  // keys per sequence written in the second step
};

// A cache and the fas_kv_append arguments that write into it; rows of new tokens given per call.
struct Caches {
    int num_pages, page_size, heads, head_dim;
    size_t elements() const { return static_cast<size_t>(num_pages) * page_size * heads * head_dim; }
};

fas_kv_append_args append_args(fas_dtype dtype, fas_dtype cache_dtype, const Caches& caches, void* k_cache,
                               void* v_cache, cudaStream_t stream) {
    fas_kv_append_args args;
    fas_kv_append_args_init(&args);
    args.dtype = dtype;
    args.cache_dtype = cache_dtype;
    args.num_heads_k = caches.heads;
    args.head_dim = caches.head_dim;
    args.k_cache = k_cache;
    args.v_cache = v_cache;
    args.num_pages = caches.num_pages;
    args.page_size = caches.page_size;
    args.stream = stream;
    return args;
}

// Appends rows [tokens] of k/v (host bits, row-major [*, heads, head_dim]) to the given slots.
fas_status append_rows(fas_kv_append_args args, const std::vector<uint16_t>& k, const std::vector<uint16_t>& v,
                       const std::vector<int64_t>& slots) {
    const size_t row = static_cast<size_t>(args.num_heads_k) * args.head_dim;
    DeviceBuffer k_dev(std::max<size_t>(1, k.size()) * 2), v_dev(std::max<size_t>(1, v.size()) * 2);
    DeviceBuffer slots_dev(std::max<size_t>(1, slots.size()) * sizeof(int64_t));
    upload(k_dev.as<void>(), k.data(), k.size() * 2);
    upload(v_dev.as<void>(), v.data(), v.size() * 2);
    upload(slots_dev.as<void>(), slots.data(), slots.size() * sizeof(int64_t));
    args.num_tokens = static_cast<int>(k.size() / row);
    args.k_new = k_dev.as<void>();
    args.v_new = v_dev.as<void>();
    args.slot_mapping = slots_dev.as<int64_t>();
    args.slot_mapping_host = slots.data();
    const fas_status status = fas_kv_append(&args);
    CUDA_CHECK(cudaStreamSynchronize(args.stream));  // the buffers die with this scope
    return status;
}

CaseOutcome run_append_attend(const AppendCase& c, fas_dtype dtype, uint64_t seed, cudaStream_t stream) {
    const size_t row = static_cast<size_t>(c.heads_kv) * c.head_dim;
    const size_t total_q = std::accumulate(c.seqlens_q.begin(), c.seqlens_q.end(), size_t{0});
    const size_t total_k = std::accumulate(c.seqlens_k.begin(), c.seqlens_k.end(), size_t{0});
    std::vector<int32_t> pages_of(c.seqlens_k.size()), first_page{0};
    for (size_t i = 0; i < c.seqlens_k.size(); ++i) {
        pages_of[i] = (c.seqlens_k[i] + c.page_size - 1) / c.page_size;
        first_page.push_back(first_page.back() + pages_of[i]);
    }
    const Caches caches{first_page.back() + 2, c.page_size, c.heads_kv, c.head_dim};  // 2 pages nobody owns
    std::mt19937_64 rng(seed);
    const RoundedTensor q = random_tensor(dtype, total_q * c.heads_q * c.head_dim, rng);
    const RoundedTensor k = random_tensor(dtype, total_k * row, rng);
    const RoundedTensor v = random_tensor(dtype, total_k * row, rng);
    std::vector<int32_t> ids(caches.num_pages);
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);
    ids.resize(first_page.back());
    // Key t of sequence i lives at slot ids[first page + t / page_size] * page_size + t % page_size.
    std::vector<int64_t> slot_of(total_k);
    for (size_t i = 0, key = 0; i < c.seqlens_k.size(); ++i) {
        for (int t = 0; t < c.seqlens_k[i]; ++t, ++key) {
            slot_of[key] = static_cast<int64_t>(ids[first_page[i] + t / c.page_size]) * c.page_size + t % c.page_size;
        }
    }
    DeviceBuffer k_cache(caches.elements() * 2), v_cache(caches.elements() * 2);
    fill(k_cache.as<void>(), 0xFF, k_cache.bytes());
    fill(v_cache.as<void>(), 0xFF, v_cache.bytes());
    const fas_kv_append_args args = append_args(dtype, dtype, caches, k_cache.as<void>(), v_cache.as<void>(), stream);
    // Step 1: every key but each sequence's last `tail`, with a padded token (slot -1, rows of
    // NaN) after every 5th; step 2: the tails, last sequence first.
    std::vector<uint16_t> k1, v1, k2, v2;
    std::vector<int64_t> slots1, slots2;
    std::vector<uint16_t> pad(row, kPoisonBits);
    for (size_t i = 0, key = 0; i < c.seqlens_k.size(); ++i) {
        for (int t = 0; t < c.seqlens_k[i]; ++t, ++key) {
            const bool tail = t >= c.seqlens_k[i] - c.tail;
            auto& kk = tail ? k2 : k1;
            auto& vv = tail ? v2 : v1;
            auto& ss = tail ? slots2 : slots1;
            kk.insert(kk.end(), k.bits.begin() + key * row, k.bits.begin() + (key + 1) * row);
            vv.insert(vv.end(), v.bits.begin() + key * row, v.bits.begin() + (key + 1) * row);
            ss.push_back(slot_of[key]);
            if (!tail && key % 5 == 4) {
                k1.insert(k1.end(), pad.begin(), pad.end());
                v1.insert(v1.end(), pad.begin(), pad.end());
                slots1.push_back(-1);
            }
        }
    }
    const auto reversed_rows = [&](std::vector<uint16_t>& rows) {
        std::vector<uint16_t> out(rows.size());
        const size_t n = rows.size() / row;
        for (size_t r = 0; r < n; ++r) std::copy_n(rows.begin() + r * row, row, out.begin() + (n - 1 - r) * row);
        rows.swap(out);
    };
    reversed_rows(k2);
    reversed_rows(v2);
    std::reverse(slots2.begin(), slots2.end());
    for (const auto* step : {&k1, &k2}) {
        const bool first = step == &k1;
        const fas_status status = append_rows(args, *step, first ? v1 : v2, first ? slots1 : slots2);
        if (status != FAS_SUCCESS) return {false, std::string("fas_kv_append failed: ") + fas_get_last_error()};
    }
    // The caches read back: written slots hold their rows, the rest the poison.
    std::vector<uint16_t> k_back(caches.elements()), v_back(caches.elements());
    CUDA_CHECK(cudaMemcpy(k_back.data(), k_cache.as<void>(), k_cache.bytes(), cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(v_back.data(), v_cache.as<void>(), v_cache.bytes(), cudaMemcpyDeviceToHost));
    std::vector<uint16_t> k_want(caches.elements(), kPoisonBits), v_want(caches.elements(), kPoisonBits);
    for (size_t key = 0; key < total_k; ++key) {
        std::copy_n(k.bits.begin() + key * row, row, k_want.begin() + slot_of[key] * row);
        std::copy_n(v.bits.begin() + key * row, row, v_want.begin() + slot_of[key] * row);
    }
    if (k_back != k_want || v_back != v_want) return {false, "the caches differ from the rows written to their slots"};

    // A paged plan over the caches.
    std::vector<int32_t> cu_q{0};
    for (int length : c.seqlens_q) cu_q.push_back(cu_q.back() + length);
    const std::vector<int32_t> kv_lengths(c.seqlens_k.begin(), c.seqlens_k.end());
    const fas_plan_args plan_args =
        paged_plan_args(dtype, cu_q.data(), kv_lengths.data(), static_cast<int>(c.seqlens_q.size()), c.heads_q,
                        c.heads_kv, c.head_dim, true, c.page_size, caches.num_pages, ids.data());
    fas_plan* plan = nullptr;
    if (fas_plan_create(&plan_args, &plan) != FAS_SUCCESS) {
        return {false, std::string("fas_plan_create failed: ") + fas_get_last_error()};
    }
    DeviceBuffer q_dev(q.bits.size() * 2), out_dev(q.bits.size() * 2), ids_dev(ids.size() * sizeof(int32_t));
    upload(q_dev.as<void>(), q.bits.data(), q_dev.bytes());
    upload(ids_dev.as<void>(), ids.data(), ids_dev.bytes());
    fill(out_dev.as<void>(), 0xFF, out_dev.bytes());
    fas_plan_run_args run =
        plan_run_args(q_dev.as<void>(), k_cache.as<void>(), v_cache.as<void>(), out_dev.as<void>(), stream);
    run.page_indices = ids_dev.as<int32_t>();
    const fas_status run_status = fas_plan_run(plan, &run);
    const std::string run_message = run_status == FAS_SUCCESS ? "" : fas_get_last_error();
    CUDA_CHECK(cudaStreamSynchronize(stream));
    fas_plan_destroy(plan);
    if (run_status != FAS_SUCCESS) return {false, "fas_plan_run failed: " + run_message};
    std::vector<uint16_t> out(q.bits.size());
    CUDA_CHECK(cudaMemcpy(out.data(), out_dev.as<void>(), out_dev.bytes(), cudaMemcpyDeviceToHost));
    const AttentionCase ref_case{c.name, dtype, c.heads_q, c.heads_kv, c.head_dim, true, true, c.seqlens_q, c.seqlens_k};
    const Reference ref = compute_reference(ref_case, q.values, k.values, v.values, 1.f / std::sqrt(float(c.head_dim)));
    const Comparison result =
        compare_with_reference(ref_case, ref, OutputView{out.data(), static_cast<size_t>(c.heads_q) * c.head_dim});
    char numbers[160];
    std::snprintf(numbers, sizeof numbers, "caches bit-exact; out_err=%.3e (tol %.3e), %zu + %zu rows appended",
                  result.max_out_error, result.out_limit, slots1.size(), slots2.size());
    return {result.passed, numbers};
}

// An e4m3 cache: 300 tokens, 4 heads of 128, per-head scales, pages of 16 in reverse order.
CaseOutcome run_append_e4m3(fas_dtype dtype, uint64_t seed, cudaStream_t stream) {
    const Caches caches{24, 16, 4, 128};
    const size_t row = static_cast<size_t>(caches.heads) * caches.head_dim;
    const int tokens = 300;
    std::mt19937_64 rng(seed);
    const RoundedTensor k = random_tensor(dtype, tokens * row, rng);
    const RoundedTensor v = random_tensor(dtype, tokens * row, rng);
    const float k_scale[4] = {0.01f, 0.02f, 0.003f, 1.f}, v_scale[4] = {0.05f, 0.004f, 0.01f, 0.5f};
    std::vector<int64_t> slots(tokens);
    for (int t = 0; t < tokens; ++t) slots[t] = t % 7 == 3 ? -1 : (caches.num_pages - 1 - t / 16) * 16 + t % 16;
    DeviceBuffer k_cache(caches.elements()), v_cache(caches.elements()), scales(8 * sizeof(float));
    fill(k_cache.as<void>(), kE4m3Nan, k_cache.bytes());
    fill(v_cache.as<void>(), kE4m3Nan, v_cache.bytes());
    upload(scales.as<void>(), k_scale, sizeof k_scale);
    upload(scales.as<float>() + 4, v_scale, sizeof v_scale);
    fas_kv_append_args args = append_args(dtype, FAS_DTYPE_E4M3, caches, k_cache.as<void>(), v_cache.as<void>(), stream);
    args.k_scale = scales.as<float>();
    args.v_scale = scales.as<float>() + 4;
    if (append_rows(args, k.bits, v.bits, slots) != FAS_SUCCESS) {
        return {false, std::string("fas_kv_append failed: ") + fas_get_last_error()};
    }
    std::vector<uint8_t> k_back(caches.elements()), v_back(caches.elements());
    CUDA_CHECK(cudaMemcpy(k_back.data(), k_cache.as<void>(), k_back.size(), cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(v_back.data(), v_cache.as<void>(), v_back.size(), cudaMemcpyDeviceToHost));
    std::vector<uint8_t> k_want(caches.elements(), kE4m3Nan), v_want(caches.elements(), kE4m3Nan);
    size_t saturated = 0;
    for (int t = 0; t < tokens; ++t) {
        if (slots[t] < 0) continue;
        for (size_t e = 0; e < row; ++e) {
            const size_t head = e / caches.head_dim;
            k_want[slots[t] * row + e] = float_to_e4m3(k.values[t * row + e] / k_scale[head]);
            v_want[slots[t] * row + e] = float_to_e4m3(v.values[t * row + e] / v_scale[head]);
            saturated += std::fabs(k.values[t * row + e] / k_scale[head]) > kE4m3Max;
        }
    }
    const bool same = k_back == k_want && v_back == v_want;
    return {same, same ? "e4m3 caches equal the host's rounding (" + std::to_string(saturated) + " keys saturated)"
                       : std::string("the e4m3 caches differ from e4m3(value / scale)")};
}

// Slots beyond the caches with no host copy: skipped, counted, nothing written past the caches.
CaseOutcome run_append_invalid_slots(fas_dtype dtype, uint64_t seed, cudaStream_t stream) {
    const Caches caches{4, 8, 2, 64};
    const size_t row = static_cast<size_t>(caches.heads) * caches.head_dim;
    const size_t guard = 4096;  // elements after each cache
    std::mt19937_64 rng(seed);
    const RoundedTensor k = random_tensor(dtype, 6 * row, rng);
    const std::vector<int64_t> slots{0, 32, 31, 1000000, -5, 33};
    DeviceBuffer k_cache((caches.elements() + guard) * 2), v_cache((caches.elements() + guard) * 2);
    DeviceBuffer k_dev(k.bits.size() * 2), slots_dev(slots.size() * sizeof(int64_t)), counter(sizeof(int));
    fill(k_cache.as<void>(), 0xFF, k_cache.bytes());
    fill(v_cache.as<void>(), 0xFF, v_cache.bytes());
    fill(counter.as<void>(), 0, counter.bytes());
    upload(k_dev.as<void>(), k.bits.data(), k_dev.bytes());
    upload(slots_dev.as<void>(), slots.data(), slots_dev.bytes());
    fas_kv_append_args args = append_args(dtype, dtype, caches, k_cache.as<void>(), v_cache.as<void>(), stream);
    args.num_tokens = static_cast<int>(slots.size());
    args.k_new = args.v_new = k_dev.as<void>();
    args.slot_mapping = slots_dev.as<int64_t>();
    args.invalid_slots = counter.as<int>();
    if (fas_kv_append(&args) != FAS_SUCCESS) return {false, std::string("fas_kv_append failed: ") + fas_get_last_error()};
    CUDA_CHECK(cudaStreamSynchronize(stream));
    int invalid = 0;
    std::vector<uint16_t> k_back(caches.elements() + guard);
    CUDA_CHECK(cudaMemcpy(&invalid, counter.as<void>(), sizeof invalid, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(k_back.data(), k_cache.as<void>(), k_cache.bytes(), cudaMemcpyDeviceToHost));
    const bool guard_intact = std::all_of(k_back.begin() + caches.elements(), k_back.end(),
                                          [](uint16_t bits) { return bits == kPoisonBits; });
    const bool written = std::equal(k.bits.begin() + 2 * row, k.bits.begin() + 3 * row, k_back.begin() + 31 * row) &&
                         std::equal(k.bits.begin(), k.bits.begin() + row, k_back.begin());
    const bool passed = invalid == 3 && guard_intact && written;
    return {passed, "invalid_slots=" + std::to_string(invalid) + " (expected 3), guard " +
                        (guard_intact ? "intact" : "WRITTEN") + (written ? "" : ", valid slots not written")};
}

const char* const kAppendMisuse[] = {
    "fas_kv_append with a slot beyond the caches (slot_mapping_host)",
    "fas_kv_append with k_cache NULL",
    "fas_kv_append to an e4m3 cache without v_scale",
    "fas_kv_append with num_tokens -1",
    "fas_kv_append with k_new inside k_cache",
    "fas_kv_append with slot_mapping in host memory",
    "fas_kv_append with a cache_dtype other than dtype or e4m3",
};

CaseOutcome run_append_misuse(int which, fas_dtype dtype, cudaStream_t stream) {
    const Caches caches{4, 16, 2, 128};
    DeviceBuffer k_cache(caches.elements() * 2), v_cache(caches.elements() * 2), k_new(4 * 256 * 2),
        slots_dev(4 * sizeof(int64_t)), scales(8 * sizeof(float));
    const int64_t slots[4] = {0, 1, which == 0 ? 64 : 2, 3};
    upload(slots_dev.as<void>(), slots, sizeof slots);
    fas_kv_append_args args = append_args(dtype, which == 2 ? FAS_DTYPE_E4M3 : dtype, caches,
                                          which == 1 ? nullptr : k_cache.as<void>(), v_cache.as<void>(), stream);
    args.num_tokens = which == 3 ? -1 : 4;
    args.k_new = which == 4 ? k_cache.as<void>() : k_new.as<void>();
    args.v_new = k_new.as<void>();
    args.slot_mapping = which == 5 ? slots : slots_dev.as<int64_t>();
    args.slot_mapping_host = slots;
    args.k_scale = scales.as<float>();
    if (which == 6) args.cache_dtype = dtype == FAS_DTYPE_FP16 ? FAS_DTYPE_BF16 : FAS_DTYPE_FP16;
    const fas_status status = fas_kv_append(&args);
    return refusal_outcome(status, fas_get_last_error(), false);
}

}  // namespace

void report_append_cases(fas_dtype dtype, bool quick, cudaStream_t stream, Tally* tally) {
    std::vector<AppendCase> cases{
        {"append-attend-decode", 16, 2, 128, 16, {1, 1, 1, 1}, {1, 17, 300, 64}, 1},
        {"append-attend-chunk", 14, 2, 128, 48, {20, 0, 37}, {100, 64, 37}, 20},
    };
    if (!quick) cases.push_back({"append-attend-page1", 8, 8, 128, 1, {1, 9, 1}, {1000, 9, 77}, 3});
    // The attend step needs a paged kernel (head dim 128, causal) of this dtype.
    if (fas_query_paged_support(dtype, 128, 1, 1, 8, nullptr) != FAS_SUCCESS) {
        std::printf("[SKIP] kv append then attend %s: no paged kernel of head dim 128: %s\n", dtype_name(dtype),
                    fas_get_last_error());
        ++tally->skipped;
        cases.clear();
    }
    uint64_t seed = 9100 + static_cast<uint64_t>(dtype);
    for (const AppendCase& c : cases) {
        const std::string label = c.name + " " + dtype_name(dtype) + " page=" + std::to_string(c.page_size) +
                                  " heads=" + std::to_string(c.heads_q) + "/" + std::to_string(c.heads_kv);
        report(label, guarded([&] { return run_append_attend(c, dtype, seed++, stream); }), tally);
    }
    report(std::string("append-e4m3-cache ") + dtype_name(dtype),
           guarded([&] { return run_append_e4m3(dtype, seed++, stream); }), tally);
    report(std::string("append-invalid-slots ") + dtype_name(dtype),
           guarded([&] { return run_append_invalid_slots(dtype, seed++, stream); }), tally);
    for (int which = 0; which < static_cast<int>(sizeof kAppendMisuse / sizeof kAppendMisuse[0]); ++which) {
        report(kAppendMisuse[which], guarded([&] { return run_append_misuse(which, dtype, stream); }), tally);
    }
}

}  // namespace gpu_test
