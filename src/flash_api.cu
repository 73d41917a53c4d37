// C API of libflash_attn_standalone: argument validation, kernel selection and the launch of the
// FA2 forward kernels compiled into this build. Host code only; the kernels live in other
// translation units, listed by the build-generated kernel_registry.inc.
#include "flash_attn_standalone.h"

#include <cutlass/numeric_types.h>

#include "fas_cuda_error.h"
#include "flash.h"
#include "namespace_config.h"
#include "sm90/plan.h"
#include "sm90/ragged_args.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <sstream>
#include <string>
#include <vector>

#if !defined(FAS_VERSION_MAJOR) || !defined(FAS_VERSION_MINOR) || !defined(FAS_VERSION_PATCH)
#error "FAS_VERSION_MAJOR, FAS_VERSION_MINOR and FAS_VERSION_PATCH must be defined by the build (-D)"
#endif

// Declarations of the kernel entry points that the other translation units define: an explicit
// specialization of run_mha_fwd_ per plain FA2 kernel, an explicit instantiation of
// run_mha_fwd_splitkv_dispatch per split-KV FA2 kernel, an explicit specialization of
// fas_sm90::launch_ragged per SM90 kernel.
#define FAS_FA2_FWD(ElementType, DtypeEnum, HeadDim, IsCausal)  \
    namespace FLASH_NAMESPACE {                                 \
    template <>                                                 \
    void run_mha_fwd_<ElementType, HeadDim, IsCausal>(Flash_fwd_params&, cudaStream_t); \
    }
#define FAS_FA2_FWD_SPLIT(ElementType, DtypeEnum, HeadDim, IsCausal)                 \
    namespace FLASH_NAMESPACE {                                                      \
    extern template void run_mha_fwd_splitkv_dispatch<ElementType, HeadDim, IsCausal>( \
        Flash_fwd_params&, cudaStream_t);                                            \
    }
#define FAS_SM90_PREFILL(InEnum, OutEnum, HeadDim, IsCausal)                                          \
    namespace fas_sm90 {                                                                              \
    template <>                                                                                       \
    cudaError_t launch_ragged<InEnum, OutEnum, HeadDim, IsCausal>(const RaggedArgs&, cudaStream_t);   \
    }
#include "kernel_registry.inc"
#undef FAS_FA2_FWD
#undef FAS_FA2_FWD_SPLIT
#undef FAS_SM90_PREFILL

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

struct Sm90Entry {
    fas_dtype dtype;      // of q, k, v
    fas_dtype out_dtype;  // of out: dtype, or fp16/bf16 for e4m3
    int head_dim;
    bool causal;
    fas_sm90::RaggedLaunchFn launch;
};

// Each table ends with a sentinel (launch == nullptr) so that a registry without kernels of a
// family still yields a valid (non-zero-size) array; the counts exclude it.
#define FAS_FA2_FWD(ElementType, DtypeEnum, HeadDim, IsCausal) \
    {DtypeEnum, HeadDim, IsCausal, false, &FLASH_NAMESPACE::run_mha_fwd_<ElementType, HeadDim, IsCausal>},
#define FAS_FA2_FWD_SPLIT(ElementType, DtypeEnum, HeadDim, IsCausal) \
    {DtypeEnum, HeadDim, IsCausal, true,                             \
     &FLASH_NAMESPACE::run_mha_fwd_splitkv_dispatch<ElementType, HeadDim, IsCausal>},
#define FAS_SM90_PREFILL(InEnum, OutEnum, HeadDim, IsCausal)
const KernelEntry kKernelTable[] = {
#include "kernel_registry.inc"
    {FAS_DTYPE_FP16, 0, false, false, nullptr},
};
#undef FAS_FA2_FWD
#undef FAS_FA2_FWD_SPLIT
#undef FAS_SM90_PREFILL

#define FAS_FA2_FWD(ElementType, DtypeEnum, HeadDim, IsCausal)
#define FAS_FA2_FWD_SPLIT(ElementType, DtypeEnum, HeadDim, IsCausal)
#define FAS_SM90_PREFILL(InEnum, OutEnum, HeadDim, IsCausal) \
    {InEnum, OutEnum, HeadDim, IsCausal, &fas_sm90::launch_ragged<InEnum, OutEnum, HeadDim, IsCausal>},
const Sm90Entry kSm90Table[] = {
#include "kernel_registry.inc"
    {FAS_DTYPE_FP16, FAS_DTYPE_FP16, 0, false, nullptr},
};
#undef FAS_FA2_FWD
#undef FAS_FA2_FWD_SPLIT
#undef FAS_SM90_PREFILL

