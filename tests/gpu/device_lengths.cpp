// Device-length plans (DEVICE LENGTHS in flash_attn_standalone_paged.h): one plan made for a
// capacity, a block table of shuffled pages, and a series of steps whose key counts reach the
// plan only through a DEVICE array and fas_plan_update (eagerly, or replayed from one captured
// CUDA graph of update + run). Every step's out and LSE must equal, bit for bit, those of a plan
// made on the host for that step's lengths (the same pages as a CSR table), and the first step's
// must pass the reference rule (reference.h); lengths beyond a capacity (or negative) must act as
// held to it, and a run before any update as the capacity. Misuse: updates of plans made without
// device_lengths, a NULL length array, a block table too narrow, a plan past the decode kernel.
#include "reference.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

namespace gpu_test {
namespace {

struct DeviceCase {
    std::string name;
    int heads_q, heads_kv, head_dim, page_size, queries;
    std::vector<int> capacity;             // keys each sequence may hold
    std::vector<std::vector<int>> steps;   // each step's key counts
    bool graph = false;                    // replay one captured graph of update + run
    int window_left = -1;
    bool sinks = false;
    bool fp8_kv = false;  // e4m3 caches with per-head descales (values: stored value x descale)
};

struct Outputs {
    std::vector<uint16_t> out;
    std::vector<float> lse;
};

Outputs read_outputs(const DeviceBuffer& out, const DeviceBuffer& lse) {
    Outputs o{std::vector<uint16_t>(out.bytes() / 2), std::vector<float>(lse.bytes() / 4)};
    CUDA_CHECK(cudaMemcpy(o.out.data(), out.as<void>(), out.bytes(), cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(o.lse.data(), lse.as<void>(), lse.bytes(), cudaMemcpyDeviceToHost));
    return o;
}

CaseOutcome run_device_case(const DeviceCase& c, fas_dtype dtype, uint64_t seed, cudaStream_t stream) {
    const int batch = static_cast<int>(c.capacity.size());
    int stride = 1;
    for (int cap : c.capacity) stride = std::max(stride, ceil_div(cap, c.page_size));
    const int num_pages = batch * stride + 3;
    const size_t row = static_cast<size_t>(c.heads_kv) * c.head_dim;
    const size_t q_rows = static_cast<size_t>(batch) * c.queries;
    std::mt19937_64 rng(seed);
    const size_t cache_rows = static_cast<size_t>(num_pages) * c.page_size;
    const CacheTensors caches = random_caches(dtype, c.fp8_kv, cache_rows, c.heads_kv, c.head_dim, rng);
    const RoundedTensor &k = caches.k, &v = caches.v;
    const QuantizedTensor &k8 = caches.k8, &v8 = caches.v8;
    const RoundedTensor q = random_tensor(dtype, q_rows * c.heads_q * c.head_dim, rng);
    const std::vector<int32_t> table = shuffled_pages(batch * stride, num_pages, rng);  // [batch, stride]
    const std::vector<float> sinks = c.sinks ? spread_sinks(c.heads_q) : std::vector<float>();
    const size_t kv_bytes = cache_rows * row * (c.fp8_kv ? 1 : 2);
    DeviceBuffer k_dev(kv_bytes), v_dev(kv_bytes), q_dev(q.bits.size() * 2), descale_dev(2 * c.heads_kv * sizeof(float));
    DeviceBuffer out_dev(q.bits.size() * 2), lse_dev(q_rows * c.heads_q * sizeof(float));
    DeviceBuffer table_dev(table.size() * 4), csr_dev(table.size() * 4), lengths_dev(batch * 4);
    DeviceBuffer sinks_dev(std::max<size_t>(sinks.size(), 1) * 4);
    if (c.fp8_kv) {
        upload(k_dev.as<void>(), k8.bits.data(), kv_bytes);
        upload(v_dev.as<void>(), v8.bits.data(), kv_bytes);
        upload(descale_dev.as<void>(), k8.descale.data(), c.heads_kv * sizeof(float));
        upload(descale_dev.as<float>() + c.heads_kv, v8.descale.data(), c.heads_kv * sizeof(float));
    } else {
        upload(k_dev.as<void>(), k.bits.data(), kv_bytes);
        upload(v_dev.as<void>(), v.bits.data(), kv_bytes);
    }
    upload(q_dev.as<void>(), q.bits.data(), q_dev.bytes());
    upload(table_dev.as<void>(), table.data(), table_dev.bytes());
    if (c.sinks) upload(sinks_dev.as<void>(), sinks.data(), sinks.size() * 4);

    std::vector<int32_t> cu_q(batch + 1);
    for (int i = 0; i <= batch; ++i) cu_q[i] = i * c.queries;
    const auto make_plan = [&](const std::vector<int32_t>& lengths, bool device, const int32_t* host_ids, fas_plan** plan) {
        fas_plan_args args = paged_plan_args(dtype, cu_q.data(), lengths.data(), batch, c.heads_q, c.heads_kv,
                                             c.head_dim, true, c.page_size, num_pages, host_ids);
        args.device_lengths = device ? 1 : 0;
        args.max_pages_per_sequence = device ? stride : 0;
        args.use_window = c.window_left >= 0 ? 1 : 0;
        args.window_size_left = c.window_left;
        args.use_sinks = c.sinks ? 1 : 0;
        if (c.fp8_kv) args.kv_dtype = FAS_DTYPE_E4M3;
        return fas_plan_create(&args, plan);
    };
    const auto run_args = [&](const DeviceBuffer& ids) {
        fas_plan_run_args run = plan_run_args(q_dev.as<void>(), k_dev.as<void>(), v_dev.as<void>(), out_dev.as<void>(), stream);
        run.softmax_lse = lse_dev.as<float>();
        run.page_indices = ids.as<int32_t>();
        run.sinks = c.sinks ? sinks_dev.as<float>() : nullptr;
        if (c.fp8_kv) {
            run.k_descale = descale_dev.as<float>();
            run.v_descale = descale_dev.as<float>() + c.heads_kv;
        }
        return run;
    };
    const auto poison = [&] {
        fill(out_dev.as<void>(), 0xFF, out_dev.bytes());
        fill(lse_dev.as<void>(), 0xFF, lse_dev.bytes());
    };
    const auto same_bits = [&](const Outputs& x, const Outputs& y) {
        return x.out == y.out && std::memcmp(x.lse.data(), y.lse.data(), lse_dev.bytes()) == 0;
    };
    // The outputs of a plan made on the host for `lengths` over the same pages (each sequence's
    // first ceil(len / page) as a CSR list); *why says why it could not run.
    const auto host_outputs = [&](const std::vector<int32_t>& lengths, std::string* why) {
        std::vector<int32_t> csr;
        for (int i = 0; i < batch; ++i) {
            csr.insert(csr.end(), table.begin() + i * stride, table.begin() + i * stride + ceil_div(lengths[i], c.page_size));
        }
        upload(csr_dev.as<void>(), csr.data(), csr.size() * 4);
        poison();
        fas_plan* host = nullptr;
        const fas_plan_run_args host_run = run_args(csr_dev);
        if (make_plan(lengths, false, csr.data(), &host) != FAS_SUCCESS || fas_plan_run(host, &host_run) != FAS_SUCCESS) {
            *why = fas_get_last_error();
        }
        CUDA_CHECK(cudaStreamSynchronize(stream));
        fas_plan_destroy(host);
        return read_outputs(out_dev, lse_dev);
    };
    const std::vector<int32_t> capacity(c.capacity.begin(), c.capacity.end());
    fas_plan* plan = nullptr;
    if (make_plan(capacity, true, nullptr, &plan) != FAS_SUCCESS) {
        return {false, std::string("fas_plan_create (device lengths) failed: ") + fas_get_last_error()};
    }
    fas_plan_info info;
    std::memset(&info, 0, sizeof info);
    info.struct_size = sizeof info;
    CUDA_CHECK(fas_plan_get_info(plan, &info) == FAS_SUCCESS ? cudaSuccess : cudaErrorUnknown);
    const std::string detail = " tile=" + std::to_string(info.query_tile_rows) + " ctas/sm=" +
                               std::to_string(info.ctas_per_sm) + " steps=" + std::to_string(c.steps.size()) +
                               (c.graph ? " (graph)" : "");
    const fas_plan_run_args device_run = run_args(table_dev);
    fas_plan_update_args update;
    fas_plan_update_args_init(&update);
    update.kv_lengths = lengths_dev.as<int32_t>();
    update.stream = stream;
    cudaGraphExec_t exec = nullptr;
    std::string failure = info.total_pages == batch * stride ? "" : "fas_plan_info.total_pages is not batch x stride";
    if (failure.empty() && c.graph) {
        cudaGraph_t graph = nullptr;
        CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
        const bool captured = fas_plan_update(plan, &update) == FAS_SUCCESS && fas_plan_run(plan, &device_run) == FAS_SUCCESS;
        if (!captured) failure = std::string("capture: ") + fas_get_last_error();
        const cudaError_t ended = cudaStreamEndCapture(stream, &graph);
        if (ended != cudaSuccess && failure.empty()) failure = std::string("capture: ") + cudaGetErrorString(ended);
        cudaGetLastError();  // a failed capture's error is not this run's to leave behind
        if (failure.empty()) CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
        if (graph != nullptr) CUDA_CHECK(cudaGraphDestroy(graph));
    }
    char numbers[160] = "";
    if (failure.empty() && !c.graph) {  // before any update a run attends the capacity
        poison();
        if (fas_plan_run(plan, &device_run) != FAS_SUCCESS) {
            failure = std::string("run before an update: ") + fas_get_last_error();
        }
        CUDA_CHECK(cudaStreamSynchronize(stream));
        const Outputs before = read_outputs(out_dev, lse_dev);
        std::string why;
        const Outputs expected = host_outputs(capacity, &why);
        if (failure.empty() && !why.empty()) failure = "the capacity's host plan: " + why;
        if (failure.empty() && !same_bits(before, expected)) {
            failure = "a run before the first update differs from a host plan of the capacity";
        }
    }
    for (size_t s = 0; s < c.steps.size() && failure.empty(); ++s) {
        const std::vector<int32_t> given(c.steps[s].begin(), c.steps[s].end());
        upload(lengths_dev.as<void>(), given.data(), batch * 4);
        std::vector<int32_t> lengths(batch);  // as the update holds them: within [0, capacity]
        for (int i = 0; i < batch; ++i) lengths[i] = std::min(std::max(given[i], 0), c.capacity[i]);
        poison();
        if (c.graph) {
            CUDA_CHECK(cudaGraphLaunch(exec, stream));
        } else if (fas_plan_update(plan, &update) != FAS_SUCCESS || fas_plan_run(plan, &device_run) != FAS_SUCCESS) {
            failure = "step " + std::to_string(s) + ": " + fas_get_last_error();
            break;
        }
        CUDA_CHECK(cudaStreamSynchronize(stream));
        const Outputs device = read_outputs(out_dev, lse_dev);
        if (std::all_of(lengths.begin(), lengths.end(), [](int32_t n) { return n == 0; })) {
            // No host plan takes a layout without keys: every row must be out = 0, LSE = +infinity.
            const bool empty = std::all_of(device.out.begin(), device.out.end(), [](uint16_t b) { return b == 0; }) &&
                               std::all_of(device.lse.begin(), device.lse.end(), [](float x) { return std::isinf(x) && x > 0; });
            if (!empty) failure = "step " + std::to_string(s) + ": a step without keys wrote something but zeros and +inf";
            continue;
        }
        std::string why;
        const Outputs expected = host_outputs(lengths, &why);
        if (!why.empty()) {
            failure = "step " + std::to_string(s) + ": the host plan: " + why;
            break;
        }
        if (!same_bits(device, expected)) {
            size_t at = 0;
            while (at < device.out.size() && device.out[at] == expected.out[at]) ++at;
            failure = "step " + std::to_string(s) + ": out or LSE differs from the host plan's (first out element " +
                      std::to_string(at) + ")";
            break;
        }
        if (s > 0) continue;
        // The first step against the reference: the keys the lengths take, gathered in order.
        AttentionCase ref_case{c.name, dtype, c.heads_q, c.heads_kv, c.head_dim, true, true,
                               std::vector<int>(batch, c.queries), c.steps[0]};
        ref_case.use_window = c.window_left >= 0;
        ref_case.window_left = c.window_left;
        ref_case.window_right = 0;
        ref_case.sinks = sinks;
        std::vector<float> k_rows, v_rows;
        for (int i = 0; i < batch; ++i) {
            for (int t = 0; t < lengths[i]; ++t) {
                const size_t at = (static_cast<size_t>(table[i * stride + t / c.page_size]) * c.page_size + t % c.page_size) * row;
                k_rows.insert(k_rows.end(), k.values.begin() + at, k.values.begin() + at + row);
                v_rows.insert(v_rows.end(), v.values.begin() + at, v.values.begin() + at + row);
            }
        }
        const Reference ref = compute_reference(ref_case, q.values, k_rows, v_rows, 1.f / std::sqrt(float(c.head_dim)));
        OutputView view{device.out.data(), static_cast<size_t>(c.heads_q) * c.head_dim};
        view.lse = device.lse.data();
        view.lse_layout = LseLayout::kTokenMajor;
        view.lse_rows = q_rows;
        const Comparison result = compare_with_reference(ref_case, ref, view);
        std::snprintf(numbers, sizeof numbers, " step 0: out_err=%.3e (tol %.3e)", result.max_out_error, result.out_limit);
        if (!result.passed) failure = std::string("step 0 fails the reference rule:") + numbers;
    }
    if (exec != nullptr) CUDA_CHECK(cudaGraphExecDestroy(exec));
    fas_plan_destroy(plan);
    return {failure.empty(), (failure.empty() ? std::string("every step equals the host plan's bits;") + numbers : failure) +
                                 detail};
}

// Misuse: 0, an update of a plan made without device_lengths; 1, an update with kv_lengths NULL
// (both FAS_ERROR_INVALID_ARGUMENT); at creation, 2, a block table too narrow for a capacity, 4,
// page_indices_host set, 5, more sequences than one update plans (INVALID_ARGUMENT); 3, 8 queries
// x GQA 8 (past the decode kernel's tiles: NOT_BUILT).
const char* const kDeviceMisuse[] = {
    "fas_plan_update of a plan made without device_lengths",
    "fas_plan_update with kv_lengths NULL",
    "device-length plan whose max_pages_per_sequence misses a capacity",
    "device-length plan past the decode kernel's tiles",
    "device-length plan with page_indices_host",
    "device-length plan of 2049 sequences",
};

CaseOutcome run_device_misuse(int which, fas_dtype dtype, cudaStream_t stream) {
    const int32_t cu_q[3] = {0, which == 3 ? 8 : 1, which == 3 ? 16 : 2}, capacity[2] = {40, 100}, ids[10] = {};
    std::vector<int32_t> many_q(2050), many_capacity(2049, 1);
    for (int i = 0; i < 2050; ++i) many_q[i] = i;
    DeviceBuffer lengths(8);
    fas_plan_args args = paged_plan_args(dtype, cu_q, capacity, 2, which == 3 ? 16 : 2, 2, 128, true, 16, 64,
                                         which == 4 ? ids : nullptr);
    if (which == 5) {
        args = paged_plan_args(dtype, many_q.data(), many_capacity.data(), 2049, 2, 2, 128, true, 16, 4096, nullptr);
    }
    args.device_lengths = which == 0 ? 0 : 1;
    args.max_pages_per_sequence = which == 2 ? 3 : 7;  // 100 keys need 7 pages of 16
    fas_plan* plan = nullptr;
    fas_status status = fas_plan_create(&args, &plan);
    if (which < 2) {
        if (status != FAS_SUCCESS) return {false, std::string("setup: fas_plan_create failed: ") + fas_get_last_error()};
        fas_plan_update_args update;
        fas_plan_update_args_init(&update);
        update.kv_lengths = which == 1 ? nullptr : lengths.as<int32_t>();
        update.stream = stream;
        status = fas_plan_update(plan, &update);
    }
    const std::string message = status == FAS_SUCCESS ? "" : fas_get_last_error();
    if (plan != nullptr) fas_plan_destroy(plan);
    if (which == 3) {
        return {status == FAS_ERROR_NOT_BUILT && message.find("device-length") != std::string::npos,
                "status=" + std::to_string(static_cast<int>(status)) + " message=\"" + message + "\""};
    }
    return refusal_outcome(status, message, false);
}

}  // namespace

void report_device_length_cases(fas_dtype dtype, bool quick, cudaStream_t stream, Tally* tally) {
    std::vector<DeviceCase> cases;
    for (int head_dim : {64, 128}) {
        if (!has_kernel("paged", dtype, head_dim, true)) continue;
        // Decode over 8 slots (one of capacity 0: a padding slot): full, empty, short, mixed
        // lengths, and few long sequences (the update splits their keys; the host plan too).
        cases.push_back({"device-decode", 16, 2, head_dim, 16, 1, {5000, 3000, 4097, 64, 1, 0, 700, 2000},
                         {{5000, 3000, 4097, 64, 1, 0, 700, 2000}, {0, 0, 0, 0, 0, 0, 0, 0}, {1, 2, 3, 4, 1, 0, 5, 6},
                          {4999, 17, 2048, 33, 0, 0, 699, 1}, {5000, 0, 0, 0, 0, 0, 0, 0},
                          {300, 300, 300, 300, 1, 0, 300, -5}}});  // 300 > capacity 64, and -5: held to [0, capacity]
        // Two long slots: splits that change with the lengths, and none.
        cases.push_back({"device-split", 16, 2, head_dim, 16, 1, {quick ? 20000 : 40000, 9000},
                         {{quick ? 20000 : 40000, 100}, {100, 9000}, {0, 5000}, {1, 1}, {quick ? 19999 : 39999, 9000}}});
        // Two queries x GQA 8 (16 rows), a 128-key window and sinks, pages of 32.
        cases.push_back({"device-spec-window-sinks", 16, 2, head_dim, 32, 2, {3000, 700, 9, 4100},
                         {{3000, 700, 9, 4100}, {128, 129, 2, 0}, {2999, 1, 9, 1000}}, false, 128, true});
        // One captured graph of update + run, replayed over steps of growing and finishing sequences.
        std::vector<std::vector<int>> growing;
        for (int step = 0; step < (quick ? 6 : 24); ++step) {
            growing.push_back({100 + step, step % 5 == 4 ? 0 : 3000 + 37 * step, 1 + step, step < 3 ? 0 : 9000 - step});
        }
        cases.push_back({"device-graph", 16, 2, head_dim, 16, 1, {200, 4000, 40, 9000}, growing, true});
        // 64 slots: enough tiles that the plan folds its splits in the decode kernel (no merge
        // kernel; paged.h's fold_counts), against host plans that fold or merge by their own
        // chunks: all full, one long slot alone (many chunks a tile), eight, one key each.
        std::vector<int> slots(64), one(64, 0), eight(64, 0), ones(64, 1);
        for (int i = 0; i < 64; ++i) slots[i] = 300 + (i * 97) % (quick ? 1200 : 2500);
        slots[0] = quick ? 20000 : 40000;
        one[0] = slots[0];
        for (int i = 0; i < 8; ++i) eight[i] = slots[i];
        cases.push_back({"device-fold", 16, 2, head_dim, 16, 1, slots, {slots, one, eight, ones}});
        // 131 slots (262 items: on a stream card two rounds, the second partial): mixed lengths,
        // half of them, and a step of few keys each.
        const std::vector<int> many = spread_lengths(131, 3000);
        std::vector<int> half(131), few(131);
        for (int i = 0; i < 131; ++i) {
            half[i] = i % 2 == 0 ? many[i] : 0;
            few[i] = i % 7;
        }
        cases.push_back({"device-rounds", 16, 2, head_dim, 16, 1, many, {many, half, few}});
        // Four queries x GQA 8 (32 rows: the pair shape's tiles on every card), a split among the steps.
        cases.push_back({"device-spec-pair", 16, 2, head_dim, 16, 4, {quick ? 20000 : 40000, 3000, 40, 0},
                         {{quick ? 20000 : 40000, 3000, 40, 0}, {100, 1, 4, 0}, {0, 2999, 39, 0}}});
    }
    // e4m3 caches (per-head descales) on the same decode kernel: steps with a split and without.
    for (int head_dim : {64, 128}) {
        if (!has_kernel("paged_e4m3kv", dtype, head_dim, true)) continue;
        DeviceCase fp8{"device-fp8kv", 16, 2, head_dim, 16, 1, {quick ? 20000 : 40000, 900, 5, 0},
                       {{quick ? 20000 : 40000, 900, 5, 0}, {7, 899, 0, 0}, {1, 1, 1, 0}}};
        fp8.fp8_kv = true;
        cases.push_back(fp8);
    }
    uint64_t seed = 9100 + static_cast<uint64_t>(dtype);
    for (const DeviceCase& c : cases) {
        char label[120];
        std::snprintf(label, sizeof label, "%-26s %s%s hdim=%d %d/%d page=%d q=%d b=%zu", c.name.c_str(), dtype_name(dtype),
                      c.fp8_kv ? " kv=e4m3" : "", c.head_dim, c.heads_q, c.heads_kv, c.page_size, c.queries,
                      c.capacity.size());
        report(label, guarded([&] { return run_device_case(c, dtype, seed++, stream); }), tally);
    }
    if (!has_kernel("paged", dtype, 128, true)) return;
    for (int which = 0; which < 6; ++which) {
        report(kDeviceMisuse[which], guarded([&] { return run_device_misuse(which, dtype, stream); }), tally);
    }
}

}  // namespace gpu_test
