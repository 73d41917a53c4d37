// What every file of the GPU test shares: exit statuses, CUDA error checking and device
// buffers, the host-side dtype conversions and random inputs (defined in numerics.cpp), the
// description of an attention case, and the entry points each concern file offers the driver.
//
// The test uses only the library's public header and the CUDA runtime.
#ifndef GPU_TEST_H
#define GPU_TEST_H

#include "flash_attn_standalone.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace gpu_test {

constexpr int kExitPass = 0;
constexpr int kExitFail = 1;
constexpr int kExitUsage = 2;
constexpr int kExitSkip = 77;

// ---------------------------------------------------------------------------------------------
// CUDA helpers: a failed runtime call throws; the driver turns it into a failed case.

class CudaFailure : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// The message names the expression and its line; no __FILE__, which would put the build
// machine's paths into the binary.
inline void check_cuda(cudaError_t error, const char* expression, int line) {
    if (error != cudaSuccess) {
        throw CudaFailure(std::string(expression) + " failed at line " + std::to_string(line) + ": " +
                          cudaGetErrorName(error) + " (" + cudaGetErrorString(error) + ")");
    }
}

#define CUDA_CHECK(expression) ::gpu_test::check_cuda((expression), #expression, __LINE__)

class DeviceBuffer {
public:
    explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
        if (bytes > 0) CUDA_CHECK(cudaMalloc(&pointer_, bytes));
    }
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;
    ~DeviceBuffer() {
        if (pointer_ != nullptr) cudaFree(pointer_);
    }

    template <typename T>
    T* as() const {
        return static_cast<T*>(pointer_);
    }
    size_t bytes() const { return bytes_; }

private:
    void* pointer_ = nullptr;
    size_t bytes_;
};

// Test setup, complete on return. The tests run on a non-blocking stream, which does not wait
// for the legacy stream that cudaMemcpy and cudaMemset use, and a cudaMemcpy from pageable
// memory may return before its copy has landed: without the synchronize, a kernel could read
// the old bytes (seen with a 231 MB paged cache under a busy GPU).
inline void upload(void* device, const void* host, size_t bytes) {
    CUDA_CHECK(cudaMemcpy(device, host, bytes, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaDeviceSynchronize());
}
inline void fill(void* device, int byte, size_t bytes) {
    CUDA_CHECK(cudaMemset(device, byte, bytes));
    CUDA_CHECK(cudaDeviceSynchronize());
}

// ---------------------------------------------------------------------------------------------
// Plan arguments: the fields every plan of the tests sets (host query offsets, heads, head dim,
// mask), over varlen K/V or a paged cache; everything else as fas_plan_args_init leaves it.

inline fas_plan_args plan_args(fas_dtype dtype, const int32_t* cu_seqlens_q, int batch, int heads_q, int heads_kv,
                               int head_dim, bool causal) {
    fas_plan_args args;
    fas_plan_args_init(&args);
    args.dtype = dtype;
    args.cu_seqlens_q = cu_seqlens_q;
    args.batch_size = batch;
    args.num_heads_q = heads_q;
    args.num_heads_k = heads_kv;
    args.head_dim = head_dim;
    args.causal = causal ? 1 : 0;
    return args;
}

// Varlen K/V at host offsets cu_seqlens_k.
inline fas_plan_args varlen_plan_args(fas_dtype dtype, const int32_t* cu_seqlens_q, const int32_t* cu_seqlens_k,
                                      int batch, int heads_q, int heads_kv, int head_dim, bool causal) {
    fas_plan_args args = plan_args(dtype, cu_seqlens_q, batch, heads_q, heads_kv, head_dim, causal);
    args.cu_seqlens_k = cu_seqlens_k;
    return args;
}

// A paged cache of num_pages pages of page_size rows; page_ids: the host page table.
inline fas_plan_args paged_plan_args(fas_dtype dtype, const int32_t* cu_seqlens_q, const int32_t* kv_lengths,
                                     int batch, int heads_q, int heads_kv, int head_dim, bool causal, int page_size,
                                     int num_pages, const int32_t* page_ids) {
    fas_plan_args args = plan_args(dtype, cu_seqlens_q, batch, heads_q, heads_kv, head_dim, causal);
    args.kv_layout = FAS_KV_PAGED;
    args.kv_lengths = kv_lengths;
    args.page_size = page_size;
    args.num_pages = num_pages;
    args.page_indices_host = page_ids;
    return args;
}

// A run's arguments: the tensors every run passes and its stream; the rest (LSE, page table,
// descales) as fas_plan_run_args_init leaves it.
inline fas_plan_run_args plan_run_args(const void* q, const void* k, const void* v, void* out, cudaStream_t stream) {
    fas_plan_run_args args;
    fas_plan_run_args_init(&args);
    args.q = q;
    args.k = k;
    args.v = v;
    args.out = out;
    args.stream = stream;
    return args;
}

// fas_fwd's arguments: the tensors, the batch's shape and mask and the stream; the rest (LSE,
// offsets, strides, workspace) as fas_fwd_args_init leaves it.
inline fas_fwd_args fwd_args(fas_dtype dtype, const void* q, const void* k, const void* v, void* out, int batch,
                             int max_seqlen_q, int max_seqlen_k, int heads_q, int heads_kv, int head_dim, bool causal,
                             cudaStream_t stream) {
    fas_fwd_args args;
    fas_fwd_args_init(&args);
    args.dtype = dtype;
    args.q = q;
    args.k = k;
    args.v = v;
    args.out = out;
    args.batch_size = batch;
    args.max_seqlen_q = max_seqlen_q;
    args.max_seqlen_k = max_seqlen_k;
    args.num_heads_q = heads_q;
    args.num_heads_k = heads_kv;
    args.head_dim = head_dim;
    args.causal = causal ? 1 : 0;
    args.stream = stream;
    return args;
}

// ---------------------------------------------------------------------------------------------
// What the library and the device offer.

// Whether this build lists a kernel of `family` (fas_kernel_info.family) for the case.
inline bool has_kernel(const char* family, fas_dtype dtype, int head_dim, bool causal) {
    for (int index = 0; index < fas_num_kernels(); ++index) {
        fas_kernel_info info;
        if (fas_get_kernel_info(index, &info) == FAS_SUCCESS && std::strcmp(info.family, family) == 0 &&
            info.dtype == dtype && info.head_dim == head_dim && (info.causal != 0) == causal) {
            return true;
        }
    }
    return false;
}

// Whether the library plans the decode kernel's stream shape on this card (paged.h: the card's
// DRAM moves at least 15 bytes per SM per SM clock, as the H200 does and the H100 does not).
inline bool stream_card() {
    int device = 0, sms = 0, sm_khz = 0, mem_khz = 0, bus_bits = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    CUDA_CHECK(cudaDeviceGetAttribute(&sm_khz, cudaDevAttrClockRate, device));
    CUDA_CHECK(cudaDeviceGetAttribute(&mem_khz, cudaDevAttrMemoryClockRate, device));
    CUDA_CHECK(cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, device));
    return 2.0 * mem_khz * (bus_bits / 8.0) / (static_cast<double>(sms) * sm_khz) >= 15.0;
}