constexpr int kNumFa2Kernels = static_cast<int>(sizeof(kKernelTable) / sizeof(kKernelTable[0])) - 1;
constexpr int kNumSm90Kernels = static_cast<int>(sizeof(kSm90Table) / sizeof(kSm90Table[0])) - 1;
constexpr int kNumKernels = kNumFa2Kernels + kNumSm90Kernels;

// Range-for views of the tables without their sentinels.
template <typename Entry>
struct TableView {
    const Entry* first;
    int count;
    const Entry* begin() const { return first; }
    const Entry* end() const { return first + count; }
};
constexpr TableView<KernelEntry> kKernels{kKernelTable, kNumFa2Kernels};
constexpr TableView<Sm90Entry> kSm90Kernels{kSm90Table, kNumSm90Kernels};

constexpr int kMaxHeadDim = 256;
constexpr int kMaxSplits = 128;            // largest split count FA2's combine kernel handles
constexpr int kSplitBlockM = 64;           // query rows per CTA of the split-KV kernel
constexpr int kMaxGridDimYZ = 65535;       // CUDA limit; FA2 puts batch and heads on grid y/z
constexpr size_t kWorkspaceAlignment = 256;
constexpr float kLog2e = 1.44269504088896340736f;
constexpr const char* kFamilyFa2 = "fa2";
constexpr const char* kFamilySm90 = "sm90";

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

const char* dtype_name(fas_dtype dtype) {
    return dtype == FAS_DTYPE_BF16 ? "bf16" : dtype == FAS_DTYPE_E4M3 ? "e4m3" : "fp16";
}

// The 16-bit dtypes: fas_fwd and FA2 take only these, and they are the FP8 output dtypes.
bool is_valid_dtype(int dtype) { return dtype == FAS_DTYPE_FP16 || dtype == FAS_DTYPE_BF16; }

fas_status fail_bad_dtype(int dtype) {
    if (dtype == FAS_DTYPE_E4M3) {
        return fail(FAS_ERROR_INVALID_ARGUMENT,
                    "dtype FAS_DTYPE_E4M3 runs only through the plan API (fas_plan_create with "
                    "fas_plan_args.out_dtype), on the SM90 family; fas_fwd takes FAS_DTYPE_FP16 or FAS_DTYPE_BF16");
    }
    return fail(FAS_ERROR_INVALID_ARGUMENT,
                concat("dtype ", dtype, " is not a fas_dtype; use FAS_DTYPE_FP16, FAS_DTYPE_BF16 or (plans) FAS_DTYPE_E4M3"));
}

bool is_aligned(const void* pointer, size_t alignment) {
    return reinterpret_cast<uintptr_t>(pointer) % alignment == 0;
}

// Every size-prefixed argument struct: present, and at least as large as this version's, so
// the library never reads past what the caller allocated.
template <typename Args>
fas_status check_args_struct(const Args* args, const char* type_name, const char* initialiser) noexcept {
    if (args == nullptr) {
        return fail(FAS_ERROR_INVALID_ARGUMENT, concat("args is NULL; pass a ", type_name, " set up with ", initialiser));
    }
    if (args->struct_size < sizeof(Args)) {
        return fail(FAS_ERROR_INVALID_ARGUMENT,
                    concat("args->struct_size is ", args->struct_size, " but this library needs at least ",
                           sizeof(Args), " (sizeof(", type_name, ")); initialise the struct with ", initialiser));
    }
    return FAS_SUCCESS;
}

// A non-sticky error left by the caller's earlier work would otherwise be reported as ours.
fas_status check_no_pending_cuda_error() noexcept {
    const cudaError_t pending = cudaPeekAtLastError();
    if (pending == cudaSuccess) return FAS_SUCCESS;
    return fail(FAS_ERROR_CUDA,
                concat("a CUDA error from earlier work on this thread is still pending: ", cudaGetErrorName(pending),
                       " (", cudaGetErrorString(pending), "); nothing was launched. Handle it with "
                       "cudaGetLastError() (a sticky error needs a process restart) and call again"));
}

