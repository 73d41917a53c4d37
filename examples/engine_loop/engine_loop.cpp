// The decode loop of a serving engine over libflash_attn_standalone, as a CUDA graph: a small
// gpt-oss-like model (two layers: a causal window of 128 keys, then full attention; a sink logit
// per query head; fp16, head dim 64, GQA 16/2, pages of 16) decodes 8 slots for 512 steps while
// sequences finish and new ones join (a slot between sequences is padding: no keys, no write).
// One step, captured ONCE and replayed every step: each layer's fas_kv_append of the slots' new
// key/value rows, fas_plan_update of each layer's device-length plan from the slots' lengths in
// device memory, and each layer's fas_plan_run. Outside the graph the program only copies the
// step's inputs in (new rows, slot mapping, lengths, queries) and the outputs out. Every step's
// outputs are checked against a CPU reference (sinks in the softmax denominator; fp16 rule:
// |out - ref| <= 2e-3 + 2e-3 max |ref|) and against eager plans made on the host for the step's
// lengths, which they must equal bit for bit.
//
// Exit status: 0 every step right, 1 a failed call or a wrong step, 77 no usable CUDA device.
// Build: CMakeLists.txt beside this file (README.md).
#include <flash_attn_standalone.h>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "half.h"  // examples/common

namespace {

constexpr int kSlots = 8, kHeadsQ = 16, kHeadsK = 2, kHeadDim = 64, kPage = 16, kLayers = 2;
constexpr int kCapacity = 600;                           // keys a slot's sequence may hold
constexpr int kStride = (kCapacity + kPage - 1) / kPage;  // block table row: pages per slot
constexpr int kNumPages = kSlots * kStride;
constexpr int kWindow = 128;  // layer 0's left window; layer 1 sees every key
constexpr int kSteps = 512;
constexpr size_t kRow = static_cast<size_t>(kHeadsK) * kHeadDim;  // one token's keys (or values)

#define CHECK_FAS(call)                                                                         \
    do {                                                                                        \
        if ((call) != FAS_SUCCESS) {                                                            \
            std::fprintf(stderr, "%s failed: %s\n", #call, fas_get_last_error());               \
            return 1;                                                                           \
        }                                                                                       \
    } while (0)
#define CHECK_CUDA(call)                                                                        \
    do {                                                                                        \
        const cudaError_t error_ = (call);                                                      \
        if (error_ != cudaSuccess) {                                                            \
            std::fprintf(stderr, "%s failed: %s\n", #call, cudaGetErrorString(error_));         \
            return 1;                                                                           \
        }                                                                                       \
    } while (0)

template <typename T>
T* device_array(size_t count) {
    void* p = nullptr;
    return cudaMalloc(&p, count * sizeof(T)) == cudaSuccess ? static_cast<T*>(p) : nullptr;
}

// Random fp16 values, and the floats they hold (the reference reads exactly what the device reads).
void random_rows(std::mt19937& rng, size_t count, std::vector<uint16_t>* bits, std::vector<float>* values) {
    std::normal_distribution<float> normal;
    bits->resize(count);
    values->resize(count);
    for (size_t i = 0; i < count; ++i) {
        (*bits)[i] = to_half(normal(rng));
        (*values)[i] = from_half((*bits)[i]);
    }
}

// The CPU reference of one layer for one slot: its query row over its keys (a window if
// window >= 0), the sink in the denominator; out [kHeadsQ * kHeadDim].
void reference(const float* q, const std::vector<float>& k, const std::vector<float>& v, int length, int window,
               const float* sinks, double* out) {
    const int first = window >= 0 ? std::max(0, length - 1 - window) : 0;
    for (int h = 0; h < kHeadsQ; ++h) {
        const int kv = h / (kHeadsQ / kHeadsK);
        std::vector<double> scores(length, 0.0);
        double top = sinks[h];
        for (int j = first; j < length; ++j) {
            double dot = 0.0;
            for (int d = 0; d < kHeadDim; ++d) dot += q[h * kHeadDim + d] * k[j * kRow + kv * kHeadDim + d];
            scores[j] = dot / std::sqrt(double(kHeadDim));
            top = std::max(top, scores[j]);
        }
        double sum = std::exp(sinks[h] - top);
        for (int d = 0; d < kHeadDim; ++d) out[h * kHeadDim + d] = 0.0;
        for (int j = first; j < length; ++j) {
            const double p = std::exp(scores[j] - top);
            sum += p;
            for (int d = 0; d < kHeadDim; ++d) out[h * kHeadDim + d] += p * v[j * kRow + kv * kHeadDim + d];
        }
        for (int d = 0; d < kHeadDim; ++d) out[h * kHeadDim + d] = length > 0 ? out[h * kHeadDim + d] / sum : 0.0;
    }
}

fas_plan_args layer_plan_args(int layer, const int32_t* cu_q, const int32_t* lengths, bool device) {
    fas_plan_args args;
    fas_plan_args_init(&args);
    args.dtype = FAS_DTYPE_FP16;
    args.cu_seqlens_q = cu_q;
    args.batch_size = kSlots;
    args.num_heads_q = kHeadsQ;
    args.num_heads_k = kHeadsK;
    args.head_dim = kHeadDim;
    args.causal = 1;
    args.kv_layout = FAS_KV_PAGED;
    args.kv_lengths = lengths;  // device plans: each slot's capacity
    args.page_size = kPage;
    args.num_pages = kNumPages;
    args.use_window = layer == 0 ? 1 : 0;
    args.window_size_left = kWindow;
    args.use_sinks = 1;
    args.device_lengths = device ? 1 : 0;
    args.max_pages_per_sequence = device ? kStride : 0;
    return args;
}

}  // namespace

int main() {
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0 || fas_check_device(0) != FAS_SUCCESS) {
        std::printf("engine_loop: no CUDA device this library can use (%s); nothing run\n", fas_get_last_error());
        return 77;
    }
    std::mt19937 rng(2026);
    // The block table: each slot owns a row of shuffled pages, reused by every sequence it holds.
    std::vector<int32_t> table(kNumPages);
    for (int i = 0; i < kNumPages; ++i) table[i] = i;
    std::shuffle(table.begin(), table.end(), rng);
    std::vector<float> sinks(kLayers * kHeadsQ);
    for (float& s : sinks) s = std::uniform_real_distribution<float>(-2.f, 8.f)(rng);

    const size_t cache_elements = static_cast<size_t>(kNumPages) * kPage * kRow;
    uint16_t *k_cache[kLayers], *v_cache[kLayers], *k_new[kLayers], *v_new[kLayers], *q[kLayers], *out[kLayers];
    for (int l = 0; l < kLayers; ++l) {
        k_cache[l] = device_array<uint16_t>(cache_elements);
        v_cache[l] = device_array<uint16_t>(cache_elements);
        k_new[l] = device_array<uint16_t>(kCapacity * kRow);  // a joining prompt's rows, or a step's
        v_new[l] = device_array<uint16_t>(kCapacity * kRow);
        q[l] = device_array<uint16_t>(kSlots * kHeadsQ * kHeadDim);
        out[l] = device_array<uint16_t>(kSlots * kHeadsQ * kHeadDim);
    }
    int32_t* table_dev = device_array<int32_t>(kNumPages);
    int32_t* lengths_dev = device_array<int32_t>(kSlots);
    int32_t* csr_dev = device_array<int32_t>(kNumPages);
    int64_t* slots_dev = device_array<int64_t>(kCapacity);
    float* sinks_dev = device_array<float>(sinks.size());
    uint16_t* eager_out = device_array<uint16_t>(kSlots * kHeadsQ * kHeadDim);
    if (eager_out == nullptr) return std::fprintf(stderr, "cudaMalloc failed\n"), 1;
    CHECK_CUDA(cudaMemcpy(table_dev, table.data(), table.size() * 4, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(sinks_dev, sinks.data(), sinks.size() * 4, cudaMemcpyHostToDevice));
    cudaStream_t stream;
    CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));

