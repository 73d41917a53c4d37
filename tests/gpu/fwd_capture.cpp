// fas_fwd in a CUDA graph: a decode-shaped call runs on the paged family through a plan made in
// the call, and few query tiles over long keys on SM90 with the keys split (two plans, the merge,
// scratch from cudaMallocAsync), eager or captured (the header's BATCH-LAYOUT fas_fwd ON PLANS);
// captured, the graph owns the plans' memory, so it replays correctly after the call has returned. Captured in the
// global mode (the default, which refuses allocations and host waits on the capturing thread)
// and in the thread-local one; eager and replays are held to the reference, and every replay must
// equal the eager output bit for bit (the same plan on the same inputs), also after an eager call
// of another layout has planned between two replays.
#include "reference.h"

#include <cmath>
#include <cstdio>
#include <cstring>

namespace gpu_test {
namespace {

constexpr int kHeadsQ = 16, kHeadsKv = 2;

struct Shape {
    const char* name;
    int batch, queries, keys;   // keys 0: enough for the key split in every build (key_split_keys)
    int same_precision_chunks;  // AttentionCase's: the key split's partials on a 132-SM card
};

int keys_of(const Shape& shape, int head_dim) {
    return shape.keys > 0 ? shape.keys : key_split_keys(shape.batch, shape.queries, kHeadsQ, head_dim);
}
constexpr Shape kDecode{"fwd-decode-graph", 4, 1, 1000, 0};
constexpr Shape kKeySplit{"fwd-key-split-graph", 2, 100, 0, 5};

CaseOutcome run_capture_case(fas_dtype dtype, int head_dim, const Shape& shape, cudaStream_t stream) {
    const int batch = shape.batch, keys = keys_of(shape, head_dim), queries = shape.queries;
    AttentionCase c{shape.name, dtype, kHeadsQ, kHeadsKv, head_dim, true, false,
                    std::vector<int>(batch, queries), std::vector<int>(batch, keys)};
    c.same_precision_chunks = shape.same_precision_chunks;
    const size_t q_width = static_cast<size_t>(kHeadsQ) * head_dim * queries;  // a sequence's query rows
    const size_t kv_width = static_cast<size_t>(kHeadsKv) * head_dim;
    std::mt19937_64 rng(20261128 + static_cast<uint64_t>(dtype) * 1000 + head_dim);
    const RoundedTensor q = random_tensor(dtype, batch * q_width, rng);
    const RoundedTensor k = random_tensor(dtype, batch * keys * kv_width, rng);
    const RoundedTensor v = random_tensor(dtype, batch * keys * kv_width, rng);
    DeviceBuffer q_dev(q.bits.size() * 2), k_dev(k.bits.size() * 2), v_dev(v.bits.size() * 2);
    DeviceBuffer eager_dev(batch * q_width * 2), graph_dev(batch * q_width * 2), scratch_dev(batch * q_width * 2);
    upload(q_dev.as<void>(), q.bits.data(), q_dev.bytes());
    upload(k_dev.as<void>(), k.bits.data(), k_dev.bytes());
    upload(v_dev.as<void>(), v.bits.data(), v_dev.bytes());
    fill(eager_dev.as<void>(), 0xFF, eager_dev.bytes());
    fill(graph_dev.as<void>(), 0xFF, graph_dev.bytes());

    fas_fwd_args args = fwd_args(dtype, q_dev.as<void>(), k_dev.as<void>(), v_dev.as<void>(), eager_dev.as<void>(),
                                 batch, queries, keys, kHeadsQ, kHeadsKv, head_dim, true, stream);
    if (fas_fwd(&args) != FAS_SUCCESS) return {false, std::string("eager fas_fwd failed: ") + fas_get_last_error()};
    CUDA_CHECK(cudaStreamSynchronize(stream));

    std::vector<std::vector<uint16_t>> replays;
    for (const cudaStreamCaptureMode mode : {cudaStreamCaptureModeGlobal, cudaStreamCaptureModeThreadLocal}) {
        args.out = graph_dev.as<void>();
        cudaGraph_t graph = nullptr;
        CUDA_CHECK(cudaStreamBeginCapture(stream, mode));
        const fas_status captured = fas_fwd(&args);
        const std::string capture_error = captured == FAS_SUCCESS ? "" : fas_get_last_error();
        const cudaError_t ended = cudaStreamEndCapture(stream, &graph);
        const char* mode_name = mode == cudaStreamCaptureModeGlobal ? "global" : "thread-local";
        if (captured != FAS_SUCCESS) {
            if (graph != nullptr) cudaGraphDestroy(graph);
            return {false, std::string("fas_fwd under a ") + mode_name + " capture failed: " + capture_error};
        }
        if (ended != cudaSuccess) {
            return {false, std::string("cudaStreamEndCapture (") + mode_name + "): " + cudaGetErrorString(ended)};
        }
        cudaGraphExec_t exec = nullptr;
        CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
        CUDA_CHECK(cudaGraphDestroy(graph));  // the executable graph keeps what the capture made
        for (int replay = 0; replay < 2; ++replay) {
            if (replay == 1) {
                // An eager call of another layout between the replays: it plans from the library's
                // block cache, so it would overwrite the graph's schedule were the block back there.
                fas_fwd_args other = args;
                other.max_seqlen_k = keys / 2;
                other.out = scratch_dev.as<void>();
                if (fas_fwd(&other) != FAS_SUCCESS) return {false, std::string("eager fas_fwd: ") + fas_get_last_error()};
            }
            fill(graph_dev.as<void>(), 0xFF, graph_dev.bytes());
            CUDA_CHECK(cudaGraphLaunch(exec, stream));
            CUDA_CHECK(cudaStreamSynchronize(stream));
            replays.emplace_back(batch * q_width);
            CUDA_CHECK(cudaMemcpy(replays.back().data(), graph_dev.as<void>(), graph_dev.bytes(),
                                  cudaMemcpyDeviceToHost));
        }
        CUDA_CHECK(cudaGraphExecDestroy(exec));
    }
    CUDA_CHECK(cudaGetLastError());
    std::vector<uint16_t> eager(batch * q_width);
    CUDA_CHECK(cudaMemcpy(eager.data(), eager_dev.as<void>(), eager_dev.bytes(), cudaMemcpyDeviceToHost));

    const Reference ref = compute_reference(c, q.values, k.values, v.values, 1.f / std::sqrt(static_cast<float>(head_dim)));
    const size_t row = static_cast<size_t>(kHeadsQ) * head_dim;
    const Comparison eager_result = compare_with_reference(c, ref, OutputView{eager.data(), row});
    const Comparison graph_result = compare_with_reference(c, ref, OutputView{replays[0].data(), row});
    bool replays_equal = true;
    for (const std::vector<uint16_t>& replay : replays) replays_equal = replays_equal && replay == eager;
    char numbers[192];
    std::snprintf(numbers, sizeof numbers, "eager out_err=%.3e, graph out_err=%.3e (tol %.3e), %zu replays %s",
                  eager_result.max_out_error, graph_result.max_out_error, graph_result.out_limit, replays.size(),
                  replays_equal ? "equal to eager" : "differ from eager");
    return {eager_result.passed && graph_result.passed && replays_equal, numbers};
}

// Whether the SM90 kernels serve plans of the dtype and head dim, causal or not (the key split).
bool sm90_serves(fas_dtype dtype, int head_dim) {
    for (const int causal : {0, 1}) {
        fas_family family = FAS_FAMILY_FA2;
        int served_by = 0;
        if (fas_query_plan_support(dtype, head_dim, causal, &family, &served_by) != FAS_SUCCESS ||
            family != FAS_FAMILY_SM90) {
            return false;
        }
    }
    return true;
}

std::string capture_label(fas_dtype dtype, int head_dim, const Shape& shape) {
    return std::string(shape.name) + " " + dtype_name(dtype) + " hdim=" + std::to_string(head_dim) + " fas_fwd batch " +
           std::to_string(shape.batch) + " x " + std::to_string(shape.queries) + " queries x " +
           std::to_string(keys_of(shape, head_dim)) +
           " keys, 16/2, causal: eager, then captured (global and thread-local mode), each graph replayed twice";
}

}  // namespace

void report_fwd_capture_cases(fas_dtype dtype, cudaStream_t stream, Tally* tally) {
    bool decode = false, key_split = false;
    for (const int head_dim : {64, 128}) {
        if (!decode && fas_query_paged_support(dtype, head_dim, 1, 1, kHeadsQ / kHeadsKv, nullptr) == FAS_SUCCESS) {
            decode = true;
            report(capture_label(dtype, head_dim, kDecode), run_capture_case(dtype, head_dim, kDecode, stream), tally);
        }
        if (!key_split && sm90_serves(dtype, head_dim)) {
            key_split = true;
            report(capture_label(dtype, head_dim, kKeySplit), run_capture_case(dtype, head_dim, kKeySplit, stream),
                   tally);
        }
    }
}

}  // namespace gpu_test