// q, k, v and out must be set and 16-byte aligned (both families load rows with 16-byte
// accesses, TMA for SM90); the optional LSE must be float-aligned.
fas_status check_tensor_pointers(const void* q, const void* k, const void* v, const void* out,
                                 const float* softmax_lse) noexcept {
    const struct {
        const void* pointer;
        const char* name;
    } tensors[] = {{q, "q"}, {k, "k"}, {v, "v"}, {out, "out"}};
    for (const auto& tensor : tensors) {
        if (tensor.pointer == nullptr) {
            return fail(FAS_ERROR_INVALID_ARGUMENT, concat(tensor.name, " is NULL; pass a device pointer"));
        }
        if (!is_aligned(tensor.pointer, 16)) {
            return fail(FAS_ERROR_INVALID_ARGUMENT,
                        concat(tensor.name, " (", tensor.pointer, ") is not 16-byte aligned; the kernels load rows "
                               "with 16-byte accesses, so pass an aligned pointer (cudaMalloc returns 256-byte "
                               "aligned memory; offsets must be multiples of 8 elements)"));
        }
    }
    if (softmax_lse != nullptr && !is_aligned(softmax_lse, sizeof(float))) {
        return fail(FAS_ERROR_INVALID_ARGUMENT, "softmax_lse is not 4-byte aligned; pass a float-aligned device pointer");
    }
    return FAS_SUCCESS;
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
    if (const fas_status status = check_args_struct(user_args, "fas_fwd_args", "fas_fwd_args_init() or FAS_FWD_ARGS_INIT");
        status != FAS_SUCCESS) {
        return status;
    }
    std::memcpy(resolved, user_args, sizeof(fas_fwd_args));
    fas_fwd_args& args = *resolved;

    if (!is_valid_dtype(args.dtype)) return fail_bad_dtype(args.dtype);
    if (const fas_status status = check_tensor_pointers(args.q, args.k, args.v, args.out, args.softmax_lse);
        status != FAS_SUCCESS) {
        return status;
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

    if (const fas_status status = check_no_pending_cuda_error(); status != FAS_SUCCESS) return status;

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

// ---------------------------------------------------------------------------------------------
// Plans

constexpr uint64_t kPlanMagic = 0x666173506c616e31ull;  // "fasPlan1"
constexpr uint64_t kDeadPlanMagic = 0x64656164506c616eull;
constexpr float kLn2 = 0.69314718055994530942f;

// out_dtype < 0: any output dtype (capability queries).
const Sm90Entry* find_sm90_kernel(fas_dtype dtype, int out_dtype, int head_dim, bool causal) {
    for (const Sm90Entry& entry : kSm90Kernels) {
        if (entry.dtype == dtype && (out_dtype < 0 || entry.out_dtype == out_dtype) && entry.head_dim == head_dim &&
            entry.causal == causal) {
            return &entry;
        }
    }
    return nullptr;
}

std::string sm90_kernel_name(fas_dtype dtype, fas_dtype out_dtype, int head_dim, bool causal) {
    return concat(dtype_name(dtype), dtype == out_dtype ? "" : concat("->", dtype_name(out_dtype)), "/hd", head_dim,
                  causal ? "/causal" : "/full");
}

// Empty if an SM90 kernel can serve (dtype, out_dtype, head_dim, causal) on a device of these
// properties, else why not.
std::string sm90_kernel_unavailable_reason(fas_dtype dtype, int out_dtype, int head_dim, bool causal,
                                           const DeviceProps& device) {
    if (!(device.cc_major == 9 && device.cc_minor == 0)) {
        return concat("the device has compute capability ", device.cc_major, ".", device.cc_minor,
                      "; SM90 kernels need 9.0");
    }
    if (find_sm90_kernel(dtype, out_dtype, head_dim, causal) == nullptr) {
        std::string built;
        for (const Sm90Entry& entry : kSm90Kernels) {
            built += concat(built.empty() ? "" : ", ",
                            sm90_kernel_name(entry.dtype, entry.out_dtype, entry.head_dim, entry.causal));
        }
        const std::string wanted = out_dtype < 0 ? sm90_kernel_name(dtype, dtype, head_dim, causal)
                                                 : sm90_kernel_name(dtype, static_cast<fas_dtype>(out_dtype),
                                                                    head_dim, causal);
        return concat("no SM90 kernel ", wanted, " is built (SM90 kernels of this build: ",
                      built.empty() ? "none" : built, "; they serve their exact head dim only)");
    }
    return std::string();
}

__global__ void scale_lse_kernel(float* lse, int64_t count, float factor) {
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        lse[i] *= factor;
    }
}

}  // namespace

struct fas_plan {
    uint64_t magic = kPlanMagic;
    fas_family family = FAS_FAMILY_FA2;
    int device = 0;
    int sm_count = 0;
    int kernel_head_dim = 0;
    int num_heads_q = 0;
    int first_q_row = 0;  // cu_seqlens_q[0]
    int total_q = 0;      // cu_seqlens_q[batch_size]
    int total_k = 0;
    size_t device_bytes = 0;
    int32_t* cu_seqlens_device = nullptr;  // FA2: [cu_seqlens_q | cu_seqlens_k], batch_size + 1 each
    float* lse_scratch = nullptr;           // FA2: [num_heads_q, total_q], written when softmax_lse is NULL
    std::string sm90_unused_reason;

