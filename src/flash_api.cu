// C API of libflash_attn_standalone: argument validation, kernel selection and the launch of the
// FA2 forward kernels compiled into this build. Host code only; the kernels live in other
// translation units, listed by the build-generated kernel_registry.inc.
#include "flash_attn_standalone.h"

#include <cutlass/numeric_types.h>

#include "fas_cuda_error.h"
#include "flash.h"
#include "namespace_config.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <exception>
#include <map>
#include <mutex>
#include <new>
#include <sstream>
#include <string>

#if !defined(FAS_VERSION_MAJOR) || !defined(FAS_VERSION_MINOR) || !defined(FAS_VERSION_PATCH)
#error "FAS_VERSION_MAJOR, FAS_VERSION_MINOR and FAS_VERSION_PATCH must be defined by the build (-D)"
#endif

// Declarations of the kernel entry points that the other translation units define: an explicit
// specialization of run_mha_fwd_ per plain kernel, an explicit instantiation of
// run_mha_fwd_splitkv_dispatch per split-KV kernel.
namespace FLASH_NAMESPACE {
#define FAS_FA2_FWD(ElementType, DtypeEnum, HeadDim, IsCausal) \
    template <>                                                \
    void run_mha_fwd_<ElementType, HeadDim, IsCausal>(Flash_fwd_params&, cudaStream_t);
#define FAS_FA2_FWD_SPLIT(ElementType, DtypeEnum, HeadDim, IsCausal)                 \
    extern template void run_mha_fwd_splitkv_dispatch<ElementType, HeadDim, IsCausal>( \
        Flash_fwd_params&, cudaStream_t);
#include "kernel_registry.inc"
#undef FAS_FA2_FWD
#undef FAS_FA2_FWD_SPLIT
}  // namespace FLASH_NAMESPACE

