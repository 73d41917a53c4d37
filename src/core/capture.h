// Stream capture (CUDA graphs) as the library meets it: whether a stream is capturing and into
// which graph, and a scope in which this thread may make the calls a capture otherwise forbids.
#ifndef FAS_CORE_CAPTURE_H
#define FAS_CORE_CAPTURE_H

#include <cuda_runtime_api.h>

namespace fas {

// The graph `stream` is capturing into, or nullptr (not capturing, or the query failed: its
// error is consumed, and the caller's next call on the stream meets it again).
inline cudaGraph_t capturing_graph(cudaStream_t stream) {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    unsigned long long id = 0;
    cudaGraph_t graph = nullptr;
    if (cudaStreamGetCaptureInfo(stream, &status, &id, &graph) != cudaSuccess) {
        cudaGetLastError();
        return nullptr;
    }
    return status == cudaStreamCaptureStatusActive ? graph : nullptr;
}

// This thread's capture mode relaxed for the scope: allocations, event waits and frees that do
// not touch the capturing stream are allowed while a graph is captured (a global or thread-local
// capture would otherwise refuse them and invalidate itself). The previous mode comes back after.
class RelaxedCaptureScope {
public:
    RelaxedCaptureScope() { cudaThreadExchangeStreamCaptureMode(&mode_); }
    ~RelaxedCaptureScope() { cudaThreadExchangeStreamCaptureMode(&mode_); }
    RelaxedCaptureScope(const RelaxedCaptureScope&) = delete;
    RelaxedCaptureScope& operator=(const RelaxedCaptureScope&) = delete;

private:
    cudaStreamCaptureMode mode_ = cudaStreamCaptureModeRelaxed;
};

}  // namespace fas

#endif  // FAS_CORE_CAPTURE_H
