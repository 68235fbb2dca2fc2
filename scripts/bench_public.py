#!/usr/bin/env python3
"""Public baseline: FLA's fused recurrent Gated DeltaNet decode, timed with kvbuf's method.

FLA's Triton kernel (V-major state, final state written to a separate buffer) is the public
classic decode that PyTorch users run. This script measures it on the GPU at hand the way `kvbuf
sweep` measures ours, so that both sides of the comparison come from one machine and one session:
one state pool per linear layer (36 for Qwen3-Next: together far larger than the 60 MB L2) and its
own token inputs per layer, as a model's layers have (one set shared by every layer would be served
from L2), all layers of a step captured in one CUDA graph, median of many replays, latency per layer = replay
time / layers; the device copy bandwidth (bytes read + written by a 2 GiB device-to-device copy)
measured in the same run. Bytes per layer per step come from kvbuf's bytes model (`kvbuf bytes`,
mode recurrent: FLA moves the same tensors). Rows are written to the CSV as they are measured.

Needs torch and flash-linear-attention (fla-core) on a CUDA machine (--dry-run needs neither):
  python3 scripts/bench_fla.py --kvbuf build/bench/kvbuf --batch 1,64,256,512 --out results/fla_h200.csv
"""
import argparse
import csv
import os
import statistics
import subprocess
import sys
import tempfile
import time


def parse_list(text):
    try:
        values = [int(x) for x in text.split(",") if x]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of integers: {text!r}")
    if not values or any(v <= 0 for v in values):
        raise argparse.ArgumentTypeError(f"need positive integers: {text!r}")
    return values


def model_shape(kvbuf, name):
    """(H, HV, K, V, linear layers) of a catalog GDN model, from `kvbuf models`."""
    table = subprocess.run([kvbuf, "models"], check=True, capture_output=True, text=True).stdout
    for line in table.splitlines():
        f = line.split()
        if f and f[0] == name:
            if f[1] != "gdn":
                sys.exit(f"bench_fla.py: model {name} is {f[1]}, FLA's gated delta rule needs a gdn model")
            return int(f[4]), int(f[5]), int(f[6]), int(f[7]), int(f[2].split("/")[0])
    sys.exit(f"bench_fla.py: unknown model {name!r} (see `kvbuf models`)")