inline int ceil_div(int a, int b) { return (a + b - 1) / b; }

// Keys per sequence of a fas_fwd call that the key split on SM90 takes from FA2's split-KV kernel
// as well (the header: batch * queries * keys * heads_q * head_dim >= 2^32), 9000 at least (four
// 2048-key chunks before the last on a 132-SM card).
inline int key_split_keys(int batch, int queries, int heads_q, int head_dim) {
    const int64_t per_key = static_cast<int64_t>(batch) * queries * heads_q * head_dim;
    return static_cast<int>(std::max<int64_t>(9000, ((int64_t{1} << 32) + per_key - 1) / per_key));
}

// Page ids for a batch: a shuffled choice of `total` distinct pages out of num_pages.
inline std::vector<int32_t> shuffled_pages(int total, int num_pages, std::mt19937_64& rng) {
    std::vector<int32_t> ids(num_pages);
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);
    ids.resize(total);
    return ids;
}

// Key counts for many sequences, spread over 1 .. most without a pattern a schedule could align to.
inline std::vector<int> spread_lengths(int n, int most) {
    std::vector<int> k(n);
    for (int i = 0; i < n; ++i) k[i] = 1 + (i * 523) % most;
    return k;
}

// ---------------------------------------------------------------------------------------------
// Numerics (numerics.cpp): round-to-nearest-even conversions between float and the 16-bit
// dtypes and FP8 e4m3 (OCP: no infinities, max 448, 0x7f / 0xff are NaN; conversion saturates
// to +-448 as the device's cvt.rn.satfinite does), and random inputs already rounded.

constexpr uint16_t kPoisonBits = 0xFFFF;  // NaN in both fp16 and bf16
constexpr float kE4m3Max = 448.f;
constexpr uint8_t kE4m3Nan = 0x7f;

