#!/usr/bin/env python3
"""Public baselines: the decode kernels that install by name from PyPI, timed with kvbuf's method.

  fla         fla-core's fused_recurrent_gated_delta_rule (Triton; V-first state, the final state to a
              separate buffer: out of place), Gated DeltaNet; kernel id fla-fused-recurrent-vfirst-oop
  flashinfer  FlashInfer's gated_delta_rule_decode_pretranspose on a state pool with indices (in
              place), Gated DeltaNet, where it runs (JIT-compiled there; its fp32 state path needs
              K, V >= 128); kernel id flashinfer-gdn-decode-pretranspose
  mamba-ssm   mamba-ssm's Triton selective_state_update on a state pool with state_batch_indices (in
              place; the z gate and dt's softplus in the kernel, as kvbuf's sweep runs its Mamba-2
              kernels), Mamba-2; kernel id mamba-ssm-selective-state-update
(scripts/public_kernels.py loads them; mamba-ssm without its CUDA extension.)

The method is `kvbuf sweep`'s, so that both sides of a comparison come from one machine and one
session: one state pool per linear layer (the model's linear layers, together far larger than the
60 MB L2) and its own token inputs per layer, as a model's layers have; all layers of a step captured
in one CUDA graph; median of many replays; latency per layer = replay time / layers; the device copy
bandwidth (bytes read + written by a 2 GiB device-to-device copy) measured in the same run. Bytes per
layer per step come from kvbuf's bytes model (`kvbuf bytes`, mode recurrent: these kernels move the
recurrent decode's tensors). Before it is timed, each kernel's step is checked against the float64
step of python/tests/references.py on a small batch (not timed if it disagrees). Rows are written to
the CSV as they are measured, each with its package's version, torch's and triton's, the SM clock and
board power (pynvml, where it imports), and in its note, as kvbuf's sweep writes it, whether the
driver held the SM clock down while it was timed (the power cap, a hardware or thermal slowdown).

Public kernels that do not install by name (vLLM's, ReplaySSM's) stay recorded figures, with their
source, date and GPU: results/public_mamba2_<gpu>.csv, results/public_16bit_<gpu>.csv.

Needs torch and the packages on a CUDA machine (--dry-run needs neither):
  python3 scripts/bench_public.py --kvbuf build/bench/kvbuf --out results/public_h200.csv
"""
import argparse
import csv
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "python", "tests"))

from results_csv import CLOCK_LIMITED  # noqa: E402

KERNELS = {  # name -> (kernel id in the CSV, family, loader in public_kernels.py)
    "fla": ("fla-fused-recurrent-vfirst-oop", "gdn", "fla_fused_recurrent"),
    "flashinfer": ("flashinfer-gdn-decode-pretranspose", "gdn", "flashinfer_gdn_decode"),
    "mamba-ssm": ("mamba-ssm-selective-state-update", "mamba2", "mamba_selective_state_update"),
}
PACKAGES = {"fla": "fla-core", "flashinfer": "flashinfer-python", "mamba-ssm": "mamba-ssm"}
FIELDS = ["model", "kernel", "package", "package_version", "state_dtype", "batch", "layers", "latency_us_median",
          "latency_us_min", "latency_us_max", "samples", "bytes_per_layer_step", "gbps", "frac_copy_bw", "copy_gbps",
          "sm_clock_mhz", "power_w", "gpu", "commit", "torch_version", "triton_version", "note"]
# As kvbuf's sweep (bench/gpu_telemetry.h): NVML's clock event reason bits that slow a timed kernel,
# by cause (the note starts with results_csv.CLOCK_LIMITED).
CLOCK_CAUSES = (("power cap", 0x4), ("hardware slowdown", 0x8 | 0x80), ("thermal slowdown", 0x20 | 0x40))


