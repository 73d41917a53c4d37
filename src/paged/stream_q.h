// Where a stream decode kernel's consumer threads keep their Q fragments (decode_tma.cuh): in
// registers through each item (HeadDim / 16 x 4 a thread: 32 at head dim 128), or read from the
// item's Q tile at each stage (HeadDim / 16 ldmatrix a warp a stage more). One 16-row block up to
// head dim 128 holds them; the pair shape's two blocks (9 warps at 168 registers) read them.
// FAS_DECODE_WIDE_Q_FROM_SMEM=1, a switch for timing: the wide shape (e4m3, 8 consumer warps, also
// at the 168-register cap) reads them too; held, its kernels keep 8 bytes of stack, read, none
// (ptxas, nvcc 13.0), and ran no faster on the H200: off (docs/design/decode-e4m3.md, "Fragment
// addresses"), kept for the trials that need its 32 registers.
// Host-compilable (tests/test_stream_q.py).
#ifndef FAS_PAGED_STREAM_Q_H
#define FAS_PAGED_STREAM_Q_H

#ifndef FAS_DECODE_WIDE_Q_FROM_SMEM
#define FAS_DECODE_WIDE_Q_FROM_SMEM 0
#endif

namespace fas_paged {
namespace decode {

constexpr bool stream_q_in_registers(int head_dim, bool wide, int row_blocks) {
    return head_dim <= 128 && row_blocks == 1 && !(wide && FAS_DECODE_WIDE_Q_FROM_SMEM);
}

}  // namespace decode
}  // namespace fas_paged

#endif  // FAS_PAGED_STREAM_Q_H