uint16_t float_to_fp16(float value);
float fp16_to_float(uint16_t half);
uint16_t float_to_bf16(float value);
float bf16_to_float(uint16_t bf16);
uint16_t to_dtype_bits(fas_dtype dtype, float value);
float from_dtype_bits(fas_dtype dtype, uint16_t bits);
const char* dtype_name(fas_dtype dtype);
float e4m3_to_float(uint8_t bits);
uint8_t float_to_e4m3(float value);

// Random inputs already rounded to the dtype: bits for the device, floats for the reference.
struct RoundedTensor {
    std::vector<uint16_t> bits;  // [rows, heads, head_dim], contiguous
    std::vector<float> values;
};

// Random e4m3 inputs with one descale factor per head: a head's values are drawn at its own
// magnitude and quantized against its own maximum; values = stored e4m3 value * descale.
struct QuantizedTensor {
    std::vector<uint8_t> bits;  // [rows, heads, head_dim], contiguous
    std::vector<float> values;
    std::vector<float> descale;  // [heads]
};

RoundedTensor random_tensor(fas_dtype dtype, size_t elements, std::mt19937_64& rng);
QuantizedTensor random_e4m3_tensor(size_t rows, int heads, int head_dim, std::mt19937_64& rng);

// K and V of `rows` cache rows: rounded to dtype, or (fp8) e4m3 with per-head descales, whose
// reference values (k.values, v.values) are the stored values x descale. Drawn k before v.
struct CacheTensors {
    RoundedTensor k, v;
    QuantizedTensor k8, v8;  // fp8 only
};
CacheTensors random_caches(fas_dtype dtype, bool fp8, size_t rows, int heads, int head_dim, std::mt19937_64& rng);

// Copies [rows, row_elements] to device rows of row_stride elements; the padding is poison.
template <typename Bits>
std::vector<Bits> with_row_stride(const std::vector<Bits>& packed, size_t rows, size_t row_elements, size_t row_stride,
                                  Bits poison) {
    std::vector<Bits> strided(rows * row_stride, poison);
    for (size_t row = 0; row < rows; ++row) {
        std::copy_n(packed.begin() + row * row_elements, row_elements, strided.begin() + row * row_stride);
    }
    return strided;
}

// ---------------------------------------------------------------------------------------------
// Cases and their outcome

struct AttentionCase {
    std::string config;
    fas_dtype dtype;
    int heads_q;
    int heads_kv;
    int head_dim;
    bool causal;
    bool varlen;                  // false: batch layout, all sequences of equal length
    std::vector<int> seqlens_q;
    std::vector<int> seqlens_k;
    int row_padding = 0;          // extra elements per token row, to exercise row strides
    bool pass_workspace = true;   // false: let the library allocate its own scratch
    bool expect_split_kv = false; // the split-KV kernel must be chosen (checked via workspace size)
    // fas_fwd, batch layout, on a plan of the SM90 or paged family (whose memory is the library's):
    // without the LSE fas_fwd_workspace_size must report 0 (FA2 would ask for its LSE scratch);
    // with it (forward_plan_lse), batch x queries x heads floats for the plan's token-major LSE
    // (FA2's plain kernel would ask for nothing, its split kernel for its accumulators)
    bool expect_forward_plan = false;
    bool forward_plan_lse = false;
    // fas_fwd, batch layout, few query tiles over long keys: the keys split into chunks and the
    // partial results merged (SM90, or FA2's split kernel where built): fas_fwd_workspace_size must
    // hold at least two partial outputs. The LSE only with forward_plan_lse.
    bool expect_key_split = false;
    // > 0: the same-precision result the output is held to (within 2x of its error) rounds the
    // partial outputs of this many key chunks to the dtype before merging them, as a key split does
    // (api/fwd_split.h); the bound depends on how many partials are rounded, not where they are cut.
    int same_precision_chunks = 0;
    bool use_plan = false;        // varlen only: fas_plan_create once, fas_plan_run plan_runs times
    int plan_runs = 1;            // outputs and LSE of every run must equal the first bit for bit
    int expect_family = -1;       // with use_plan: the fas_family the plan must use (-1 = any)
    int expect_kernel_head_dim = 0;  // with use_plan: fas_plan_info.kernel_head_dim must be this (0 = any)
    bool disable_sm90 = false;    // with use_plan: fas_plan_args.disable_sm90
    bool fp8 = false;             // with use_plan: q/k/v in e4m3 with per-head descales; dtype is out's
    // with use_plan: fas_plan_args.use_window and FlashAttention's window_size (-1 = no limit)
    bool use_window = false;
    int window_left = -1;
    int window_right = -1;
    float softcap = 0.f;  // with use_plan: fas_plan_args.softcap (scores become cap * tanh(score / cap))
    int expect_packed = -1;  // with use_plan: fas_plan_info.packed must be this (-1 = any)
    // with use_plan: fas_plan_args.use_sinks and the run's sink logits, one per query head (none if empty)
    std::vector<float> sinks;
    // fas_query_plan_support's (or fas_query_support's) *kernel_head_dim must be this (0 = any)
    int expect_query_head_dim = 0;
};