    std::vector<int32_t> cu_q(kSlots + 1), capacity(kSlots, kCapacity);
    for (int i = 0; i <= kSlots; ++i) cu_q[i] = i;  // one query row per slot, padding included
    fas_plan* plans[kLayers];
    for (int l = 0; l < kLayers; ++l) {
        const fas_plan_args args = layer_plan_args(l, cu_q.data(), capacity.data(), true);
        CHECK_FAS(fas_plan_create(&args, &plans[l]));
    }
    // Append arguments of the step: one row per slot (a padding slot's mapping is -1).
    const auto append_args = [&](int layer, int tokens) {
        fas_kv_append_args a;
        fas_kv_append_args_init(&a);
        a.dtype = a.cache_dtype = FAS_DTYPE_FP16;
        a.num_tokens = tokens;
        a.num_heads_k = kHeadsK;
        a.head_dim = kHeadDim;
        a.k_new = k_new[layer];
        a.v_new = v_new[layer];
        a.slot_mapping = slots_dev;
        a.k_cache = k_cache[layer];
        a.v_cache = v_cache[layer];
        a.num_pages = kNumPages;
        a.page_size = kPage;
        a.stream = stream;
        return a;
    };
    const auto run_args = [&](int layer, void* to, const int32_t* ids) {
        fas_plan_run_args r;
        fas_plan_run_args_init(&r);
        r.q = q[layer];
        r.k = k_cache[layer];
        r.v = v_cache[layer];
        r.out = to;
        r.stream = stream;
        r.page_indices = ids;
        r.sinks = sinks_dev + layer * kHeadsQ;
        return r;
    };