namespace {

using Flash_fwd_params = FLASH_NAMESPACE::Flash_fwd_params;
using LaunchFn = void (*)(Flash_fwd_params&, cudaStream_t);

struct KernelEntry {
    fas_dtype dtype;
    int head_dim;
    bool causal;
    bool split_kv;
    LaunchFn launch;
};

#define FAS_FA2_FWD(ElementType, DtypeEnum, HeadDim, IsCausal) \
    {DtypeEnum, HeadDim, IsCausal, false, &FLASH_NAMESPACE::run_mha_fwd_<ElementType, HeadDim, IsCausal>},
#define FAS_FA2_FWD_SPLIT(ElementType, DtypeEnum, HeadDim, IsCausal) \
    {DtypeEnum, HeadDim, IsCausal, true,                             \
     &FLASH_NAMESPACE::run_mha_fwd_splitkv_dispatch<ElementType, HeadDim, IsCausal>},
const KernelEntry kKernels[] = {
#include "kernel_registry.inc"
};
#undef FAS_FA2_FWD
#undef FAS_FA2_FWD_SPLIT

constexpr int kNumKernels = static_cast<int>(sizeof(kKernels) / sizeof(kKernels[0]));

constexpr int kMaxHeadDim = 256;
constexpr int kMaxSplits = 128;            // largest split count FA2's combine kernel handles
constexpr int kSplitBlockM = 64;           // query rows per CTA of the split-KV kernel
constexpr int kMaxGridDimYZ = 65535;       // CUDA limit; FA2 puts batch and heads on grid y/z
constexpr size_t kWorkspaceAlignment = 256;
constexpr float kLog2e = 1.44269504088896340736f;
constexpr const char* kFamily = "fa2";

#define FAS_STRINGIFY_VALUE(x) #x
#define FAS_STRINGIFY(x) FAS_STRINGIFY_VALUE(x)
constexpr const char* kVersionString =
    FAS_STRINGIFY(FAS_VERSION_MAJOR) "." FAS_STRINGIFY(FAS_VERSION_MINOR) "." FAS_STRINGIFY(FAS_VERSION_PATCH);

// ---------------------------------------------------------------------------------------------
// Error reporting

thread_local std::string t_last_error;

template <typename... Parts>
std::string concat(const Parts&... parts) {
    std::ostringstream stream;
    (stream << ... << parts);
    return stream.str();
}

fas_status fail(fas_status status, const std::string& message) noexcept {
    try {
        t_last_error = message;
    } catch (...) {
        // Out of host memory while storing the message: keep the status, lose the text.
    }
    return status;
}

// Reports a failed CUDA call made by the library itself and consumes the (non-sticky) error it
// left in the thread's CUDA error state, so the caller's later cudaGetLastError is not blamed.
fas_status fail_cuda(cudaError_t error, const std::string& what) noexcept {
    cudaGetLastError();
    return fail(FAS_ERROR_CUDA,
                concat(what, " failed: ", cudaGetErrorName(error), " (", cudaGetErrorString(error), ")"));
}

// Runs an API body, turning every escaping exception into a status at the C boundary.
template <typename Body>
fas_status guarded(Body&& body) noexcept {
    try {
        return body();
    } catch (const fas_detail::cuda_error& error) {
        cudaGetLastError();
        return fail(FAS_ERROR_CUDA, concat("CUDA error while launching the FA2 kernel: ", error.what()));
    } catch (const std::bad_alloc&) {
        return fail(FAS_ERROR_INTERNAL, "out of host memory");
    } catch (const std::exception& error) {
        return fail(FAS_ERROR_INTERNAL, concat("internal error: ", error.what()));
    } catch (...) {
        return fail(FAS_ERROR_INTERNAL, "internal error: unknown exception");
    }
}

const char* dtype_name(fas_dtype dtype) { return dtype == FAS_DTYPE_BF16 ? "bf16" : "fp16"; }

bool is_valid_dtype(int dtype) { return dtype == FAS_DTYPE_FP16 || dtype == FAS_DTYPE_BF16; }

bool is_aligned(const void* pointer, size_t alignment) {
    return reinterpret_cast<uintptr_t>(pointer) % alignment == 0;
}

size_t align_up(size_t value, size_t alignment) { return (value + alignment - 1) / alignment * alignment; }

int round_up(int value, int multiple) { return (value + multiple - 1) / multiple * multiple; }

// ---------------------------------------------------------------------------------------------
// Kernel registry queries

// Head dims that serve a request must match exactly when the build compiled FA2 without the
// uneven-K code path (then the kernel cannot mask the extra head-dim columns).
bool kernel_serves_head_dim(int kernel_head_dim, int head_dim) {
#if defined(FLASHATTENTION_DISABLE_UNEVEN_K)
    return kernel_head_dim == head_dim;
#else
    return kernel_head_dim >= head_dim;
#endif
}

const KernelEntry* find_plain_kernel(fas_dtype dtype, int head_dim, bool causal) {
    const KernelEntry* best = nullptr;
    for (const KernelEntry& entry : kKernels) {
        if (entry.split_kv || entry.dtype != dtype || entry.causal != causal ||
            !kernel_serves_head_dim(entry.head_dim, head_dim)) {
            continue;
        }
        if (best == nullptr || entry.head_dim < best->head_dim) best = &entry;
    }
    return best;
}

const KernelEntry* find_split_kernel(fas_dtype dtype, int kernel_head_dim, bool causal) {
    for (const KernelEntry& entry : kKernels) {
        if (entry.split_kv && entry.dtype == dtype && entry.causal == causal &&
            entry.head_dim == kernel_head_dim) {
            return &entry;
        }
    }
    return nullptr;
}

std::string built_head_dims(fas_dtype dtype, bool causal) {
    std::string list;
    for (const KernelEntry& entry : kKernels) {
        if (entry.split_kv || entry.dtype != dtype || entry.causal != causal) continue;
        list += concat(list.empty() ? "" : ", ", entry.head_dim);
    }
    return list.empty() ? "none" : list;
}

fas_status validate_head_dim(int head_dim) {
    if (head_dim < 8 || head_dim > kMaxHeadDim || head_dim % 8 != 0) {
        return fail(FAS_ERROR_INVALID_ARGUMENT,
                    concat("head_dim ", head_dim, " is not supported: FA2 needs a multiple of 8 in [8, ",
                           kMaxHeadDim, "]; pad the head dimension with zeros up to a multiple of 8"));
    }
    return FAS_SUCCESS;
}

fas_status select_plain_kernel(fas_dtype dtype, int head_dim, bool causal, const KernelEntry** kernel) {
    *kernel = find_plain_kernel(dtype, head_dim, causal);
    if (*kernel == nullptr) {
        return fail(FAS_ERROR_NOT_BUILT,
                    concat("no ", dtype_name(dtype), causal ? " causal" : " non-causal",
                           " kernel for head_dim ", head_dim, ": this build has ", dtype_name(dtype),
                           causal ? " causal" : " non-causal", " head dims ", built_head_dims(dtype, causal),
                           "; rebuild the library with a kernel of head dim >= ", head_dim,
                           " for this dtype and variant, or pad head_dim to a built one"));
    }
    return FAS_SUCCESS;
}

// ---------------------------------------------------------------------------------------------
// Device properties

struct DeviceProps {
    int cc_major;
    int cc_minor;
    int sm_count;
};

std::mutex g_device_props_mutex;
std::map<int, DeviceProps> g_device_props;

fas_status get_device_props(int device, DeviceProps* props) {
    std::lock_guard<std::mutex> lock(g_device_props_mutex);
    const auto cached = g_device_props.find(device);
    if (cached != g_device_props.end()) {
        *props = cached->second;
        return FAS_SUCCESS;
    }
    int device_count = 0;
    cudaError_t error = cudaGetDeviceCount(&device_count);
    if (error != cudaSuccess) return fail_cuda(error, "cudaGetDeviceCount (is a CUDA driver and GPU present?)");
    if (device < 0 || device >= device_count) {
        return fail(FAS_ERROR_INVALID_ARGUMENT,
                    concat("CUDA device ", device, " does not exist; ", device_count,
                           " device(s) are visible (check CUDA_VISIBLE_DEVICES)"));
    }
    DeviceProps queried{};
    const struct {
        int* value;
        cudaDeviceAttr attribute;
        const char* name;
    } queries[] = {
        {&queried.cc_major, cudaDevAttrComputeCapabilityMajor, "compute capability major"},
        {&queried.cc_minor, cudaDevAttrComputeCapabilityMinor, "compute capability minor"},
        {&queried.sm_count, cudaDevAttrMultiProcessorCount, "multiprocessor count"},
    };
    for (const auto& query : queries) {
        error = cudaDeviceGetAttribute(query.value, query.attribute, device);
        if (error != cudaSuccess) {
            return fail_cuda(error, concat("cudaDeviceGetAttribute(", query.name, ", device ", device, ")"));
        }
    }
    g_device_props.emplace(device, queried);
    *props = queried;
    return FAS_SUCCESS;
}

bool device_runs_this_build(const DeviceProps& props) {
    if (props.cc_major == 9 && props.cc_minor == 0) return true;
#if defined(FAS_BUILT_SM80) && FAS_BUILT_SM80
    if (props.cc_major == 8) return true;
#endif
    return false;
}

fas_status check_device(int device, DeviceProps* props) {
    const fas_status status = get_device_props(device, props);
    if (status != FAS_SUCCESS) return status;
    if (device_runs_this_build(*props)) return FAS_SUCCESS;
    std::string device_name;
    cudaDeviceProp device_properties;
    if (cudaGetDeviceProperties(&device_properties, device) == cudaSuccess) {
        device_name = concat(" (", device_properties.name, ")");
    } else {
        cudaGetLastError();
    }
#if defined(FAS_BUILT_SM80) && FAS_BUILT_SM80
    const char* supported = "compute capability 9.0 (sm_90a: H100/H200/GH200) and 8.x (sm_80 code)";
#else
    const char* supported =
        "only compute capability 9.0 (sm_90a: H100/H200/GH200); rebuild with sm_80 kernels "
        "(FAS_BUILT_SM80=1) to run on 8.x GPUs";
#endif
    return fail(FAS_ERROR_UNSUPPORTED_DEVICE,
                concat("CUDA device ", device, device_name, " has compute capability ", props->cc_major, ".",
                       props->cc_minor, "; this build of flash_attn_standalone supports ", supported));
}

// Must run before any FA2 host code: FA2's hardware_info.h calls exit(1) when cudaGetDevice
// fails, so the current device has to be known to be usable first.
fas_status check_current_device(DeviceProps* props) {
    int device = 0;
    const cudaError_t error = cudaGetDevice(&device);
    if (error != cudaSuccess) return fail_cuda(error, "cudaGetDevice (is a CUDA driver and GPU present?)");
    return check_device(device, props);
}

// ---------------------------------------------------------------------------------------------
// Validation

// Copies the caller's struct (only the fields this version knows) and checks every field.
// On success *resolved has default row strides and softmax scale filled in.
fas_status validate_args(const fas_fwd_args* user_args, fas_fwd_args* resolved) {
    if (user_args == nullptr) {
        return fail(FAS_ERROR_INVALID_ARGUMENT, "args is NULL; pass a fas_fwd_args set up with fas_fwd_args_init()");
    }
    if (user_args->struct_size < sizeof(fas_fwd_args)) {
        return fail(FAS_ERROR_INVALID_ARGUMENT,
                    concat("args->struct_size is ", user_args->struct_size, " but this library needs at least ",
                           sizeof(fas_fwd_args), " (sizeof(fas_fwd_args)); initialise the struct with "
                           "fas_fwd_args_init() or FAS_FWD_ARGS_INIT"));
    }
    std::memcpy(resolved, user_args, sizeof(fas_fwd_args));
    fas_fwd_args& args = *resolved;

    if (!is_valid_dtype(args.dtype)) {
        return fail(FAS_ERROR_INVALID_ARGUMENT,
                    concat("dtype ", static_cast<int>(args.dtype), " is not a fas_dtype; use FAS_DTYPE_FP16 or FAS_DTYPE_BF16"));
    }
    const struct {
        const void* pointer;
        const char* name;
    } tensors[] = {{args.q, "q"}, {args.k, "k"}, {args.v, "v"}, {args.out, "out"}};
    for (const auto& tensor : tensors) {
        if (tensor.pointer == nullptr) {
            return fail(FAS_ERROR_INVALID_ARGUMENT, concat(tensor.name, " is NULL; pass a device pointer"));
        }
        if (!is_aligned(tensor.pointer, 16)) {
            return fail(FAS_ERROR_INVALID_ARGUMENT,
                        concat(tensor.name, " (", tensor.pointer, ") is not 16-byte aligned; FA2 loads rows with "
                               "16-byte vector accesses, so pass an aligned pointer (cudaMalloc returns 256-byte "
                               "aligned memory; offsets must be multiples of 8 elements)"));
        }
    }
    if (args.softmax_lse != nullptr && !is_aligned(args.softmax_lse, sizeof(float))) {
        return fail(FAS_ERROR_INVALID_ARGUMENT, "softmax_lse is not 4-byte aligned; pass a float-aligned device pointer");
    }
    if ((args.cu_seqlens_q == nullptr) != (args.cu_seqlens_k == nullptr)) {
        return fail(FAS_ERROR_INVALID_ARGUMENT,
                    concat("only ", args.cu_seqlens_q != nullptr ? "cu_seqlens_q" : "cu_seqlens_k",
                           " is set; set both cu_seqlens_q and cu_seqlens_k for the varlen layout, or neither for "
                           "the batch layout"));
    }
    const bool varlen = args.cu_seqlens_q != nullptr;
    if (varlen && (!is_aligned(args.cu_seqlens_q, sizeof(int32_t)) || !is_aligned(args.cu_seqlens_k, sizeof(int32_t)))) {
        return fail(FAS_ERROR_INVALID_ARGUMENT, "cu_seqlens_q / cu_seqlens_k must be 4-byte aligned int32 device arrays");
    }
    if (args.batch_size <= 0 || args.batch_size > kMaxGridDimYZ) {
        return fail(FAS_ERROR_INVALID_ARGUMENT,
                    concat("batch_size ", args.batch_size, " is out of range; it must be in [1, ", kMaxGridDimYZ,
                           "] (CUDA grid limit); split larger batches into several calls"));
    }
    if (args.max_seqlen_q <= 0 || args.max_seqlen_k <= 0) {
        return fail(FAS_ERROR_INVALID_ARGUMENT,
                    concat("max_seqlen_q (", args.max_seqlen_q, ") and max_seqlen_k (", args.max_seqlen_k,
                           ") must be > 0", varlen ? " (upper bounds of the sequence lengths)" : ""));
    }
    if (args.num_heads_q <= 0 || args.num_heads_k <= 0 || args.num_heads_q > kMaxGridDimYZ) {
        return fail(FAS_ERROR_INVALID_ARGUMENT,
                    concat("num_heads_q (", args.num_heads_q, ") and num_heads_k (", args.num_heads_k,
                           ") must be > 0 and num_heads_q <= ", kMaxGridDimYZ));
    }
    if (args.num_heads_q % args.num_heads_k != 0) {
        return fail(FAS_ERROR_INVALID_ARGUMENT,
                    concat("num_heads_q (", args.num_heads_q, ") must be a multiple of num_heads_k (",
                           args.num_heads_k, ") for GQA/MQA"));
    }
    const fas_status head_dim_status = validate_head_dim(args.head_dim);
    if (head_dim_status != FAS_SUCCESS) return head_dim_status;

    const struct {
        int64_t* stride;
        int num_heads;
        const char* name;
    } strides[] = {
        {&args.q_row_stride, args.num_heads_q, "q_row_stride"},
        {&args.k_row_stride, args.num_heads_k, "k_row_stride"},
        {&args.v_row_stride, args.num_heads_k, "v_row_stride"},
        {&args.out_row_stride, args.num_heads_q, "out_row_stride"},
    };
    for (const auto& entry : strides) {
        const int64_t row_elements = static_cast<int64_t>(entry.num_heads) * args.head_dim;
        if (*entry.stride == 0) *entry.stride = row_elements;
        if (*entry.stride < row_elements || *entry.stride % 8 != 0) {
            return fail(FAS_ERROR_INVALID_ARGUMENT,
                        concat(entry.name, " is ", *entry.stride, " elements; it must be 0 (contiguous) or a multiple "
                               "of 8 that is >= num_heads * head_dim = ", row_elements));
        }
    }

    if (!std::isfinite(args.softmax_scale) || args.softmax_scale < 0.f) {
        return fail(FAS_ERROR_INVALID_ARGUMENT,
                    concat("softmax_scale ", args.softmax_scale, " is invalid; pass a finite value > 0, or 0 for "
                           "1/sqrt(head_dim)"));
    }
    if (args.softmax_scale == 0.f) args.softmax_scale = 1.f / std::sqrt(static_cast<float>(args.head_dim));

    if (args.workspace != nullptr && !is_aligned(args.workspace, 16)) {
        return fail(FAS_ERROR_INVALID_ARGUMENT, "workspace is not 16-byte aligned; pass memory from cudaMalloc");
    }

    // FA2 indexes the LSE and sizes the combine grid with 32-bit ints.
    const int64_t padded_q_rows = static_cast<int64_t>(args.batch_size) * args.max_seqlen_q;
    if (padded_q_rows * args.num_heads_q > INT_MAX) {
        return fail(FAS_ERROR_INVALID_ARGUMENT,
                    concat("batch_size * max_seqlen_q * num_heads_q = ", padded_q_rows * args.num_heads_q,
                           " exceeds the 32-bit indexing of FA2 (", INT_MAX, "); split the call"));
    }
    if (varlen) {
        if (args.total_q < 0 || (args.softmax_lse != nullptr && args.total_q == 0)) {
            return fail(FAS_ERROR_INVALID_ARGUMENT,
                        concat("total_q is ", args.total_q, "; in the varlen layout set it to the number of rows of q "
                               "(cu_seqlens_q[batch_size]) when softmax_lse is given: it is the head stride of the "
                               "[num_heads_q, total_q] LSE"));
        }
        if (static_cast<int64_t>(args.total_q) * args.num_heads_q > INT_MAX) {
            return fail(FAS_ERROR_INVALID_ARGUMENT,
                        concat("total_q * num_heads_q = ", static_cast<int64_t>(args.total_q) * args.num_heads_q,
                               " exceeds the 32-bit indexing of FA2's LSE (", INT_MAX, "); split the call"));
        }
    }
    return FAS_SUCCESS;
}

// ---------------------------------------------------------------------------------------------
// Planning: kernel choice, split count and scratch layout

struct LaunchPlan {
    const KernelEntry* kernel;  // the kernel that runs: plain, or split-KV when num_splits > 1
    int num_splits;
    int lse_rows;               // varlen: head stride of the LSE; batch: batch_size * max_seqlen_q
    // Byte offsets into the scratch block; SIZE_MAX = not needed.
    size_t lse_scratch_offset;
    size_t lse_accum_offset;
    size_t out_accum_offset;
    size_t scratch_bytes;
};

// Split count for the split-KV kernel, chosen for SM occupancy: with few (batch, head, m-block)
// tiles the GPU idles, so the key range is divided among more CTAs. Takes the smallest count
// whose wave efficiency is within 85% of the best, since every split costs extra accumulator
// traffic and a combine pass.
int choose_num_splits(int64_t tiles, int ctas_per_wave, int num_n_blocks) {
    if (static_cast<double>(tiles) >= 0.8 * ctas_per_wave) return 1;
    const int max_splits = std::min({kMaxSplits, ctas_per_wave, num_n_blocks});
    const auto blocks_per_split = [&](int splits) { return (num_n_blocks + splits - 1) / splits; };
    // A count that leaves blocks_per_split unchanged from count - 1 only adds empty splits.
    const auto is_distinct = [&](int splits) {
        return splits == 1 || blocks_per_split(splits) != blocks_per_split(splits - 1);
    };
    const auto efficiency = [&](int splits) {
        const double waves = static_cast<double>(tiles) * splits / ctas_per_wave;
        return waves / std::ceil(waves);
    };
    double best_efficiency = 0.0;
    for (int splits = 1; splits <= max_splits; ++splits) {
        if (is_distinct(splits)) best_efficiency = std::max(best_efficiency, efficiency(splits));
    }
    for (int splits = 1; splits <= max_splits; ++splits) {
        if (is_distinct(splits) && efficiency(splits) >= 0.85 * best_efficiency) return splits;
    }
    return 1;
}

void plan_launch(const fas_fwd_args& args, const KernelEntry* plain_kernel, const DeviceProps& device,
                 LaunchPlan* plan) {
    const bool causal = args.causal != 0;
    const bool varlen = args.cu_seqlens_q != nullptr;
    plan->kernel = plain_kernel;
    plan->num_splits = 1;
    const KernelEntry* split_kernel = varlen ? nullptr : find_split_kernel(args.dtype, plain_kernel->head_dim, causal);
    const int64_t batch_heads = static_cast<int64_t>(args.batch_size) * args.num_heads_q;
    // The split kernel puts batch * heads on grid z.
    if (split_kernel != nullptr && batch_heads <= kMaxGridDimYZ) {
        const int kernel_head_dim = split_kernel->head_dim;  // block_n must match FA2's dispatch
        const int block_n = kernel_head_dim <= 64 ? 256 : (kernel_head_dim <= 128 ? 128 : 64);
        const int num_n_blocks = (args.max_seqlen_k + block_n - 1) / block_n;
        const int num_m_blocks = (args.max_seqlen_q + kSplitBlockM - 1) / kSplitBlockM;
        // Two 128-thread CTAs fit on an SM.
        const int splits = choose_num_splits(batch_heads * num_m_blocks, 2 * device.sm_count, num_n_blocks);
        if (splits > 1) {
            plan->kernel = split_kernel;
            plan->num_splits = splits;
        }
    }

    plan->lse_rows = varlen && args.total_q > 0 ? args.total_q : args.batch_size * args.max_seqlen_q;
    size_t bytes = 0;
    const auto reserve = [&](size_t size) {
        const size_t offset = bytes;
        bytes = align_up(bytes + size, kWorkspaceAlignment);
        return offset;
    };
    plan->lse_scratch_offset = SIZE_MAX;
    plan->lse_accum_offset = SIZE_MAX;
    plan->out_accum_offset = SIZE_MAX;
    if (args.softmax_lse == nullptr) {
        plan->lse_scratch_offset = reserve(sizeof(float) * args.num_heads_q * static_cast<size_t>(plan->lse_rows));
    }
    if (plan->num_splits > 1) {
        const size_t accum_rows = static_cast<size_t>(plan->num_splits) * batch_heads * args.max_seqlen_q;
        plan->lse_accum_offset = reserve(sizeof(float) * accum_rows);
        plan->out_accum_offset = reserve(sizeof(float) * accum_rows * plan->kernel->head_dim);
    }
    plan->scratch_bytes = bytes;
}

void fill_params(const fas_fwd_args& args, const LaunchPlan& plan, char* scratch, Flash_fwd_params* params_out) {
    const bool varlen = args.cu_seqlens_q != nullptr;
    Flash_fwd_params params = {};
    params.is_bf16 = args.dtype == FAS_DTYPE_BF16;

    params.q_ptr = const_cast<void*>(args.q);
    params.k_ptr = const_cast<void*>(args.k);
    params.v_ptr = const_cast<void*>(args.v);
    params.o_ptr = args.out;
    params.q_row_stride = args.q_row_stride;
    params.k_row_stride = args.k_row_stride;
    params.v_row_stride = args.v_row_stride;
    params.o_row_stride = args.out_row_stride;
    params.q_head_stride = args.head_dim;
    params.k_head_stride = args.head_dim;
    params.v_head_stride = args.head_dim;
    params.o_head_stride = args.head_dim;
    if (!varlen) {  // varlen kernels address rows through cu_seqlens instead
        params.q_batch_stride = args.max_seqlen_q * args.q_row_stride;
        params.k_batch_stride = args.max_seqlen_k * args.k_row_stride;
        params.v_batch_stride = args.max_seqlen_k * args.v_row_stride;
        params.o_batch_stride = args.max_seqlen_q * args.out_row_stride;
    }
    params.cu_seqlens_q = const_cast<int*>(args.cu_seqlens_q);
    params.cu_seqlens_k = const_cast<int*>(args.cu_seqlens_k);
    params.is_seqlens_k_cumulative = true;

    params.h = args.num_heads_q;
    params.h_k = args.num_heads_k;
    params.h_h_k_ratio = args.num_heads_q / args.num_heads_k;
    params.b = args.batch_size;
    params.seqlen_q = args.max_seqlen_q;
    params.seqlen_k = args.max_seqlen_k;
    params.seqlen_q_rounded = round_up(args.max_seqlen_q, 128);
    params.seqlen_k_rounded = round_up(args.max_seqlen_k, 128);
    params.d = args.head_dim;
    params.d_rounded = plan.kernel->head_dim;
    params.total_q = plan.lse_rows;

    params.softmax_lse_ptr = args.softmax_lse != nullptr ? static_cast<void*>(args.softmax_lse)
                                                         : static_cast<void*>(scratch + plan.lse_scratch_offset);
    params.unpadded_lse = varlen;
    params.seqlenq_ngroups_swapped = false;

    params.scale_softmax = args.softmax_scale;
    params.scale_softmax_log2 = args.softmax_scale * kLog2e;
    params.softcap = 0.f;
    // No dropout: p_dropout holds the keep probability.
    params.p_dropout = 1.f;
    params.p_dropout_in_uint8_t = 255;
    params.rp_dropout = 1.f;
    params.scale_softmax_rp_dropout = args.softmax_scale;

    params.is_causal = args.causal != 0;
    // FA2 expresses causal as a window reaching all keys on the left and none on the right.
    params.window_size_left = params.is_causal ? args.max_seqlen_k : -1;
    params.window_size_right = params.is_causal ? 0 : -1;

    params.num_splits = plan.num_splits;
    if (plan.num_splits > 1) {
        params.softmax_lseaccum_ptr = scratch + plan.lse_accum_offset;
        params.oaccum_ptr = scratch + plan.out_accum_offset;
    }
    *params_out = params;
}

// Device scratch from cudaMallocAsync, released on the stream when the launch fails; on success
// release() enqueues the free after the kernels and reports its status.
class StreamScratch {
public:
    explicit StreamScratch(cudaStream_t stream) : stream_(stream) {}
    StreamScratch(const StreamScratch&) = delete;
    StreamScratch& operator=(const StreamScratch&) = delete;
    ~StreamScratch() {
        if (pointer_ != nullptr && cudaFreeAsync(pointer_, stream_) != cudaSuccess) cudaGetLastError();
    }

