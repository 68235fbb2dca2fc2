#!/usr/bin/env python3
"""What the Python binding costs: a Python call of kvbuf.gdn_decode_kvbuffer (the KVBuffer decode)
against the same launch from C++, and under torch.cuda.graph.

  C++        kvbuf._C._time_launches: the same keyword arguments, imported and checked once, then the
             kernel's dispatch (gdn_decode_kvbuffer, as an engine's C++ would call it) n times in a
             C++ loop;
  Python     the same call n times in a Python loop, every call importing (DLPack) and checking its
             arguments and resolving the current stream;
  graph      n calls captured in one CUDA graph (torch.cuda.graph for Python, stream capture for
             C++) and replayed: the host launches nothing per call, so the two must agree.
host_us is the host time per call of a loop of n calls (below the launch queue's depth, so the GPU
does not pace it), wall_us that loop and its synchronisation per call, graph_us a replay per call
(CUDA events). Medians of --reps loops. The check: Python's host_us at most --limit-us (5) above
C++'s; graph_us within 5% (or 0.2 us) of each other. Exit 1 when a check fails.

Needs torch and kvbuf (pip install .) on an sm_80+ GPU:
  python3 scripts/py_overhead.py [--batch 1,64] [--out results/py_overhead_h200.csv]
"""
import argparse
import csv
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python", "tests"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", default="1,64", help="request rows per call, comma separated")
    ap.add_argument("--capacity", type=int, default=8)
    ap.add_argument("--n", type=int, default=200, help="calls per timed loop")
    ap.add_argument("--reps", type=int, default=30, help="timed loops (medians)")
    ap.add_argument("--limit-us", type=float, default=5.0)
    ap.add_argument("--out", help="also write the rows to this CSV")
    args = ap.parse_args()

    import torch
    import kvbuf
    import references as ref

    if not torch.cuda.is_available():
        sys.exit("py_overhead.py: no CUDA device")
    dev = torch.device("cuda")
    gpu = torch.cuda.get_device_name(dev)
    H, HV, K, V = 16, 32, 128, 128  # Qwen3-Next's linear layers
    gen = torch.Generator(device=dev).manual_seed(0)
    rows, ok = [], True
    for batch in (int(b) for b in args.batch.split(",")):
        cache = kvbuf.KVBufferCache.gdn(max_requests=batch, num_heads=H, num_value_heads=HV, head_k_dim=K,
                                        head_v_dim=V, capacity=args.capacity, device=dev)
        slots = cache.slot_tensor([cache.allocate(initial_state=0.1 * torch.randn(HV, V, K, generator=gen, device=dev))
                                   for _ in range(batch)])
        x = ref.gdn_inputs(gen, batch, H, HV, K, V, dev)
        out = torch.empty(batch, HV, V, dtype=torch.bfloat16, device=dev)
        kw = dict(slot=slots, out=out, done_count=cache._done_count[0], **cache._pools[0], **x)
        f = kvbuf.gdn_decode_kvbuffer

        cxx = kvbuf._C._time_launches("gdn_decode_kvbuffer", args.n, args.reps, True, kw)

        def py_loop(call):
            host, wall = [], []
            for _ in range(args.reps):
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                for _ in range(args.n):
                    call()
                t1 = time.perf_counter()
                torch.cuda.synchronize()
                t2 = time.perf_counter()
                host.append((t1 - t0) * 1e6 / args.n)
                wall.append((t2 - t0) * 1e6 / args.n)
            return statistics.median(host), statistics.median(wall)

        for _ in range(3):
            f(**kw)
        py_host, py_wall = py_loop(lambda: f(**kw))
        py_alloc_host, _ = py_loop(lambda: f(**{**kw, "out": None}))
        py_cache_host, _ = py_loop(lambda: cache.step(slots, out=out, **x))

        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            f(**kw)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(args.n):
                f(**kw)
        graph.replay()
        torch.cuda.synchronize()
        per = []
        for _ in range(args.reps):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            graph.replay()
            b.record()
            b.synchronize()
            per.append(a.elapsed_time(b) * 1e3 / args.n)
        py_graph = statistics.median(per)

        extra = py_host - cxx["host_us"]
        graph_gap = abs(py_graph - cxx["graph_us"])
        host_ok = extra <= args.limit_us
        graph_ok = graph_gap <= max(0.05 * cxx["graph_us"], 0.2)
        ok &= host_ok and graph_ok
        print(f"batch {batch}: host us per call: C++ {cxx['host_us']:.2f}, Python {py_host:.2f} "
              f"(+{extra:.2f}, limit {args.limit_us}: {'ok' if host_ok else 'FAIL'}); Python with out=None "
              f"{py_alloc_host:.2f}, KVBufferCache.step {py_cache_host:.2f}")
        print(f"batch {batch}: wall us per call: C++ {cxx['wall_us']:.2f}, Python {py_wall:.2f}; "
              f"graph replay us per call: C++ {cxx['graph_us']:.2f}, Python {py_graph:.2f} "
              f"({'ok' if graph_ok else 'FAIL'})")
        rows.append(dict(kernel="gdn_decode_kvbuffer", batch=batch, capacity=args.capacity, n=args.n, reps=args.reps,
                         cxx_host_us=f"{cxx['host_us']:.3f}", py_host_us=f"{py_host:.3f}",
                         py_host_out_none_us=f"{py_alloc_host:.3f}", py_cache_step_host_us=f"{py_cache_host:.3f}",
                         cxx_wall_us=f"{cxx['wall_us']:.3f}", py_wall_us=f"{py_wall:.3f}",
                         cxx_graph_us=f"{cxx['graph_us']:.3f}", py_graph_us=f"{py_graph:.3f}", gpu=gpu,
                         torch_version=torch.__version__, kvbuf_version=kvbuf.__version__, commit=commit_id()))
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
        print(f"wrote {args.out}")
    return 0 if ok else 1


def commit_id():
    try:
        out = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], check=True, capture_output=True, text=True,
                             cwd=HERE)
        return out.stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


if __name__ == "__main__":
    sys.exit(main())
