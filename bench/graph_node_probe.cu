// What a CUDA graph pays per layer for the node that follows a decode kernel (issue 34): a graph of
// 36 layers, each a persistent read kernel (a wave of CTAs streaming MB megabytes, launched with
// programmatic dependent launch, its dependents released at its end) followed by one of: nothing;
// a merge-like kernel with nothing to do (with and without programmatic dependent launch); an IF
// conditional node around it, its condition set to 0 or 1 by the read kernel; the read kernel
// ending in a grid barrier (cooperative launch or not); or ending in a last-arriver count. Prints
// each form's time per layer (min and median of 15 replays). Measured: docs/design/device-lengths.md.
//
//   nvcc -std=c++17 -O2 -arch=sm_90a -o /tmp/graph_node_probe bench/graph_node_probe.cu
//   /tmp/graph_node_probe [MB] [in-kernel]     (MB a layer, default 134; any second argument: the
//                                               last three forms only)
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <algorithm>
#include <cuda_runtime.h>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); exit(1);} } while (0)

// The layer's work: after the previous kernel, every thread streams its share of n float4s.
__device__ __forceinline__ float read_all(const float4* __restrict__ in, size_t n, float* sink) {
    asm volatile("griddepcontrol.wait;" ::: "memory");
    float acc = 0.f;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const float4 v = __ldcs(in + i);
        acc += v.x + v.y + v.z + v.w;
    }
    if (acc == 12345.f) sink[0] = acc;  // never: keeps the loads
    return acc;
}