def parse_list(text, cast=int):
    try:
        values = [cast(x) for x in text.split(",") if x]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list: {text!r}")
    if not values or (cast is int and any(v <= 0 for v in values)):
        raise argparse.ArgumentTypeError(f"need positive integers: {text!r}")
    return values


def model_shape(kvbuf, name, family):
    """(H, HV, K, V, linear layers) of a catalog model of `family` (Mamba-2: G, NH, N, P), from
    `kvbuf models`."""
    table = subprocess.run([kvbuf, "models"], check=True, capture_output=True, text=True).stdout
    for line in table.splitlines():
        f = line.split()
        if f and f[0] == name:
            if f[1] != family:
                sys.exit(f"bench_public.py: model {name} is {f[1]}, the {family} kernels need a {family} model")
            return int(f[4]), int(f[5]), int(f[6]), int(f[7]), int(f[2].split("/")[0])
    sys.exit(f"bench_public.py: unknown model {name!r} (see `kvbuf models`)")


def recurrent_bytes(kvbuf, model, batches, state_dtype):
    """Bytes per layer per step of the recurrent decode, per batch, from kvbuf's bytes model."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "bytes.csv")
        subprocess.run([kvbuf, "bytes", "--model", model, "--batch", ",".join(map(str, batches)), "--state-dtype",
                        state_dtype, "--csv", path, "--summary"], check=True, capture_output=True)
        totals = {}
        with open(path) as f:
            for row in csv.DictReader(f):
                if row["mode"] == "recurrent":
                    b = int(row["batch"])
                    totals[b] = totals.get(b, 0.0) + float(row["total_bytes"])
    return totals


def nvml_reader(cuda_device):
    """A function returning (SM clock MHz, board power W, clock event reason bits or None), as kvbuf's
    sweep records them after each sample, or None where pynvml is missing. NVML numbers devices by
    PCI bus; CUDA does too on a one-GPU machine or with CUDA_DEVICE_ORDER=PCI_BUS_ID."""
    try:
        import pynvml
        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(cuda_device)
    except Exception:
        return None
    # Drivers before r535 name the reasons "throttle" reasons.
    reasons = (getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
               or getattr(pynvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None))

    def read():
        bits = None
        if reasons:
            try:
                bits = reasons(handle)
            except Exception:
                pass
        return (pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM),
                pynvml.nvmlDeviceGetPowerUsage(handle) / 1e3, bits)
    return read


def clock_limit_note(readings):
    """kvbuf sweep's note for these (clock, power, reason bits) readings: '' when no sample found the
    SM clock held down, else e.g. 'SM clock held down while timed: power cap in 37 of 50 samples'."""
    known = [r[2] for r in readings if r[2] is not None]
    causes = [f"{name} in {sum(1 for b in known if b & mask)} of {len(known)} samples"
              for name, mask in CLOCK_CAUSES if any(b & mask for b in known)]
    return f"{CLOCK_LIMITED}: " + ", ".join(causes) if causes else ""


def commit_id():
    if os.environ.get("KVBUF_COMMIT"):
        return os.environ["KVBUF_COMMIT"]
    try:
        out = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], check=True, capture_output=True, text=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True)
        return out.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


# ---- the kernels: per layer, its pool and inputs (make) and one decode step (step) ----

class Gdn:
    def __init__(self, torch, H, HV, K, V, dev, gen, state_dtype):
        self.torch, self.H, self.HV, self.K, self.V, self.dev, self.gen = torch, H, HV, K, V, dev, gen
        self.state_dtype = state_dtype

    def inputs(self, batch):
        import references as ref
        x = ref.gdn_inputs(self.gen, batch, self.H, self.HV, self.K, self.V, self.dev)
        x["a"] = ref.bf16_randn(self.gen, batch, self.HV, device=self.dev)
        x["b"] = ref.bf16_randn(self.gen, batch, self.HV, device=self.dev)
        x["A_log"] = 0.5 * self.torch.randn(self.HV, generator=self.gen, device=self.dev)
        x["dt_bias"] = 0.5 * self.torch.randn(self.HV, generator=self.gen, device=self.dev)
        return x

    def pool(self, batch):
        return (0.1 * self.torch.randn(batch, self.HV, self.V, self.K, generator=self.gen, device=self.dev)).to(
            self.state_dtype)


class FlaStep(Gdn):
    """Out of place, as FLA runs: reads h, writes a new final state."""
    gates = "g"

    def step(self, fn, x, h):
        t = lambda a: a[:, None]  # noqa: E731
        o, ht = fn(t(x["q"]), t(x["k"]), t(x["v"]), g=t(x["g"]), beta=t(x["beta"]), scale=self.K ** -0.5,
                   initial_state=h, output_final_state=True, use_qk_l2norm_in_kernel=True, state_v_first=True)
        return o[:, 0], ht


class FlashInferStep(Gdn):
    """In place on the pool, slots by index, gates from a and b in the kernel."""
    gates = "ab"

    def step(self, fn, x, h):
        idx = self.torch.arange(h.shape[0], dtype=self.torch.int32, device=self.dev)
        t = lambda a: a[:, None]  # noqa: E731
        o, _ = fn(t(x["q"]), t(x["k"]), t(x["v"]), None, x["A_log"], t(x["a"]), x["dt_bias"], t(x["b"]),
                  scale=self.K ** -0.5, initial_state=h, initial_state_indices=idx)
        return o[:, 0], h


class MambaStep:
    """In place on the pool with state_batch_indices; per-head dt, A, D, dt_bias as mamba-ssm's
    stride-0 per-(head, dim) views; z gate and softplus in the kernel."""
    gates = None

    def __init__(self, torch, G, NH, N, P, dev, gen, state_dtype):
        self.torch, self.G, self.NH, self.N, self.P, self.dev, self.gen = torch, G, NH, N, P, dev, gen
        self.state_dtype = state_dtype

    def inputs(self, batch):
        import references as ref
        return {**ref.mamba2_inputs(self.gen, batch, self.G, self.NH, self.P, self.N, self.dev),
                **ref.mamba2_params(self.gen, self.NH, self.dev)}

    def pool(self, batch):
        return (0.1 * self.torch.randn(batch, self.NH, self.P, self.N, generator=self.gen, device=self.dev)).to(
            self.state_dtype)

    def step(self, fn, x, h):
        B, NH, P, N = h.shape[0], self.NH, self.P, self.N
        idx = self.torch.arange(B, dtype=self.torch.int32, device=self.dev)
        y = fn(h, x["x"], x["dt"][..., None].expand(B, NH, P), x["A"][:, None, None].expand(NH, P, N), x["B"], x["C"],
               D=x["D"][:, None].expand(NH, P), z=x["z"], dt_bias=x["dt_bias"][:, None].expand(NH, P),
               dt_softplus=True, state_batch_indices=idx)
        return y, h


def check_against_float64(kernel, fn, torch):
    """One step on 3 rows against python/tests/references.py: output within the bf16 rounding plus
    fp32 arithmetic (2^-8 + 1e-4, norm-wise per row; a bf16 state + 2^-7), state within 1e-4 (+ 2^-7)."""
    import references as ref
    x = kernel.inputs(3)
    h = kernel.pool(3)
    h0 = h.double()
    if isinstance(kernel, MambaStep):
        o64, s64 = ref.mamba2_step(h0, **{k: x[k] for k in ("x", "dt", "A", "B", "C", "D", "z", "dt_bias")})
    else:
        if kernel.gates == "ab":
            g, beta = ref.gdn_gates(x["a"], x["b"], x["A_log"], x["dt_bias"])
        else:
            g, beta = x["g"], x["beta"]
        o64, s64 = ref.gdn_step(h0, q=x["q"], k=x["k"], v=x["v"], g=g, beta=beta)
    o, s = kernel.step(fn, x, h)
    torch.cuda.synchronize()
    extra = 0.0 if kernel.state_dtype == torch.float32 else 2 * ref.U16
    want = s64 if s.dtype == torch.float32 else s64.to(s.dtype).double()
    err_o = ref.rel_err(o, o64, (-2, -1)).max().item()
    err_s = ref.rel_err(s, want, (-3, -2, -1)).max().item()
    return err_o, err_s, err_o <= ref.U16 + 1e-4 + extra and err_s <= 1e-4 + extra


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kvbuf", default="build/bench/kvbuf", help="kvbuf binary (model catalog and bytes model)")
    ap.add_argument("--kernels", type=lambda s: parse_list(s, str), default=list(KERNELS),
                    help=f"comma separated, of {', '.join(KERNELS)} (default all; missing packages are skipped)")
    ap.add_argument("--gdn-model", default="qwen3-next-80b-a3b")
    ap.add_argument("--mamba2-model", default="nemotron-3-nano-30b-a3b")
    ap.add_argument("--batch", type=parse_list, default=parse_list("1,8,32,64,128,256,512"))
    ap.add_argument("--state-dtype", type=lambda s: parse_list(s, str), default=["fp32"],
                    help="fp32 and/or bf16 (fla: fp32 only, its final state is fp32)")
    ap.add_argument("--layer-pools", type=int, default=0, help="state pools per step (0 = the model's linear layers)")
    ap.add_argument("--budget-s", type=float, default=0.5, help="sampling time per point, seconds")
    ap.add_argument("--out", default="results/public.csv")
    ap.add_argument("--dry-run", action="store_true", help="print the shapes and bytes per point, time nothing")
    args = ap.parse_args()
    if args.budget_s <= 0 or args.layer_pools < 0:
        ap.error("--budget-s must be > 0 and --layer-pools >= 0")
    unknown = [k for k in args.kernels if k not in KERNELS]
    if unknown:
        ap.error(f"unknown kernel(s) {', '.join(unknown)} (known: {', '.join(KERNELS)})")
    bad = [s for s in args.state_dtype if s not in ("fp32", "bf16")]
    if bad:
        ap.error(f"--state-dtype takes fp32 and bf16, not {', '.join(bad)}")
    if not os.access(args.kvbuf, os.X_OK):
        ap.error(f"--kvbuf {args.kvbuf} is not an executable")

    plan = []  # (name, model, shape, layers, state_dtype, bytes per batch)
    for name in args.kernels:
        family = KERNELS[name][1]
        model = args.gdn_model if family == "gdn" else args.mamba2_model
        *shape, layers = model_shape(args.kvbuf, model, family)
        layers = args.layer_pools or layers
        for sd in args.state_dtype:
            if name == "fla" and sd != "fp32":
                print(f"{name}: state dtype {sd} skipped (FLA writes its final state in fp32)")
                continue
            plan.append((name, model, shape, layers, sd, recurrent_bytes(args.kvbuf, model, args.batch, sd)))
    for name, model, shape, layers, sd, nbytes in plan:
        dims = "H={} HV={} K={} V={}".format(*shape) if KERNELS[name][1] == "gdn" else "G={} NH={} N={} P={}".format(
            *shape)
        print(f"{name} ({KERNELS[name][0]}): {model}: {dims}, {layers} layer pools, {sd} state")
        for batch in args.batch:
            print(f"  batch {batch}: {nbytes[batch]:.0f} bytes per layer per step")
    if args.dry_run:
        return

    try:
        import torch
        import triton
        import public_kernels
    except ImportError as e:
        sys.exit(f"bench_public.py: needs torch and triton: {e}")
    if not torch.cuda.is_available():
        sys.exit("bench_public.py: no CUDA device")
    dev = torch.device("cuda")
    gpu = torch.cuda.get_device_name(dev)
    commit = commit_id()
    gen = torch.Generator(device=dev).manual_seed(1)

    runnable = []
    for name, model, shape, layers, sd, nbytes in plan:
        kernel_id, family, loader = KERNELS[name]
        try:
            fn, pkg_version = getattr(public_kernels, loader)()
        except ImportError as e:
            print(f"{name}: skipped: {e}")
            continue
        dtype = torch.float32 if sd == "fp32" else torch.bfloat16
        if name == "fla":
            kernel = FlaStep(torch, *shape, dev, gen, dtype)
        elif name == "flashinfer":
            kernel = FlashInferStep(torch, *shape, dev, gen, dtype)
        else:
            kernel = MambaStep(torch, *shape, dev, gen, dtype)
        try:
            err_o, err_s, ok = check_against_float64(kernel, fn, torch)
        except Exception as e:  # a kernel that does not run here (FlashInfer's JIT, an unsupported shape)
            print(f"{name}: skipped: it does not run here: {type(e).__name__}: {e}")
            continue
        print(f"{name} {pkg_version} ({sd} state) against float64: relative error output {err_o:.2e}, state {err_s:.2e}")
        if not ok:
            print(f"{name}: not timed: its step does not match the recurrence")
            continue
        runnable.append((name, kernel_id, model, layers, sd, nbytes, kernel, fn, pkg_version))
    if not runnable:
        sys.exit("bench_public.py: none of the kernels runs here")

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
    print(f"copy bandwidth {copy_gbps:.0f} GB/s (read + written); GPU {gpu}; commit {commit}")

    telemetry = nvml_reader(torch.cuda.current_device())
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        w.writeheader()
        f.flush()
        for name, kernel_id, model, layers, sd, nbytes, kernel, fn, pkg_version in runnable:
            for batch in args.batch:
                state_bytes = kernel.pool(1).nbytes
                need = (2 if name == "fla" else 1) * layers * batch * state_bytes
                free, _ = torch.cuda.mem_get_info()
                if need > 0.9 * free:
                    print(f"{name}: skip batch {batch}: {need / 2**30:.1f} GiB of states, {free / 2**30:.1f} GiB free")
                    continue
                ios = [kernel.inputs(batch) for _ in range(layers)]
                pools = [kernel.pool(batch) for _ in range(layers)]
                side = torch.cuda.Stream()
                side.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(side):  # compile and warm outside the capture
                    for x, h in zip(ios, pools):
                        kernel.step(fn, x, h)
                torch.cuda.current_stream().wait_stream(side)
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    outs = [kernel.step(fn, x, h) for x, h in zip(ios, pools)]  # outputs stay allocated
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
                gbps = nbytes[batch] / (med * 1e-6) / 1e9
                note = clock_limit_note(readings)
                w.writerow(dict(model=model, kernel=kernel_id, package=PACKAGES[name], package_version=pkg_version,
                                state_dtype=sd, batch=batch, layers=layers, latency_us_median=f"{med:.4f}",
                                latency_us_min=f"{min(samples):.4f}", latency_us_max=f"{max(samples):.4f}",
                                samples=len(samples), bytes_per_layer_step=f"{nbytes[batch]:.0f}", gbps=f"{gbps:.2f}",
                                frac_copy_bw=f"{gbps / copy_gbps:.4f}", copy_gbps=f"{copy_gbps:.1f}",
                                sm_clock_mhz=f"{statistics.mean(r[0] for r in readings):.0f}" if readings else "",
                                power_w=f"{statistics.mean(r[1] for r in readings):.1f}" if readings else "",
                                gpu=gpu, commit=commit, torch_version=torch.__version__,
                                triton_version=triton.__version__, note=note))
                f.flush()
                print(f"{name} {sd} batch {batch:4d}: {med:9.2f} us per layer ({gbps:.0f} GB/s, "
                      f"{gbps / copy_gbps:.1%} of copy)" + (f"  {note}" if note else ""))
                del graph, outs, pools, ios
                torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