    cudaError_t allocate(size_t bytes) { return cudaMallocAsync(&pointer_, bytes, stream_); }

    cudaError_t release() {
        void* const pointer = pointer_;
        pointer_ = nullptr;
        return pointer != nullptr ? cudaFreeAsync(pointer, stream_) : cudaSuccess;
    }

    char* get() const { return static_cast<char*>(pointer_); }

private:
    cudaStream_t stream_;
    void* pointer_ = nullptr;
};

fas_status validate_and_plan(const fas_fwd_args* user_args, fas_fwd_args* args, LaunchPlan* plan) {
    fas_status status = validate_args(user_args, args);
    if (status != FAS_SUCCESS) return status;
    const KernelEntry* plain_kernel = nullptr;
    status = select_plain_kernel(args->dtype, args->head_dim, args->causal != 0, &plain_kernel);
    if (status != FAS_SUCCESS) return status;
    DeviceProps device{};
    status = check_current_device(&device);
    if (status != FAS_SUCCESS) return status;
    plan_launch(*args, plain_kernel, device, plan);
    return FAS_SUCCESS;
}

fas_status run_forward(const fas_fwd_args* user_args) {
    fas_fwd_args args;
    LaunchPlan plan{};
    fas_status status = validate_and_plan(user_args, &args, &plan);
    if (status != FAS_SUCCESS) return status;

    const cudaError_t pending = cudaPeekAtLastError();
    if (pending != cudaSuccess) {
        return fail(FAS_ERROR_CUDA,
                    concat("a CUDA error from earlier work on this thread is still pending: ", cudaGetErrorName(pending),
                           " (", cudaGetErrorString(pending), "); nothing was launched. Handle it with "
                           "cudaGetLastError() (a sticky error needs a process restart) and call again"));
    }

    StreamScratch allocated(args.stream);
    char* scratch = nullptr;
    if (plan.scratch_bytes > 0) {
        if (args.workspace != nullptr && args.workspace_bytes >= plan.scratch_bytes) {
            scratch = static_cast<char*>(args.workspace);
        } else {
            const cudaError_t error = allocated.allocate(plan.scratch_bytes);
            if (error != cudaSuccess) {
                return fail_cuda(error, concat("cudaMallocAsync of ", plan.scratch_bytes, " bytes of scratch (pass a "
                                               "workspace of fas_fwd_workspace_size() bytes to avoid it)"));
            }
            scratch = allocated.get();
        }
    }

    Flash_fwd_params params;
    fill_params(args, plan, scratch, &params);
    plan.kernel->launch(params, args.stream);
    const cudaError_t launch_error = cudaGetLastError();
    if (launch_error != cudaSuccess) return fail_cuda(launch_error, "FA2 kernel launch");
    const cudaError_t free_error = allocated.release();
    if (free_error != cudaSuccess) return fail_cuda(free_error, "cudaFreeAsync of the scratch");
    return FAS_SUCCESS;
}

}  // namespace

