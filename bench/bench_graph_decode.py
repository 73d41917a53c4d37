"""Device-length decode replayed from a CUDA graph (issue 34, DEVICE LENGTHS) against host-length
plans: bf16, head dim 128, pages of 16 (shuffled), bench_decode's rows and layer count.

    python3 bench/bench_graph_decode.py --artifact DIR [--rows 64x4096:16/2 ...] [--layers 36] [--repeats 7]

A step is one decode step of a model: every layer's attention over the same lengths.
  host:  a plan made on the host for the row's lengths, run once per layer (eager launches);
  graph: a device-length plan made for the row (capacity = the row's lengths, block table of the
         same pages), one CUDA graph captured once of fas_plan_update + a run per layer, replayed.
Both write their own output; after timing, the two must be equal bit for bit (printed). Timing:
common.median_ms_each, both in the same rounds; issue 34's bar: graph / host <= 1.03 per row.
--profile adds, per row, each kernel's mean duration and the time no kernel ran, per layer, for
both (profile_decode.kernels_of: CUPTI through torch.profiler): where a graph step's extra time
goes (a merge node per layer, gaps between the graph's nodes).
"""

from __future__ import annotations

import argparse
import ctypes

import torch

import fas_ctypes
from bench_decode import DEFAULT_ROWS, parse_row
from common import Library, median_ms_each
from profile_decode import kernels_of
from fas_ctypes import FasError, PlanArgs, PlanRunArgs, PlanUpdateArgs

PAGE = 16
HEAD_DIM = 128


def plan_args(batch: int, queries: int, kv_len: int, heads_q: int, heads_kv: int, num_pages: int, stream: int,
              device_lengths: bool, stride: int) -> PlanArgs:
    return fas_ctypes.uniform_paged_args(fas_ctypes.Dtype.BF16, batch, queries, kv_len, heads_q, heads_kv, HEAD_DIM,
                                         PAGE, num_pages, stream, device_lengths=int(device_lengths),
                                         max_pages_per_sequence=stride if device_lengths else 0)


def print_profile(label: str, fn, layers: int) -> None:
    """Each kernel's mean duration and the idle time, per layer of a step."""
    result = kernels_of(fn, 5)
    if result is None:
        print(f"|   {label} | no kernels recorded | | |")
        return
    period, kernels, idle = result
    print(f"|   {label} | a layer: {period / layers:.1f} us, idle {idle / layers:.2f} us | | |")
    for name, (mean, count) in sorted(kernels.items(), key=lambda kv: -kv[1][0]):
        print(f"|   | {name[:60]} | {mean:.2f} us | {count} |")


def graph_row(lib: Library, batch: int, kv_len: int, heads_q: int, heads_kv: int, queries: int, layers: int,
              repeats: int, profile: bool = False):
    stream = torch.cuda.current_stream().cuda_stream
    dev, bf16 = "cuda", torch.bfloat16
    stride = -(-kv_len // PAGE)
    num_pages = batch * stride
    k_cache = torch.randn(num_pages, PAGE, heads_kv, HEAD_DIM, device=dev, dtype=bf16)
    v_cache = torch.randn_like(k_cache)
    table = torch.randperm(num_pages, device=dev).to(torch.int32).view(batch, stride).contiguous()
    q = torch.randn(batch * queries, heads_q, HEAD_DIM, device=dev, dtype=bf16)
    outs = {name: torch.empty_like(q) for name in ("host", "graph")}
    lengths = torch.full((batch,), kv_len, device=dev, dtype=torch.int32)
    host = lib.plan_create(plan_args(batch, queries, kv_len, heads_q, heads_kv, num_pages, stream, False, 0))
    device = lib.plan_create(plan_args(batch, queries, kv_len, heads_q, heads_kv, num_pages, stream, True, stride))
    runs = {name: PlanRunArgs.new(q=q.data_ptr(), k=k_cache.data_ptr(), v=v_cache.data_ptr(),
                                  out=outs[name].data_ptr(), stream=0, page_indices=table.data_ptr())
            for name in ("host", "graph")}  # full rows: the CSR table is the block table flattened

    def host_step():
        runs["host"].stream = torch.cuda.current_stream().cuda_stream
        for _ in range(layers):
            lib.check(lib.dll.fas_plan_run(host, ctypes.byref(runs["host"])))

    graph = torch.cuda.CUDAGraph()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side), torch.cuda.graph(graph, stream=side, capture_error_mode="thread_local"):
        capturing = torch.cuda.current_stream().cuda_stream
        update = PlanUpdateArgs.new(kv_lengths=lengths.data_ptr(), stream=capturing)
        runs["graph"].stream = capturing
        lib.check(lib.dll.fas_plan_update(device, ctypes.byref(update)))
        for _ in range(layers):
            lib.check(lib.dll.fas_plan_run(device, ctypes.byref(runs["graph"])))
    torch.cuda.current_stream().wait_stream(side)

    host_step()
    graph.replay()
    torch.cuda.synchronize()
    equal = torch.equal(outs["host"], outs["graph"])
    times = median_ms_each({"host": host_step, "graph": graph.replay}, repeats)
    if profile:
        print_profile("host", host_step, layers)
        print_profile("graph", graph.replay, layers)
    info = lib.plan_info(device)
    for plan in (host, device):
        lib.check(lib.dll.fas_plan_destroy(plan))
    return times, equal, info


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--artifact", required=True, help="an unpacked artifact folder (lib/, include/)")
    parser.add_argument("--rows", nargs="+", default=DEFAULT_ROWS, help="BATCHxKV[:HQ/HK][:qN] rows")
    parser.add_argument("--layers", type=int, default=36)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--profile", action="store_true", help="kernel durations and idle time per layer")
    args = parser.parse_args()
    lib = Library(args.artifact)
    print(f"{torch.cuda.get_device_name()}, flash_attn_standalone {lib.version()}, bf16 hd{HEAD_DIM}, pages of {PAGE}, "
          f"{args.layers} layers a step")
    print("| batch x KV | heads | q | host step | graph step | graph / host | equal bits | splits, CTAs/SM |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for row in args.rows:
        batch, kv_len, heads_q, heads_kv, queries = parse_row(row)
        try:
            times, equal, info = graph_row(lib, batch, kv_len, heads_q, heads_kv, queries, args.layers, args.repeats,
                                           args.profile)
        except FasError as error:  # e.g. rows past the decode kernel's tiles on this card
            print(f"| {batch} x {kv_len} | {heads_q}/{heads_kv} | {queries} | - | - | - | - | {error.message} |", flush=True)
            continue
        host, graph = times["host"], times["graph"]
        ratio = f"{graph / host:.3f}" if isinstance(host, float) and isinstance(graph, float) else "-"
        show = [f"{t * 1e3:.0f} us" if isinstance(t, float) else t for t in (host, graph)]
        print(f"| {batch} x {kv_len} | {heads_q}/{heads_kv} | {queries} | {show[0]} | {show[1]} | {ratio} | "
              f"{'yes' if equal else 'NO'} | {info.kv_splits}, {info.ctas_per_sm} |", flush=True)


if __name__ == "__main__":
    main()