__global__ void work(const float4* __restrict__ in, size_t n, float* sink, cudaGraphConditionalHandle h, int cond, int use_h) {
    const float acc = read_all(in, n, sink);
    if (use_h && blockIdx.x == 0 && threadIdx.x == 0) cudaGraphSetConditional(h, cond);
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

__device__ __forceinline__ unsigned ld_acquire(const unsigned* p) {
    unsigned v; asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory"); return v;
}
__device__ __forceinline__ void st_release(unsigned* p, unsigned v) {
    asm volatile("st.release.gpu.global.u32 [%0], %1;" :: "l"(p), "r"(v) : "memory");
}
// mode 1: a grid barrier at the end; mode 2: a last-arriver count (no wait)
__global__ void work_sync(const float4* __restrict__ in, size_t n, float* sink, unsigned* count, unsigned* gen, int mode) {
    const float acc = read_all(in, n, sink);
    __syncthreads();
    if (threadIdx.x == 0) {
        const unsigned my = ld_acquire(gen);
        __threadfence();
        if (atomicAdd(count, 1) == gridDim.x - 1) {
            *count = 0;
            __threadfence();
            st_release(gen, my + 1);
        } else if (mode == 1) {
            while (ld_acquire(gen) == my) {}
        }
    }
    __syncthreads();
    if (mode == 1 && acc == 54321.f) sink[1] = acc;
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

__global__ void noop_merge(const int* flag, float* out) {
    asm volatile("griddepcontrol.wait;" ::: "memory");
    if (flag[0] == 0) return;
    out[blockIdx.x] = 1.f;
}

static void launch_pdl(void (*k)(const float4*, size_t, float*, cudaGraphConditionalHandle, int, int), dim3 g, dim3 b, cudaStream_t s,
                       const float4* in, size_t n, float* sink, cudaGraphConditionalHandle h, int cond, int use_h) {
    cudaLaunchAttribute at{}; at.id = cudaLaunchAttributeProgrammaticStreamSerialization; at.val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t c{}; c.gridDim = g; c.blockDim = b; c.stream = s; c.attrs = &at; c.numAttrs = 1;
    CK(cudaLaunchKernelEx(&c, k, in, n, sink, h, cond, use_h));
}
static void launch_merge(cudaStream_t s, const int* flag, float* out, bool pdl, int ctas) {
    cudaLaunchAttribute at{}; at.id = cudaLaunchAttributeProgrammaticStreamSerialization; at.val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t c{}; c.gridDim = dim3(ctas); c.blockDim = dim3(256); c.stream = s; c.attrs = &at; c.numAttrs = pdl ? 1 : 0;
    CK(cudaLaunchKernelEx(&c, noop_merge, flag, out));
}

int main(int argc, char** argv) {
    const size_t mb = argc > 1 ? atoi(argv[1]) : 134;
    const int layers = 36;
    int sms = 0; CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    cudaDeviceProp p; CK(cudaGetDeviceProperties(&p, 0));
    size_t n = mb * 1000000 / 16;
    float4* in; float* sink; int* flag; float* out;
    CK(cudaMalloc(&in, n * 16)); CK(cudaMemset(in, 0, n * 16));
    CK(cudaMalloc(&sink, 4)); CK(cudaMalloc(&flag, 4)); CK(cudaMemset(flag, 0, 4)); CK(cudaMalloc(&out, 4096 * 4));
    cudaStream_t s, side; CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)); CK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
    const char* names[] = {"work only", "work + noop merge (PDL, 2/SM)", "work + IF(merge), cond 0", "work + IF(merge), cond 1", "work + noop merge (no PDL)",
                           "work + grid barrier (coop + PDL)", "work + grid barrier (PDL)", "work + last-arriver count (PDL)"};
    unsigned* sync_words; CK(cudaMalloc(&sync_words, 8)); CK(cudaMemset(sync_words, 0, 8));
    printf("%s, %d SMs, %zu MB per layer, %d layers\n", p.name, sms, mb, layers);
    for (int rep = 0; rep < 2; ++rep)
    for (int v = (argc > 2 ? 5 : 0); v < 8; ++v) {
        CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
        cudaGraph_t g = nullptr;
        for (int l = 0; l < layers; ++l) {
            cudaGraphConditionalHandle h = 0;
            if (v == 2 || v == 3) {
                cudaStreamCaptureStatus st; cudaGraph_t cg;
                CK(cudaStreamGetCaptureInfo(s, &st, nullptr, &cg, nullptr, nullptr, nullptr));
                CK(cudaGraphConditionalHandleCreate(&h, cg, 0, cudaGraphCondAssignDefault));
            }
            if (v >= 5) {
                cudaLaunchAttribute at[2]{}; at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization; at[0].val.programmaticStreamSerializationAllowed = 1;
                at[1].id = cudaLaunchAttributeCooperative; at[1].val.cooperative = 1;
                cudaLaunchConfig_t c{}; c.gridDim = dim3(sms); c.blockDim = dim3(1024); c.stream = s; c.attrs = at; c.numAttrs = v == 5 ? 2 : 1;
                CK(cudaLaunchKernelEx(&c, work_sync, (const float4*)in, n, sink, sync_words, sync_words + 1, v == 7 ? 2 : 1));
            } else {
                launch_pdl(work, dim3(sms), dim3(1024), s, in, n, sink, h, v == 3, v == 2 || v == 3);
            }
            if (v == 1) launch_merge(s, flag, out, true, 2 * sms);
            if (v == 4) launch_merge(s, flag, out, false, 2 * sms);
            if (v == 2 || v == 3) {
                cudaStreamCaptureStatus st; cudaGraph_t cg; const cudaGraphNode_t* deps; size_t nd;
                CK(cudaStreamGetCaptureInfo(s, &st, nullptr, &cg, &deps, nullptr, &nd));
                cudaGraphNodeParams np{}; np.type = cudaGraphNodeTypeConditional;
                np.conditional.handle = h; np.conditional.type = cudaGraphCondTypeIf; np.conditional.size = 1;
                cudaGraphNode_t node;
                CK(cudaGraphAddNode(&node, cg, deps, nullptr, nd, &np));
                cudaGraph_t body = np.conditional.phGraph_out[0];
                CK(cudaStreamBeginCaptureToGraph(side, body, nullptr, nullptr, 0, cudaStreamCaptureModeRelaxed));
                launch_merge(side, flag, out, false, 2 * sms);
                cudaGraph_t bg; CK(cudaStreamEndCapture(side, &bg));
                CK(cudaStreamUpdateCaptureDependencies(s, &node, nullptr, 1, cudaStreamSetCaptureDependencies));
            }
        }
        CK(cudaStreamEndCapture(s, &g));
        cudaGraphExec_t ge; CK(cudaGraphInstantiate(&ge, g, 0));
        for (int w = 0; w < 3; ++w) CK(cudaGraphLaunch(ge, s));
        cudaEvent_t a, b; CK(cudaEventCreate(&a)); CK(cudaEventCreate(&b));
        std::vector<float> t;
        for (int r = 0; r < 15; ++r) {
            CK(cudaEventRecord(a, s)); CK(cudaGraphLaunch(ge, s)); CK(cudaEventRecord(b, s)); CK(cudaEventSynchronize(b));
            float ms; CK(cudaEventElapsedTime(&ms, a, b)); t.push_back(ms * 1000.f / layers);
        }
        std::sort(t.begin(), t.end());
        printf("  %-34s per layer: min %.2f us, median %.2f us\n", names[v], t[0], t[t.size() / 2]);
        CK(cudaGraphExecDestroy(ge)); CK(cudaGraphDestroy(g));
    }
    return 0;
}