// Sink logits for `heads` query heads spread over [-2, 8]: from negligible against a row's keys
// to dominating its softmax (a row of 1000 keys sums to about exp(7.4) at random scores).
inline std::vector<float> spread_sinks(int heads) {
    std::vector<float> sinks(heads);
    for (int h = 0; h < heads; ++h) sinks[h] = -2.f + 10.f * static_cast<float>((h * 37) % heads) / heads;
    return sinks;
}

AttentionCase varlen_case(std::string config, fas_dtype dtype, int heads_q, int heads_kv, int head_dim, bool causal,
                          std::vector<int> seqlens);

struct CaseOutcome {
    bool passed;
    std::string detail;
};

struct Tally {
    int passed = 0;
    int failed = 0;
    int skipped = 0;
};

// Prints "[PASS] label | detail" (or FAIL) and counts it.
void report(const std::string& label, const CaseOutcome& outcome, Tally* tally);

// Runs a case body; an exception (a failed CUDA call) becomes a failed outcome.
template <typename Body>
CaseOutcome guarded(Body&& body) {
    try {
        return body();
    } catch (const std::exception& error) {
        return {false, error.what()};
    }
}

// ---------------------------------------------------------------------------------------------
// Entry points of the concern files, called by the driver (driver.cpp).

// default_cases.cpp: the default case list for one dtype (cases this build cannot serve counted
// as skipped in tally).
std::vector<AttentionCase> default_cases(fas_dtype dtype, bool quick, Tally* tally);

// cases.cpp: runs one attention case (or reports why the build cannot serve it) and prints it.
void report_attention_case(const AttentionCase& c, uint64_t seed, cudaStream_t stream, Tally* tally);

// workspace_bounds.cpp: fas_fwd scratch stays inside the workspace it was given.
void report_workspace_bounds_cases(fas_dtype dtype, cudaStream_t stream, Tally* tally);
// fwd_capture.cpp: a decode-shaped fas_fwd eager and captured into graphs (paged family both).
void report_fwd_capture_cases(fas_dtype dtype, cudaStream_t stream, Tally* tally);

// misuse.cpp: invalid arguments are refused; shared buffers without shared bytes are accepted.
// Refused means: FAS_ERROR_INVALID_ARGUMENT, a message, and no CUDA error left pending.
CaseOutcome refusal_outcome(fas_status status, const std::string& message, bool show_expected);
void report_fwd_misuse_cases(fas_dtype dtype, cudaStream_t stream, Tally* tally);
void report_plan_misuse_cases(fas_dtype dtype, cudaStream_t stream, Tally* tally);

// paged.cpp: plans over a paged KV cache (decode, speculative decoding, prefill over pages).
void report_paged_cases(fas_dtype dtype, bool quick, cudaStream_t stream, Tally* tally);
// paged_misuse.cpp: paged plans and runs given bad arguments, refused (paged.cpp calls it).
void report_paged_misuse_cases(fas_dtype dtype, cudaStream_t stream, Tally* tally);
// Device-length plans and their misuse (device_lengths.cpp; run with the paged group).
void report_device_length_cases(fas_dtype dtype, bool quick, cudaStream_t stream, Tally* tally);

// append.cpp: fas_kv_append into paged caches (then attended), e4m3 caches, invalid slots, misuse.
void report_append_cases(fas_dtype dtype, bool quick, cudaStream_t stream, Tally* tally);

// merge.cpp: fas_merge_states against a CPU merge, a prefix + suffix cascade of plans, misuse.
void report_merge_cases(fas_dtype dtype, bool quick, cudaStream_t stream, Tally* tally);

// packed.cpp: the packed-plan cases (short sequences sharing query tiles), where such a kernel is built.
void add_packed_cases(fas_dtype dtype, bool quick, std::vector<AttentionCase>* cases);

// churn.cpp: plans made and released per batch on two streams without synchronizing.
void report_plan_churn_case(fas_dtype dtype, cudaStream_t stream, Tally* tally);

}  // namespace gpu_test

#endif  // GPU_TEST_H