def recurrent_bytes(kvbuf, model, batches):
    """Bytes per layer per step of the recurrent decode, per batch, from kvbuf's bytes model."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "bytes.csv")
        subprocess.run([kvbuf, "bytes", "--model", model, "--batch", ",".join(map(str, batches)), "--csv", path,
                        "--summary"], check=True, capture_output=True)
        totals = {}
        with open(path) as f:
            for row in csv.DictReader(f):
                if row["mode"] == "recurrent":
                    b = int(row["batch"])
                    totals[b] = totals.get(b, 0.0) + float(row["total_bytes"])
    return totals


def nvml_reader(cuda_device):
    """A function returning (SM clock MHz, board power W), as kvbuf's sweep records them after each
    sample, or None where pynvml is missing. NVML numbers devices by PCI bus; CUDA does too on a
    one-GPU machine or with CUDA_DEVICE_ORDER=PCI_BUS_ID."""
    try:
        import pynvml
        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(cuda_device)
    except Exception:
        return None
    return lambda: (pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM),
                    pynvml.nvmlDeviceGetPowerUsage(handle) / 1e3)


def commit_id():
    if os.environ.get("KVBUF_COMMIT"):
        return os.environ["KVBUF_COMMIT"]
    try:
        out = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], check=True, capture_output=True, text=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True)
        return out.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kvbuf", default="build/bench/kvbuf", help="kvbuf binary (model catalog and bytes model)")
    ap.add_argument("--model", default="qwen3-next-80b-a3b")
    ap.add_argument("--batch", type=parse_list, default=parse_list("1,8,32,64,128,256,512"))
    ap.add_argument("--layer-pools", type=int, default=0, help="state pools per step (0 = the model's linear layers)")
    ap.add_argument("--budget-s", type=float, default=0.5, help="sampling time per point, seconds")
    ap.add_argument("--out", default="results/fla.csv")
    ap.add_argument("--dry-run", action="store_true", help="print the shapes and bytes per point, time nothing")
    args = ap.parse_args()
    if args.budget_s <= 0 or args.layer_pools < 0:
        ap.error("--budget-s must be > 0 and --layer-pools >= 0")
    if not os.access(args.kvbuf, os.X_OK):
        ap.error(f"--kvbuf {args.kvbuf} is not an executable")
    H, HV, K, V, layers = model_shape(args.kvbuf, args.model)
    layers = args.layer_pools or layers
    bytes_per_step = recurrent_bytes(args.kvbuf, args.model, args.batch)
    print(f"{args.model}: H={H} HV={HV} K={K} V={V}, {layers} layer pools")
    for batch in args.batch:
        print(f"batch {batch}: {bytes_per_step[batch]:.0f} bytes per layer per step, "
              f"{2 * layers * batch * HV * V * K * 4 / 2**30:.2f} GiB of states in and out")
    if args.dry_run:
        return

    try:
        import torch
        import torch.nn.functional as F
        import triton
        from importlib.metadata import version
        from fla.ops.gated_delta_rule import fused_recurrent_gated_delta_rule
    except ImportError as e:
        sys.exit(f"bench_fla.py: needs torch, triton and fla-core (pip install fla-core): {e}")
    if not torch.cuda.is_available():
        sys.exit("bench_fla.py: no CUDA device")
    dev = torch.device("cuda")
    gpu = torch.cuda.get_device_name(dev)
    commit = commit_id()
    gen = torch.Generator(device=dev).manual_seed(1)

    def inputs(batch):
        q = torch.randn(batch, 1, H, K, device=dev, generator=gen).to(torch.bfloat16)
        k = torch.randn(batch, 1, H, K, device=dev, generator=gen).to(torch.bfloat16)
        v = torch.randn(batch, 1, HV, V, device=dev, generator=gen).to(torch.bfloat16)
        g = F.logsigmoid(torch.randn(batch, 1, HV, device=dev, generator=gen))
        beta = torch.rand(batch, 1, HV, device=dev, generator=gen)
        return q, k, v, g, beta

    def step(q, k, v, g, beta, h0):
        return fused_recurrent_gated_delta_rule(q, k, v, g=g, beta=beta, scale=K ** -0.5, initial_state=h0,
                                                output_final_state=True, use_qk_l2norm_in_kernel=True,
                                                state_v_first=True)

    # The call under test must compute the recurrence (float64 check on a small batch).
    q, k, v, g, beta = inputs(3)
    h0 = torch.randn(3, HV, V, K, device=dev, generator=gen) * 0.1
    o, ht = step(q, k, v, g, beta, h0)
    kn = F.normalize(k[:, 0].double(), dim=-1).repeat_interleave(HV // H, dim=1)
    qn = F.normalize(q[:, 0].double(), dim=-1).repeat_interleave(HV // H, dim=1) * K ** -0.5
    s = h0.double() * g[:, 0].double().exp()[..., None, None]
    u = beta[:, 0].double()[..., None] * (v[:, 0].double() - torch.einsum("bhvk,bhk->bhv", s, kn))
    s = s + u[..., None] * kn[:, :, None, :]
    o_ref = torch.einsum("bhvk,bhk->bhv", s, qn)
    err_o = ((o[:, 0].double() - o_ref).norm() / o_ref.norm()).item()
    err_s = ((ht.double() - s).norm() / s.norm()).item()
    print(f"FLA check against float64: relative error output {err_o:.2e}, state {err_s:.2e}")
    if not (err_o < 1e-2 and err_s < 1e-5):
        sys.exit("bench_fla.py: FLA's output does not match the recurrence; not timing it")

    src = torch.empty(2 << 30, dtype=torch.uint8, device=dev)
    dst = torch.empty_like(src)
    times = []
    for i in range(13):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        dst.copy_(src)
        b.record()
        b.synchronize()
        if i >= 3:
            times.append(a.elapsed_time(b) * 1e-3)
    copy_gbps = 2 * src.numel() / statistics.median(times) / 1e9
    del src, dst
    print(f"copy bandwidth {copy_gbps:.0f} GB/s (read + written); GPU {gpu}; commit {commit}; {layers} layer pools")

    telemetry = nvml_reader(torch.cuda.current_device())
    fields = ["model", "kernel", "batch", "layers", "latency_us_median", "latency_us_min", "latency_us_max", "samples",
              "bytes_per_layer_step", "gbps", "frac_copy_bw", "copy_gbps", "sm_clock_mhz", "power_w", "gpu", "commit",
              "fla_version", "torch_version", "triton_version"]
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        f.flush()
        for batch in args.batch:
            need = 2 * layers * batch * HV * V * K * 4
            free, _ = torch.cuda.mem_get_info()
            if need > 0.9 * free:
                print(f"skip batch {batch}: {need / 2**30:.1f} GiB of states in and out, {free / 2**30:.1f} GiB free")
                continue
            ios = [inputs(batch) for _ in range(layers)]
            pools = [torch.randn(batch, HV, V, K, device=dev, generator=gen) * 0.1 for _ in range(layers)]
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):  # compile and warm outside the capture
                for io, h in zip(ios, pools):
                    step(*io, h)
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                outs = [step(*io, h) for io, h in zip(ios, pools)]  # each layer's output and final state stay allocated
            for _ in range(3):
                graph.replay()
            torch.cuda.synchronize()
            samples, readings, start = [], [], time.perf_counter()
            while len(samples) < 5 or (time.perf_counter() - start < args.budget_s and len(samples) < 1000):
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                graph.replay()
                b.record()
                b.synchronize()
                samples.append(a.elapsed_time(b) * 1e3 / layers)
                if telemetry:
                    readings.append(telemetry())
            med = statistics.median(samples)
            nbytes = bytes_per_step[batch]
            gbps = nbytes / (med * 1e-6) / 1e9
            row = dict(model=args.model, kernel="fla-fused-recurrent-vfirst-oop", batch=batch, layers=layers,
                       latency_us_median=f"{med:.4f}", latency_us_min=f"{min(samples):.4f}",
                       latency_us_max=f"{max(samples):.4f}", samples=len(samples), bytes_per_layer_step=f"{nbytes:.0f}",
                       gbps=f"{gbps:.2f}", frac_copy_bw=f"{gbps / copy_gbps:.4f}", copy_gbps=f"{copy_gbps:.1f}",
                       sm_clock_mhz=f"{statistics.mean(r[0] for r in readings):.0f}" if readings else "",
                       power_w=f"{statistics.mean(r[1] for r in readings):.1f}" if readings else "", gpu=gpu,
                       commit=commit, fla_version=version("fla-core"), torch_version=torch.__version__,
                       triton_version=triton.__version__)
            w.writerow(row)
            f.flush()
            print(f"batch {batch:4d}: {med:9.2f} us per layer ({gbps:.0f} GB/s, {gbps / copy_gbps:.1%} of copy)")
            del graph, outs, pools, ios
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