    // FA2: resolved arguments and launch plan; the run fills in the tensors and the stream.
    fas_fwd_args fa2_args{};
    LaunchPlan fa2_plan{};
    // SM90: launch arguments with the schedule; the run fills in the tensors.
    fas_sm90::Schedule* schedule = nullptr;
    fas_sm90::RaggedLaunchFn sm90_launch = nullptr;
    fas_sm90::RaggedArgs sm90_args{};

    ~fas_plan() {
        magic = kDeadPlanMagic;
        fas_sm90::schedule_destroy(schedule);
        if (cu_seqlens_device != nullptr) cudaFree(cu_seqlens_device);
        if (lse_scratch != nullptr) cudaFree(lse_scratch);
    }
};

namespace {

fas_status check_host_offsets(const int32_t* offsets, int batch_size, const char* name) {
    if (offsets == nullptr) {
        return fail(FAS_ERROR_INVALID_ARGUMENT,
                    concat(name, " is NULL; pass a HOST array of batch_size+1 int32 offsets"));
    }
    if (!is_aligned(offsets, sizeof(int32_t))) {
        return fail(FAS_ERROR_INVALID_ARGUMENT, concat(name, " is not 4-byte aligned"));
    }
    cudaPointerAttributes attributes{};
    if (cudaPointerGetAttributes(&attributes, offsets) == cudaSuccess) {
        if (attributes.type == cudaMemoryTypeDevice) {
            return fail(FAS_ERROR_INVALID_ARGUMENT,
                        concat(name, " is a device pointer; fas_plan_create reads the offsets on the host: pass a "
                                     "host copy (the plan uploads its own device copy)"));
        }
    } else {
        cudaGetLastError();
    }
    if (offsets[0] < 0) {
        return fail(FAS_ERROR_INVALID_ARGUMENT, concat(name, "[0] is ", offsets[0], "; offsets must be >= 0"));
    }
    for (int i = 0; i < batch_size; ++i) {
        if (offsets[i + 1] < offsets[i]) {
            return fail(FAS_ERROR_INVALID_ARGUMENT,
                        concat(name, " decreases at index ", i + 1, " (", offsets[i], " then ", offsets[i + 1],
                               "); offsets must be non-decreasing cumulative sequence lengths"));
        }
    }
    return FAS_SUCCESS;
}

int max_length(const int32_t* offsets, int batch_size) {
    int longest = 0;
    for (int i = 0; i < batch_size; ++i) longest = std::max(longest, offsets[i + 1] - offsets[i]);
    return longest;
}

fas_status create_plan(const fas_plan_args* user_args, fas_plan** plan_out) {
    if (plan_out == nullptr) return fail(FAS_ERROR_INVALID_ARGUMENT, "plan is NULL; pass a fas_plan* to receive the plan");
    *plan_out = nullptr;
    if (const fas_status status = check_args_struct(user_args, "fas_plan_args", "fas_plan_args_init()");
        status != FAS_SUCCESS) {
        return status;
    }
    fas_plan_args args;
    std::memcpy(&args, user_args, sizeof(args));
    const bool fp8 = args.dtype == FAS_DTYPE_E4M3;
    if (fp8 && !is_valid_dtype(args.out_dtype)) {
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
    status = check_host_offsets(args.cu_seqlens_k, args.batch_size, "cu_seqlens_k");
    if (status != FAS_SUCCESS) return status;
    const int total_q = args.cu_seqlens_q[args.batch_size];
    const int total_k = args.cu_seqlens_k[args.batch_size];
    const int max_q = max_length(args.cu_seqlens_q, args.batch_size);
    const int max_k = max_length(args.cu_seqlens_k, args.batch_size);
    if (max_q == 0 || max_k == 0) {
        return fail(FAS_ERROR_INVALID_ARGUMENT,
                    concat("the layout has ", max_q == 0 ? "no query rows" : "no keys",
                           " (every sequence of cu_seqlens_", max_q == 0 ? "q" : "k", " is empty); nothing to plan"));
    }

    // The shared fas_fwd validation, on an equivalent varlen fas_fwd_args (placeholder tensor
    // pointers: the tensors come with each run).
    fas_fwd_args fwd;
    fas_fwd_args_init(&fwd);
    alignas(16) static const int32_t kAlignedPlaceholder[4] = {};
    fwd.dtype = out_dtype;  // the 16-bit rules; FP8 inputs get their own stride rule below
    fwd.q = fwd.k = fwd.v = kAlignedPlaceholder;
    fwd.out = const_cast<int32_t*>(kAlignedPlaceholder);
    fwd.softmax_lse = const_cast<float*>(reinterpret_cast<const float*>(kAlignedPlaceholder));
    fwd.cu_seqlens_q = kAlignedPlaceholder;  // replaced by the plan's device copies below
    fwd.cu_seqlens_k = kAlignedPlaceholder;
    fwd.batch_size = args.batch_size;
    fwd.max_seqlen_q = max_q;
    fwd.max_seqlen_k = max_k;
    fwd.num_heads_q = args.num_heads_q;
    fwd.num_heads_k = args.num_heads_k;
    fwd.head_dim = args.head_dim;
    fwd.q_row_stride = args.q_row_stride;
    fwd.k_row_stride = args.k_row_stride;
    fwd.v_row_stride = args.v_row_stride;
    fwd.out_row_stride = args.out_row_stride;
    fwd.softmax_scale = args.softmax_scale;
    fwd.causal = args.causal;
    fwd.total_q = total_q;
    fas_fwd_args resolved;
    status = validate_args(&fwd, &resolved);
    if (status != FAS_SUCCESS) return status;
    const bool causal = resolved.causal != 0;
    if (fp8) {
        // TMA moves 16-byte units: a row of 1-byte elements must start 16-byte aligned.
        const std::pair<int64_t, const char*> fp8_strides[] = {
            {resolved.q_row_stride, "q_row_stride"}, {resolved.k_row_stride, "k_row_stride"},
            {resolved.v_row_stride, "v_row_stride"}};
        for (const auto& [stride, name] : fp8_strides) {
            if (stride % 16 != 0) {
                return fail(FAS_ERROR_INVALID_ARGUMENT,
                            concat(name, " is ", stride, " elements; e4m3 rows must be multiples of 16 elements "
                                   "(16 bytes) apart"));
            }
        }
    }

    DeviceProps device{};
    int device_index = 0;
    const cudaError_t device_error = cudaGetDevice(&device_index);
    if (device_error != cudaSuccess) return fail_cuda(device_error, "cudaGetDevice (is a CUDA driver and GPU present?)");
    status = check_device(device_index, &device);
    if (status != FAS_SUCCESS) return status;

    // Family choice.
    std::string sm90_reason;
    const Sm90Entry* sm90_kernel = nullptr;
    fas_sm90::PlanLayout layout{args.cu_seqlens_q, args.cu_seqlens_k, args.batch_size, resolved.num_heads_q,
                                resolved.num_heads_k, resolved.head_dim, causal, fp8, device.sm_count};
    if (args.disable_sm90 != 0) {
        sm90_reason = "disabled by fas_plan_args.disable_sm90";
    } else {
        sm90_reason = sm90_kernel_unavailable_reason(args.dtype, out_dtype, resolved.head_dim, causal, device);
        if (sm90_reason.empty()) sm90_reason = fas_sm90::layout_unsupported_reason(layout);
        if (sm90_reason.empty()) sm90_kernel = find_sm90_kernel(args.dtype, out_dtype, resolved.head_dim, causal);
    }
    if (fp8 && sm90_kernel == nullptr) {
        const bool wrong_device = !(device.cc_major == 9 && device.cc_minor == 0);
        return fail(wrong_device ? FAS_ERROR_UNSUPPORTED_DEVICE : FAS_ERROR_NOT_BUILT,
                    concat("FP8 (e4m3) plans run only on the SM90 family, which cannot serve this one: ", sm90_reason,
                           wrong_device ? "" : "; rebuild with a matching sm90_fp8_prefill kernel (matrix full)"));
    }
    const KernelEntry* fa2_kernel = sm90_kernel != nullptr ? nullptr : find_plain_kernel(resolved.dtype, resolved.head_dim, causal);
    if (sm90_kernel == nullptr && fa2_kernel == nullptr) {
        return fail(FAS_ERROR_NOT_BUILT,
                    concat("no kernel serves this plan: SM90 is not usable (", sm90_reason, ") and this build has no ",
                           dtype_name(resolved.dtype), causal ? " causal" : " non-causal", " FA2 kernel for head_dim ",
                           resolved.head_dim, " (FA2 head dims built: ", built_head_dims(resolved.dtype, causal),
                           "); rebuild with a matching kernel"));
    }

    std::unique_ptr<fas_plan> plan(new fas_plan());
    plan->device = device_index;
    plan->sm_count = device.sm_count;
    plan->num_heads_q = resolved.num_heads_q;
    plan->first_q_row = args.cu_seqlens_q[0];
    plan->total_q = total_q;
    plan->total_k = total_k;

    if (sm90_kernel != nullptr) {
        // Layout limits were checked above (layout_unsupported_reason): what can fail here is
        // CUDA itself (allocation, the upload).
        std::string message;
        const cudaError_t error = fas_sm90::schedule_create(layout, &plan->schedule, &message);
        if (error != cudaSuccess) return fail_cuda(error, message);
        plan->family = FAS_FAMILY_SM90;
        plan->kernel_head_dim = sm90_kernel->head_dim;
        plan->sm90_launch = sm90_kernel->launch;
        plan->device_bytes = fas_sm90::schedule_device_bytes(plan->schedule);
        fas_sm90::RaggedArgs& ragged = plan->sm90_args;
        ragged.q_row_stride = resolved.q_row_stride;
        ragged.k_row_stride = resolved.k_row_stride;
        ragged.v_row_stride = resolved.v_row_stride;
        ragged.out_row_stride = resolved.out_row_stride;
        ragged.nnz_qo = total_q;
        ragged.nnz_kv = total_k;
        ragged.num_qo_heads = resolved.num_heads_q;
        ragged.num_kv_heads = resolved.num_heads_k;
        ragged.softmax_scale = resolved.softmax_scale;
        ragged.device = device_index;
        fas_sm90::schedule_fill_args(plan->schedule, &ragged);
    } else {
        plan->family = FAS_FAMILY_FA2;
        plan->sm90_unused_reason = sm90_reason;
        plan->kernel_head_dim = fa2_kernel->head_dim;
        const size_t offsets_bytes = 2 * sizeof(int32_t) * static_cast<size_t>(args.batch_size + 1);
        const size_t lse_bytes = sizeof(float) * static_cast<size_t>(resolved.num_heads_q) * total_q;
        cudaError_t error = cudaMalloc(&plan->cu_seqlens_device, offsets_bytes);
        if (error != cudaSuccess) return fail_cuda(error, concat("cudaMalloc of the plan's offsets (", offsets_bytes, " bytes)"));
        error = cudaMalloc(&plan->lse_scratch, lse_bytes);
        if (error != cudaSuccess) return fail_cuda(error, concat("cudaMalloc of the plan's LSE scratch (", lse_bytes, " bytes)"));
        std::vector<int32_t> offsets(args.cu_seqlens_q, args.cu_seqlens_q + args.batch_size + 1);
        offsets.insert(offsets.end(), args.cu_seqlens_k, args.cu_seqlens_k + args.batch_size + 1);
        error = cudaMemcpyAsync(plan->cu_seqlens_device, offsets.data(), offsets_bytes, cudaMemcpyHostToDevice, args.stream);
        if (error != cudaSuccess) return fail_cuda(error, "cudaMemcpyAsync of the plan's offsets");
        error = cudaStreamSynchronize(args.stream);
        if (error != cudaSuccess) return fail_cuda(error, "cudaStreamSynchronize after the plan's upload");
        plan->device_bytes = offsets_bytes + lse_bytes;
        resolved.cu_seqlens_q = plan->cu_seqlens_device;
        resolved.cu_seqlens_k = plan->cu_seqlens_device + args.batch_size + 1;
        resolved.softmax_lse = nullptr;
        resolved.workspace = nullptr;
        resolved.workspace_bytes = 0;
        plan->fa2_args = resolved;
        LaunchPlan& launch = plan->fa2_plan;
        launch.kernel = fa2_kernel;
        launch.num_splits = 1;
        launch.lse_rows = total_q;
        launch.lse_scratch_offset = 0;
        launch.lse_accum_offset = SIZE_MAX;
        launch.out_accum_offset = SIZE_MAX;
        launch.scratch_bytes = lse_bytes;
    }
    *plan_out = plan.release();
    return FAS_SUCCESS;
}

fas_status check_plan(const fas_plan* plan) {
    if (plan == nullptr) return fail(FAS_ERROR_INVALID_ARGUMENT, "plan is NULL; pass a plan from fas_plan_create()");
    if (plan->magic != kPlanMagic) {
        return fail(FAS_ERROR_INVALID_ARGUMENT,
                    "plan is not a live fas_plan (destroyed, or not from fas_plan_create()); using it is undefined");
    }
    return FAS_SUCCESS;
}

fas_status run_plan(const fas_plan* plan, const fas_plan_run_args* user_args) {
    fas_status status = check_plan(plan);
    if (status != FAS_SUCCESS) return status;
    if (const fas_status status = check_args_struct(user_args, "fas_plan_run_args", "fas_plan_run_args_init()");
        status != FAS_SUCCESS) {
        return status;
    }
    fas_plan_run_args args;
    std::memcpy(&args, user_args, sizeof(args));
    if (const fas_status status = check_tensor_pointers(args.q, args.k, args.v, args.out, args.softmax_lse);
        status != FAS_SUCCESS) {
        return status;
    }
    int device = 0;
    cudaError_t error = cudaGetDevice(&device);
    if (error != cudaSuccess) return fail_cuda(error, "cudaGetDevice");
    if (device != plan->device) {
        return fail(FAS_ERROR_INVALID_ARGUMENT,
                    concat("the current device is ", device, " but the plan was made on device ", plan->device,
                           "; call cudaSetDevice(", plan->device, ") before fas_plan_run, or make a plan per device"));
    }
    if (const fas_status status = check_no_pending_cuda_error(); status != FAS_SUCCESS) return status;

    if (plan->family == FAS_FAMILY_SM90) {
        fas_sm90::RaggedArgs ragged = plan->sm90_args;
        ragged.q = args.q;
        ragged.k = args.k;
        ragged.v = args.v;
        ragged.out = args.out;
        ragged.lse = args.softmax_lse;
        // Read by the FP8 kernels only; the 16-bit ones ignore them.
        for (const float* descale : {args.q_descale, args.k_descale, args.v_descale}) {
            if (!is_aligned(descale, sizeof(float))) {
                return fail(FAS_ERROR_INVALID_ARGUMENT, "q_descale / k_descale / v_descale must be 4-byte aligned");
            }
        }
        ragged.q_descale = args.q_descale;
        ragged.k_descale = args.k_descale;
        ragged.v_descale = args.v_descale;
        error = fas_sm90::schedule_prepare_run(plan->schedule, args.stream);
        if (error != cudaSuccess) return fail_cuda(error, "waiting for the SM90 schedule upload (cudaStreamWaitEvent)");
        error = plan->sm90_launch(ragged, args.stream);
        if (error == cudaSuccess) error = cudaGetLastError();
        if (error != cudaSuccess) return fail_cuda(error, "SM90 kernel launch");
        if (args.softmax_lse != nullptr) {
            // The kernel writes log2(sum exp); the API promises the natural logarithm.
            const int64_t first = static_cast<int64_t>(plan->first_q_row) * plan->num_heads_q;
            const int64_t count = static_cast<int64_t>(plan->total_q) * plan->num_heads_q - first;
            if (count > 0) {
                const int threads = 256;
                const int64_t blocks = std::min<int64_t>((count + threads - 1) / threads, 8LL * plan->sm_count);
                scale_lse_kernel<<<static_cast<unsigned>(blocks), threads, 0, args.stream>>>(args.softmax_lse + first,
                                                                                             count, kLn2);
                error = cudaGetLastError();
                if (error != cudaSuccess) return fail_cuda(error, "LSE conversion kernel launch");
            }
        }
        return FAS_SUCCESS;
    }

    fas_fwd_args fwd = plan->fa2_args;
    fwd.q = args.q;
    fwd.k = args.k;
    fwd.v = args.v;
    fwd.out = args.out;
    fwd.softmax_lse = args.softmax_lse;
    fwd.stream = args.stream;
    Flash_fwd_params params;
    fill_params(fwd, plan->fa2_plan, reinterpret_cast<char*>(plan->lse_scratch), &params);
    plan->fa2_plan.kernel->launch(params, args.stream);
    error = cudaGetLastError();
    if (error != cudaSuccess) return fail_cuda(error, "FA2 kernel launch");
    return FAS_SUCCESS;
}

fas_status query_plan_support(fas_dtype dtype, int head_dim, int causal, fas_family* family, int* kernel_head_dim) {
    const bool fp8 = dtype == FAS_DTYPE_E4M3;
    if (!fp8 && !is_valid_dtype(dtype)) return fail_bad_dtype(dtype);
    fas_status status = validate_head_dim(head_dim);
    if (status != FAS_SUCCESS) return status;
    DeviceProps device{};
    status = check_current_device(&device);
    if (status != FAS_SUCCESS) return status;
    const std::string sm90_reason =
        sm90_kernel_unavailable_reason(dtype, fp8 ? -1 : static_cast<int>(dtype), head_dim, causal != 0, device);
    if (sm90_reason.empty()) {
        if (family != nullptr) *family = FAS_FAMILY_SM90;
        if (kernel_head_dim != nullptr) *kernel_head_dim = head_dim;
        return FAS_SUCCESS;
    }
    if (fp8) return fail(FAS_ERROR_NOT_BUILT, concat("FP8 (e4m3) plans need an SM90 kernel: ", sm90_reason));
    const KernelEntry* kernel = nullptr;
    status = select_plain_kernel(dtype, head_dim, causal != 0, &kernel);
    if (status != FAS_SUCCESS) return status;
    if (family != nullptr) *family = FAS_FAMILY_FA2;
    if (kernel_head_dim != nullptr) *kernel_head_dim = kernel->head_dim;
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
        if (index < kNumFa2Kernels) {
            const KernelEntry& entry = kKernelTable[index];
            info->dtype = entry.dtype;
            info->head_dim = entry.head_dim;
            info->causal = entry.causal ? 1 : 0;
            info->split_kv = entry.split_kv ? 1 : 0;
            info->family = kFamilyFa2;
            info->out_dtype = entry.dtype;
        } else {
            const Sm90Entry& entry = kSm90Table[index - kNumFa2Kernels];
            info->dtype = entry.dtype;
            info->head_dim = entry.head_dim;
            info->causal = entry.causal ? 1 : 0;
            info->split_kv = 0;
            info->family = kFamilySm90;
            info->out_dtype = entry.out_dtype;
        }
        return FAS_SUCCESS;
    });
}