// -------------------------------------------------------------------------------------------------
// Exported C API

extern "C" {

void fas_fwd_args_init(fas_fwd_args* args) {
    if (args == nullptr) return;
    std::memset(args, 0, sizeof(*args));
    args->struct_size = sizeof(*args);
}

fas_status fas_fwd(const fas_fwd_args* args) {
    return guarded([&] { return run_forward(args); });
}

fas_status fas_fwd_workspace_size(const fas_fwd_args* args, size_t* bytes) {
    return guarded([&] {
        if (bytes == nullptr) return fail(FAS_ERROR_INVALID_ARGUMENT, "bytes is NULL; pass a size_t to receive the size");
        fas_fwd_args resolved;
        LaunchPlan plan{};
        const fas_status status = validate_and_plan(args, &resolved, &plan);
        if (status == FAS_SUCCESS) *bytes = plan.scratch_bytes;
        return status;
    });
}

const char* fas_get_last_error(void) { return t_last_error.c_str(); }

void fas_get_version(int* major, int* minor, int* patch) {
    if (major != nullptr) *major = FAS_VERSION_MAJOR;
    if (minor != nullptr) *minor = FAS_VERSION_MINOR;
    if (patch != nullptr) *patch = FAS_VERSION_PATCH;
}

const char* fas_version_string(void) { return kVersionString; }

int fas_num_kernels(void) { return kNumKernels; }

fas_status fas_get_kernel_info(int index, fas_kernel_info* info) {
    return guarded([&] {
        if (info == nullptr) return fail(FAS_ERROR_INVALID_ARGUMENT, "info is NULL; pass a fas_kernel_info to fill");
        if (index < 0 || index >= kNumKernels) {
            return fail(FAS_ERROR_INVALID_ARGUMENT,
                        concat("kernel index ", index, " is out of range; valid indices are 0..", kNumKernels - 1,
                               " (fas_num_kernels() - 1)"));
        }
        const KernelEntry& entry = kKernels[index];
        info->dtype = entry.dtype;
        info->head_dim = entry.head_dim;
        info->causal = entry.causal ? 1 : 0;
        info->split_kv = entry.split_kv ? 1 : 0;
        info->family = kFamily;
        return FAS_SUCCESS;
    });
}

fas_status fas_query_support(fas_dtype dtype, int head_dim, int causal, int* kernel_head_dim) {
    return guarded([&] {
        if (!is_valid_dtype(dtype)) {
            return fail(FAS_ERROR_INVALID_ARGUMENT,
                        concat("dtype ", static_cast<int>(dtype), " is not a fas_dtype; use FAS_DTYPE_FP16 or FAS_DTYPE_BF16"));
        }
        fas_status status = validate_head_dim(head_dim);
        if (status != FAS_SUCCESS) return status;
        const KernelEntry* kernel = nullptr;
        status = select_plain_kernel(dtype, head_dim, causal != 0, &kernel);
        if (status == FAS_SUCCESS && kernel_head_dim != nullptr) *kernel_head_dim = kernel->head_dim;
        return status;
    });
}

fas_status fas_check_device(int device) {
    return guarded([&] {
        DeviceProps props{};
        return check_device(device, &props);
    });
}

}  // extern "C"
