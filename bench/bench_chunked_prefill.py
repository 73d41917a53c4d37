"""Chunked-prefill benchmark (issue 13, item 3): a chunk of new queries per sequence against its
cached keys (queries fewer than keys, bottom-right causal), the library on contiguous and paged
KV against PyTorch SDPA in the same run on the same GPU.

    python3 bench/bench_chunked_prefill.py --artifact artifacts/0.2.0/minimal-cuda12.4-sm90a

Rows: batch x (queries, keys), GQA 16/2, head dim 128 (`--head-dim`: 64 or 256), bf16. Columns: TFLOPS of the library on
contiguous KV (an SM90 varlen plan), on paged caches of 16 and 64 keys per page (pages shuffled;
the SM90 paged kernel where built), on pages of 16 through the paged family (disable_sm90: the
FA2-class kernel that served these plans before), SDPA cuDNN and flash with a lower-right causal
mask on the contiguous KV; then paged 16 / contiguous and the library (paged 16) / the faster
SDPA backend. FLOPs: 4 * H * D * (query, key) pairs the mask lets through. Timing:
common.median_ms_each (rounds in shuffled order, median of samples).

`--window W` adds a causal left window of W keys on pages of 16 (the SM90 paged kernel where
built): its TFLOPS over the pairs inside the window, and that speed per in-window score against
the same plan without the window (issue 35's bar for windows: >= 0.95). `--softcap C` adds a
logits softcap of C on pages of 16 (Gemma 2: 50; the SM90 paged softcap kernel where built): its
TFLOPS and its speed against the same plan without it (issue 35's bar for softcap: >= 0.95).
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.attention.bias import causal_lower_right

import fas_ctypes
from common import Library, fas_dtype, median_ms_each, visible_pairs
from bench_decode import paged_plan, plan_runner
from fas_ctypes import PlanArgs, PlanRunArgs

ROWS = [(16, 512, 4096), (4, 2048, 16384), (64, 128, 2048), (1, 8192, 32768)]
HEADS_Q, HEADS_KV, HEAD_DIM = 16, 2, 128


def window_fields(window: int) -> dict:
    """PlanArgs fields of a causal left window of `window` keys."""
    return {"use_window": 1, "window_size_left": window, "window_size_right": 0}


def window_mask(rows: int, queries: int, keys: int, window: int) -> torch.Tensor:
    """[rows, keys] bool: what the last `rows` of `queries` see under a causal left window."""
    diagonal = torch.arange(queries - rows, queries, device="cuda")[:, None] + keys - queries
    key = torch.arange(keys, device="cuda")[None, :]
    return (key <= diagonal) & (key >= diagonal - window)


def row_fns(lib: Library, batch: int, queries: int, keys: int, window: int = -1, softcap: float = 0.0,
            head_dim: int = HEAD_DIM):
    """(callables by column, plan infos, check): check() returns the library columns' max error
    against SDPA (math, fp32) on the same inputs."""
    torch.manual_seed(0)
    dev, dtype = "cuda", torch.bfloat16
    stream = torch.cuda.current_stream().cuda_stream
    q = torch.randn(batch, queries, HEADS_Q, head_dim, device=dev, dtype=dtype)
    k = torch.randn(batch, keys, HEADS_KV, head_dim, device=dev, dtype=dtype)
    v = torch.randn_like(k)
    out = torch.empty_like(q)
    fns, infos = {}, {}

    def runner(name, args, run):
        """A column's callable and plan info, or (a plan this build refuses) the refusal's start."""
        try:
            fns[name], _, _, infos[name] = plan_runner(lib, args, run)
        except fas_ctypes.FasError as error:
            def refused(message=str(error)):
                raise RuntimeError(message)
            fns[name] = refused  # median_ms_each reports the refusal in the column

    contiguous = PlanArgs.new(dtype=fas_dtype(q), out_dtype=fas_dtype(q), batch_size=batch, num_heads_q=HEADS_Q,
                              num_heads_k=HEADS_KV, head_dim=head_dim, causal=1, stream=stream)
    fas_ctypes.uniform_lengths(contiguous, batch, queries, keys=keys)
    runner("contiguous", contiguous,
           PlanRunArgs.new(q=q.data_ptr(), k=k.data_ptr(), v=v.data_ptr(), out=out.data_ptr(), stream=stream))
    for page in (16, 64):
        runner(f"page{page}", *paged_plan(q, k, v, out, page, stream))
    runner("page16 paged family", *paged_plan(q, k, v, out, 16, stream, disable_sm90=1))
    if window >= 0:
        runner("page16 window", *paged_plan(q, k, v, out, 16, stream, **window_fields(window)))
    if softcap > 0:
        runner("page16 softcap", *paged_plan(q, k, v, out, 16, stream, softcap=softcap))

    qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    mask = causal_lower_right(queries, keys)
    for name, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION)):
        def sdpa(backend=backend):
            with sdpa_kernel([backend]):
                F.scaled_dot_product_attention(qt, kt, vt, attn_mask=mask, enable_gqa=True)
        fns[name] = sdpa

    def check() -> float:
        """Max error of every library column on the last (up to) 256 query rows (their fp32
        reference stays within 1 GB)."""
        group, rows = HEADS_Q // HEADS_KV, min(queries, 256)
        q_rows = qt[:, :, -rows:].float()
        k_all, v_all = kt.float().repeat_interleave(group, 1), vt.float().repeat_interleave(group, 1)

        def exact(mask):
            return F.scaled_dot_product_attention(q_rows, k_all, v_all, attn_mask=mask).transpose(1, 2)

        def exact_capped():
            scores = q_rows @ k_all.transpose(-1, -2) / head_dim ** 0.5
            scores = (softcap * torch.tanh(scores / softcap)).masked_fill(~window_mask(rows, queries, keys, keys),
                                                                          float("-inf"))
            return (scores.softmax(-1) @ v_all).transpose(1, 2)

        references = {"page16 window": exact(window_mask(rows, queries, keys, window)) if window >= 0 else None,
                      "page16 softcap": exact_capped() if softcap > 0 else None}
        reference = exact(causal_lower_right(rows, keys))
        errors = []
        for name in infos:
            out.fill_(float("nan"))
            fns[name]()
            torch.cuda.synchronize()
            expected = references.get(name)
            errors.append((out[:, -rows:].float() - (reference if expected is None else expected)).abs().max())
        # NaN if any column left NaN; None when the artifact serves none of the library's columns.
        return torch.stack(errors).max().item() if errors else None

    return fns, infos, check


def format_error(error: float | None) -> str:
    return "-" if error is None else f"{error:.1e}"


def plan_text(info) -> str:
    """A plan's family, tile rows and CTAs (or that the build refused it)."""
    return f"{info.family_name.decode()}, {info.query_tile_rows}-row tiles, {info.num_ctas} CTAs" if info else "refused"