fas_status fas_query_support(fas_dtype dtype, int head_dim, int causal, int* kernel_head_dim) {
    return guarded([&] {
        if (!is_valid_dtype(dtype)) return fail_bad_dtype(dtype);
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

void fas_plan_args_init(fas_plan_args* args) {
    if (args == nullptr) return;
    std::memset(args, 0, sizeof(*args));
    args->struct_size = sizeof(*args);
}

void fas_plan_run_args_init(fas_plan_run_args* args) {
    if (args == nullptr) return;
    std::memset(args, 0, sizeof(*args));
    args->struct_size = sizeof(*args);
}

fas_status fas_plan_create(const fas_plan_args* args, fas_plan** plan) {
    return guarded([&] { return create_plan(args, plan); });
}

fas_status fas_plan_run(const fas_plan* plan, const fas_plan_run_args* args) {
    return guarded([&] { return run_plan(plan, args); });
}

fas_status fas_plan_destroy(fas_plan* plan) {
    return guarded([&] {
        if (plan == nullptr) return FAS_SUCCESS;
        const fas_status status = check_plan(plan);
        if (status != FAS_SUCCESS) return status;
        delete plan;
        return FAS_SUCCESS;
    });
}

fas_status fas_plan_destroy_async(fas_plan* plan, cudaStream_t stream) {
    return guarded([&] {
        if (plan == nullptr) return FAS_SUCCESS;
        const fas_status status = check_plan(plan);
        if (status != FAS_SUCCESS) return status;
        int device = 0;
        cudaError_t error = cudaGetDevice(&device);
        if (error != cudaSuccess) return fail_cuda(error, "cudaGetDevice");
        if (device != plan->device) {
            return fail(FAS_ERROR_INVALID_ARGUMENT,
                        concat("the plan was made on device ", plan->device, " but device ", device,
                               " is current; call cudaSetDevice(", plan->device, ") before fas_plan_destroy_async"));
        }
        if (plan->family == FAS_FAMILY_SM90) {
            error = fas_sm90::schedule_retire(plan->schedule, stream);
            if (error != cudaSuccess) return fail_cuda(error, "ordering the SM90 schedule's release after the stream's work");
            plan->schedule = nullptr;  // retired: the stream hands it back to the cache
        } else {
            // FA2 plan memory is freed with cudaFree, which may not overlap its runs.
            error = cudaStreamSynchronize(stream);
            if (error != cudaSuccess) return fail_cuda(error, "cudaStreamSynchronize before freeing the FA2 plan");
        }
        delete plan;
        return FAS_SUCCESS;
    });
}

fas_status fas_plan_get_info(const fas_plan* plan, fas_plan_info* info) {
    return guarded([&] {
        fas_status status = check_plan(plan);
        if (status != FAS_SUCCESS) return status;
        if (info == nullptr) return fail(FAS_ERROR_INVALID_ARGUMENT, "info is NULL; pass a fas_plan_info to fill");
        if (info->struct_size < sizeof(fas_plan_info)) {
            return fail(FAS_ERROR_INVALID_ARGUMENT,
                        concat("info->struct_size is ", info->struct_size, " but this library needs at least ",
                               sizeof(fas_plan_info), "; set it to sizeof(fas_plan_info)"));
        }
        fas_plan_info filled;
        std::memset(&filled, 0, sizeof(filled));
        filled.struct_size = sizeof(filled);
        filled.family = plan->family;
        filled.family_name = plan->family == FAS_FAMILY_SM90 ? kFamilySm90 : kFamilyFa2;
        filled.kernel_head_dim = plan->kernel_head_dim;
        filled.lse_layout = plan->family == FAS_FAMILY_SM90 ? FAS_LSE_TOKEN_MAJOR : FAS_LSE_HEAD_MAJOR;
        filled.total_q = plan->total_q;
        filled.total_k = plan->total_k;
        filled.device = plan->device;
        filled.device_bytes = plan->device_bytes;
        filled.sm90_unused_reason = plan->sm90_unused_reason.c_str();
        std::memcpy(info, &filled, sizeof(filled));
        return FAS_SUCCESS;
    });
}

fas_status fas_query_plan_support(fas_dtype dtype, int head_dim, int causal, fas_family* family,
                                  int* kernel_head_dim) {
    return guarded([&] { return query_plan_support(dtype, head_dim, causal, family, kernel_head_dim); });
}

}  // extern "C"
