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
each mode (profile_decode.kernels_of: CUPTI through torch.profiler). --modes adds three steps timed
in the same rounds: the host plan in a graph (what a graph alone gains), the device plan eager with
its update, and its graph without the update (run once before): whether a graph step's extra time
is the graph's, the update's or the device plan's own runs (all bits compared). --fwd adds fas_fwd
over the same keys as contiguous batch-layout tensors: a step of eager calls, and the same step
captured once and replayed (fas_fwd makes its plan inside each call, captured or not), timed in
their own rounds, with their bits compared to each other.
"""

from __future__ import annotations

import argparse
import ctypes

import torch

import fas_ctypes
from bench_decode import DEFAULT_ROWS, parse_row
from common import Library, median_ms_each, ratio
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


def capture(step) -> torch.cuda.CUDAGraph:
    """A CUDA graph of step(stream), captured on a side stream."""
    graph = torch.cuda.CUDAGraph()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side), torch.cuda.graph(graph, stream=side, capture_error_mode="thread_local"):
        step(torch.cuda.current_stream().cuda_stream)
    torch.cuda.current_stream().wait_stream(side)
    return graph


# --modes: where a graph step's extra time goes. Each mode is (plan kind, update in the step, in a graph).
MODES = {"host": ("host", False, False), "graph": ("device", True, True),
         "host in a graph": ("host", False, True), "device eager": ("device", True, False),
         "graph, update outside": ("device", False, True)}


def graph_row(lib: Library, batch: int, kv_len: int, heads_q: int, heads_kv: int, queries: int, layers: int,
              repeats: int, profile: bool = False, modes: tuple = ("host", "graph")):
    dev, bf16 = "cuda", torch.bfloat16
    stream = torch.cuda.current_stream().cuda_stream
    stride = -(-kv_len // PAGE)
    num_pages = batch * stride
    k_cache = torch.randn(num_pages, PAGE, heads_kv, HEAD_DIM, device=dev, dtype=bf16)
    v_cache = torch.randn_like(k_cache)
    table = torch.randperm(num_pages, device=dev).to(torch.int32).view(batch, stride).contiguous()
    q = torch.randn(batch * queries, heads_q, HEAD_DIM, device=dev, dtype=bf16)
    lengths = torch.full((batch,), kv_len, device=dev, dtype=torch.int32)
    outs, plans, fns = {}, {}, {}
    for mode in modes:  # a plan and an output per mode, so that every mode's bits can be compared
        kind, update, in_graph = MODES[mode]
        device = kind == "device"
        plan = lib.plan_create(plan_args(batch, queries, kv_len, heads_q, heads_kv, num_pages, stream, device,
                                         stride if device else 0))
        plans[mode] = plan
        outs[mode] = torch.empty_like(q)
        run = PlanRunArgs.new(q=q.data_ptr(), k=k_cache.data_ptr(), v=v_cache.data_ptr(), out=outs[mode].data_ptr(),
                              stream=0, page_indices=table.data_ptr())  # full rows: the CSR table is the block table

        def step(on_stream, plan=plan, run=run, update=update):
            run.stream = on_stream
            if update:
                lib.check(lib.dll.fas_plan_update(plan, ctypes.byref(
                    PlanUpdateArgs.new(kv_lengths=lengths.data_ptr(), stream=on_stream))))
            for _ in range(layers):
                lib.check(lib.dll.fas_plan_run(plan, ctypes.byref(run)))

        # Eagerly once first: a host plan's schedule upload, and the update of a graph that leaves it out.
        step(stream, update=update or device)
        torch.cuda.synchronize()
        fns[mode] = capture(step).replay if in_graph else (
            lambda step=step: step(torch.cuda.current_stream().cuda_stream))
    for fn in fns.values():
        fn()
    torch.cuda.synchronize()
    equal = all(torch.equal(outs[modes[0]], out) for out in outs.values())
    times = median_ms_each(fns, repeats)
    if profile:
        for mode in modes:
            print_profile(mode, fns[mode], layers)
    info = lib.plan_info(plans["graph"])
    for plan in plans.values():
        lib.check(lib.dll.fas_plan_destroy(plan))
    return times, equal, info


def fwd_row(lib: Library, batch: int, kv_len: int, heads_q: int, heads_kv: int, queries: int, layers: int,
            repeats: int):
    """(times of an eager and a captured step of fas_fwd calls, whether their outputs are equal)."""
    dev, bf16 = "cuda", torch.bfloat16
    q = torch.randn(batch, queries, heads_q, HEAD_DIM, device=dev, dtype=bf16)
    k = torch.randn(batch, kv_len, heads_kv, HEAD_DIM, device=dev, dtype=bf16)
    v = torch.randn_like(k)
    outs, fns = {}, {}
    for mode in ("fwd eager", "fwd graph"):
        outs[mode] = torch.empty_like(q)
        forward = lib.forward_fn(q, k, v, outs[mode], True)

        def step(on_stream, forward=forward):
            for _ in range(layers):
                forward(on_stream)

        step(torch.cuda.current_stream().cuda_stream)
        torch.cuda.synchronize()
        fns[mode] = capture(step).replay if mode == "fwd graph" else (
            lambda step=step: step(torch.cuda.current_stream().cuda_stream))
    for fn in fns.values():
        fn()
    torch.cuda.synchronize()
    return median_ms_each(fns, repeats), torch.equal(outs["fwd eager"], outs["fwd graph"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--artifact", required=True, help="an unpacked artifact folder (lib/, include/)")
    parser.add_argument("--rows", nargs="+", default=DEFAULT_ROWS, help="BATCHxKV[:HQ/HK][:qN] rows")
    parser.add_argument("--layers", type=int, default=36)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--profile", action="store_true", help="kernel durations and idle time per layer")
    parser.add_argument("--modes", action="store_true",
                        help="also the host plan in a graph, the device plan eager and its graph without the update")
    parser.add_argument("--fwd", action="store_true", help="also fas_fwd steps, eager and captured")
    args = parser.parse_args()
    modes = tuple(MODES) if args.modes else ("host", "graph")
    extra = modes[2:]
    fwd_columns = " fwd eager step | fwd graph step | fwd graph / eager | fwd equal bits |" if args.fwd else ""
    lib = Library(args.artifact)
    print(f"{torch.cuda.get_device_name()}, flash_attn_standalone {lib.version()}, bf16 hd{HEAD_DIM}, pages of {PAGE}, "
          f"{args.layers} layers a step")
    print("| batch x KV | heads | q | host step | graph step | graph / host | equal bits | splits, CTAs/SM |"
          + "".join(f" {mode} / host |" for mode in extra) + fwd_columns)
    print("| --- " * (8 + len(extra) + 4 * args.fwd) + "|")
    for row in args.rows:
        batch, kv_len, heads_q, heads_kv, queries = parse_row(row)
        try:
            times, equal, info = graph_row(lib, batch, kv_len, heads_q, heads_kv, queries, args.layers, args.repeats,
                                           args.profile, modes)
        except FasError as error:  # e.g. rows past the decode kernel's tiles on this card
            print(f"| {batch} x {kv_len} | {heads_q}/{heads_kv} | {queries} | - | - | - | - | {error.message} |"
                  + " - |" * len(extra), flush=True)
            continue
        host = times["host"]
        show = [f"{t * 1e3:.0f} us" if isinstance(t, float) else t for t in (host, times["graph"])]
        cells = ""
        if args.fwd:
            fwd_times, fwd_equal = fwd_row(lib, batch, kv_len, heads_q, heads_kv, queries, args.layers, args.repeats)
            eager, graph = fwd_times["fwd eager"], fwd_times["fwd graph"]
            cells = (f" {eager * 1e3:.0f} us | {graph * 1e3:.0f} us | {ratio(eager, graph, 3)} |"
                     f" {'yes' if fwd_equal else 'NO'} |")
        print(f"| {batch} x {kv_len} | {heads_q}/{heads_kv} | {queries} | {show[0]} | {show[1]} | "
              f"{ratio(host, times['graph'], 3)} | {'yes' if equal else 'NO'} | {info.kv_splits}, {info.ctas_per_sm} |"
              + "".join(f" {ratio(host, times[mode], 3)} |" for mode in extra) + cells, flush=True)


if __name__ == "__main__":
    main()