def cell(flops: float, value) -> str:
    return f"{flops / (value * 1e-3) / 1e12:.0f}" if isinstance(value, float) else str(value)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--artifact", required=True, help="exported artifact folder (lib/, include/)")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--window", type=int, default=-1, help="also time a causal left window of W keys")
    parser.add_argument("--softcap", type=float, default=0.0, help="also time a logits softcap of C")
    parser.add_argument("--head-dim", type=int, default=HEAD_DIM, choices=[64, 128, 256])
    args = parser.parse_args()
    lib = Library(args.artifact)
    print(f"GPU: {torch.cuda.get_device_name()}; library {lib.version()}; torch {torch.__version__}, "
          f"cuDNN {torch.backends.cudnn.version()}; bf16, GQA {HEADS_Q}/{HEADS_KV}, head dim {args.head_dim}, "
          "bottom-right causal; TFLOPS\n")
    columns = ("contiguous", "page16", "page64", "page16 paged family", "cudnn", "flash")
    extra = f" | paged 16, window {args.window} | per score / paged 16 | plan (window)" if args.window >= 0 else ""
    extra += f" | paged 16, softcap {args.softcap:g} | softcap / paged 16 | plan (softcap)" if args.softcap > 0 else ""
    print("| batch x (queries, keys) | ours contiguous | ours paged 16 | ours paged 64 | paged 16, paged family "
          f"| SDPA cuDNN | SDPA flash | paged 16 / contiguous | paged 16 / best SDPA | plan (paged 16){extra} | max err |")
    print("| --- " * (11 + (3 if args.window >= 0 else 0) + (3 if args.softcap > 0 else 0)) + "|")
    for batch, queries, keys in ROWS:
        fns, infos, check = row_fns(lib, batch, queries, keys, args.window, args.softcap, args.head_dim)
        times = median_ms_each(fns, args.repeats)
        flops = 4.0 * HEADS_Q * args.head_dim * batch * visible_pairs(queries, keys)
        t = {name: times.get(name) for name in columns}
        paged = t["page16"]
        sdpa = [x for x in (t["cudnn"], t["flash"]) if isinstance(x, float)]
        vs_contiguous = f"{t['contiguous'] / paged:.2f}" if isinstance(paged, float) and isinstance(t["contiguous"], float) else "n/a"
        vs_sdpa = f"{min(sdpa) / paged:.2f}x" if isinstance(paged, float) and sdpa else "n/a"
        plan = plan_text(infos.get("page16"))
        windowed = ""
        if args.window >= 0:
            in_window = 4.0 * HEADS_Q * args.head_dim * batch * visible_pairs(queries, keys, args.window)
            w = times.get("page16 window")
            per_score = (in_window / w) / (flops / paged) if isinstance(w, float) and isinstance(paged, float) else None
            windowed = (f" | {cell(in_window, w)} | {'n/a' if per_score is None else f'{per_score:.2f}'}"
                        f" | {plan_text(infos.get('page16 window'))}")
        if args.softcap > 0:
            c = times.get("page16 softcap")
            vs_plain = f"{paged / c:.2f}" if isinstance(c, float) and isinstance(paged, float) else "n/a"
            windowed += f" | {cell(flops, c)} | {vs_plain} | {plan_text(infos.get('page16 softcap'))}"
        print(f"| {batch} x ({queries}, {keys}) | " + " | ".join(cell(flops, t[name]) for name in columns)
              + f" | {vs_contiguous} | {vs_sdpa} | {plan}{windowed} | {format_error(check())} |", flush=True)
        del fns
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