    // The step, captured once.
    cudaGraph_t graph;
    cudaGraphExec_t step_graph;
    CHECK_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    fas_plan_update_args update;
    fas_plan_update_args_init(&update);
    update.kv_lengths = lengths_dev;
    update.stream = stream;
    for (int l = 0; l < kLayers; ++l) {
        const fas_kv_append_args append = append_args(l, kSlots);
        const fas_plan_run_args run = run_args(l, out[l], table_dev);
        CHECK_FAS(fas_kv_append(&append));
        CHECK_FAS(fas_plan_update(plans[l], &update));
        CHECK_FAS(fas_plan_run(plans[l], &run));
    }
    CHECK_CUDA(cudaStreamEndCapture(stream, &graph));
    CHECK_CUDA(cudaGraphInstantiate(&step_graph, graph, 0));

    // The host's mirror of every slot's keys and values per layer, and its sequence's plan.
    std::vector<float> k_host[kLayers][kSlots], v_host[kLayers][kSlots];
    std::vector<int32_t> length(kSlots, 0), target(kSlots, 0), idle(kSlots, 0);
    std::vector<uint16_t> bits, bits_v, got(kSlots * kHeadsQ * kHeadDim), eager(got.size());
    std::vector<float> values, values_v, q_values[kLayers];
    std::vector<double> ref(kHeadsQ * kHeadDim);
    std::uniform_int_distribution<int> prompt(0, 300), goal(20, kCapacity), pause(0, 3);
    const auto slot_of = [&](int s, int t) { return int64_t{table[s * kStride + t / kPage]} * kPage + t % kPage; };
    double worst = 0.0;
    int joined = 0;
    for (int step = 0; step < kSteps; ++step) {
        // Finished sequences leave their slot; idle slots take a new sequence with a prompt, whose
        // rows go into the caches outside the graph (as an engine's prefill would write them).
        for (int s = 0; s < kSlots; ++s) {
            if (target[s] > 0 && length[s] >= target[s]) target[s] = 0, length[s] = 0, idle[s] = pause(rng);
            if (target[s] > 0 || idle[s]-- > 0) continue;
            target[s] = goal(rng);
            const int p = std::min(prompt(rng), target[s] - 1);
            std::vector<int64_t> slots(p);
            for (int t = 0; t < p; ++t) slots[t] = slot_of(s, t);
            CHECK_CUDA(cudaMemcpy(slots_dev, slots.data(), p * 8, cudaMemcpyHostToDevice));
            for (int l = 0; l < kLayers; ++l) {
                random_rows(rng, p * kRow, &bits, &values);
                random_rows(rng, p * kRow, &bits_v, &values_v);
                k_host[l][s] = values;
                v_host[l][s] = values_v;
                CHECK_CUDA(cudaMemcpy(k_new[l], bits.data(), bits.size() * 2, cudaMemcpyHostToDevice));
                CHECK_CUDA(cudaMemcpy(v_new[l], bits_v.data(), bits_v.size() * 2, cudaMemcpyHostToDevice));
                const fas_kv_append_args append = append_args(l, p);
                CHECK_FAS(fas_kv_append(&append));
            }
            CHECK_CUDA(cudaStreamSynchronize(stream));
            length[s] = p;
            ++joined;
        }
        // The step's inputs: each live slot's new row (its next position), lengths after it, queries.
        std::vector<int64_t> slots(kSlots, -1);
        for (int s = 0; s < kSlots; ++s) {
            if (target[s] > 0) slots[s] = slot_of(s, length[s]++);
        }
        for (int l = 0; l < kLayers; ++l) {
            random_rows(rng, kSlots * kRow, &bits, &values);
            random_rows(rng, kSlots * kRow, &bits_v, &values_v);
            for (int s = 0; s < kSlots; ++s) {
                if (target[s] == 0) continue;
                k_host[l][s].insert(k_host[l][s].end(), values.begin() + s * kRow, values.begin() + (s + 1) * kRow);
                v_host[l][s].insert(v_host[l][s].end(), values_v.begin() + s * kRow, values_v.begin() + (s + 1) * kRow);
            }
            CHECK_CUDA(cudaMemcpy(k_new[l], bits.data(), bits.size() * 2, cudaMemcpyHostToDevice));
            CHECK_CUDA(cudaMemcpy(v_new[l], bits_v.data(), bits_v.size() * 2, cudaMemcpyHostToDevice));
            random_rows(rng, kSlots * kHeadsQ * kHeadDim, &bits, &q_values[l]);
            CHECK_CUDA(cudaMemcpy(q[l], bits.data(), bits.size() * 2, cudaMemcpyHostToDevice));
        }
        CHECK_CUDA(cudaMemcpy(slots_dev, slots.data(), kSlots * 8, cudaMemcpyHostToDevice));
        CHECK_CUDA(cudaMemcpy(lengths_dev, length.data(), kSlots * 4, cudaMemcpyHostToDevice));
        CHECK_CUDA(cudaGraphLaunch(step_graph, stream));
        CHECK_CUDA(cudaStreamSynchronize(stream));

        // Eager plans of the step's lengths (CSR page lists) must write the same bits.
        std::vector<int32_t> csr;
        for (int s = 0; s < kSlots; ++s) {
            csr.insert(csr.end(), table.begin() + s * kStride, table.begin() + s * kStride + (length[s] + kPage - 1) / kPage);
        }
        const bool any_keys = std::any_of(length.begin(), length.end(), [](int32_t n) { return n > 0; });
        if (any_keys) CHECK_CUDA(cudaMemcpy(csr_dev, csr.data(), csr.size() * 4, cudaMemcpyHostToDevice));
        for (int l = 0; l < kLayers; ++l) {
            CHECK_CUDA(cudaMemcpy(got.data(), out[l], got.size() * 2, cudaMemcpyDeviceToHost));
            if (any_keys) {  // no plan takes a batch without keys
                fas_plan* eager_plan = nullptr;
                const fas_plan_args args = layer_plan_args(l, cu_q.data(), length.data(), false);
                const fas_plan_run_args run = run_args(l, eager_out, csr_dev);
                CHECK_FAS(fas_plan_create(&args, &eager_plan));
                CHECK_FAS(fas_plan_run(eager_plan, &run));
                CHECK_CUDA(cudaStreamSynchronize(stream));
                CHECK_FAS(fas_plan_destroy(eager_plan));
                CHECK_CUDA(cudaMemcpy(eager.data(), eager_out, eager.size() * 2, cudaMemcpyDeviceToHost));
                if (eager != got) {
                    std::fprintf(stderr, "step %d layer %d: the graph's output differs from the eager plan's\n", step, l);
                    return 1;
                }
            }
            for (int s = 0; s < kSlots; ++s) {
                reference(&q_values[l][s * kHeadsQ * kHeadDim], k_host[l][s], v_host[l][s], length[s],
                          l == 0 ? kWindow : -1, &sinks[l * kHeadsQ], ref.data());
                double error = 0.0, top = 0.0;
                for (int e = 0; e < kHeadsQ * kHeadDim; ++e) {
                    error = std::max(error, std::fabs(from_half(got[s * kHeadsQ * kHeadDim + e]) - ref[e]));
                    top = std::max(top, std::fabs(ref[e]));
                }
                worst = std::max(worst, error);
                if (!(error <= 2e-3 + 2e-3 * top)) {
                    std::fprintf(stderr, "step %d layer %d slot %d (%d keys): max |out - ref| %.3e\n", step, l, s,
                                 length[s], error);
                    return 1;
                }
            }
        }
    }
    std::printf("engine_loop: %d steps of %d slots (%d sequences joined), 2 layers replayed from one graph: every "
                "step equals the eager plans bit for bit and the reference within the rule (worst %.2e)\n",
                kSteps, kSlots, joined, worst);
    return 0;
}
