#!/usr/bin/env python3
"""GPU tests of the module (ctest python_gpu, label gpu; exit 77 = skipped without torch, a GPU, or
an Ampere or later device (sm_80+), which the kernels are built for):

* against the public kernels, through kvbuf on PyTorch tensors: fla-core's
  fused_recurrent_gated_delta_rule (also with its in-kernel gates) and mamba-ssm's Triton
  selective_state_update (fp32 and bf16 states), at batch 1, 3 and 64, on pools indexed by slot
  (rows in random slots, the other slots untouched), each also against the float64 reference;
* a 200-step serving loop through KVBufferCache for both families (cache_loop.py: decodes, verifies
  with rejections, folds, reused slots, a padding row) against float64; tree verifies accepting root
  paths; the classic verify kernels (copy and its commit, in place) on trees;
* CUDA graphs (torch.cuda.graph captures KVBufferCache steps, verify and accept, replayed equal to
  eager), streams (current, int handle, stream object), another DLPack producer, the README's
  example, and the kernels' own refusals as ValueError.

Tolerances (norm-wise relative error per request token, HV x V outputs, or per request state, as the
kernel checks measure; kernels/gdn/checks/gdn_decode_checks.cu derives them): one recurrent step
against float64 costs the output its bf16 rounding, u = 2^-8, plus fp32 arithmetic, < 1e-4; the
fp32 state the arithmetic only, 1e-4; a bf16 state one rounding more, + 2u on both (one ulp). Two
implementations that each meet these differ by at most twice as much (the triangle inequality). The
KVBufferCache loop: GDN entries are rounded to bf16 (k and u), 8u on outputs and states
(gdn_verify_checks.cu's bound for bf16 entries); Mamba-2 entries are exact (x and B arrive in bf16),
u + 1e-4 on outputs, 1e-4 on states.

    PYTHONPATH=build/python python3 python/tests/test_gpu.py     (or with kvbuf installed)
"""
import os
import re
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "scripts"))

try:
    import torch
except ImportError:
    print("skipped: torch is not installed")
    sys.exit(77)
if not torch.cuda.is_available():
    print("skipped: no CUDA device")
    sys.exit(77)
if torch.cuda.get_device_capability() < (8, 0):
    print(f"skipped: kvbuf's kernels need Ampere (sm_80) or later, this is {torch.cuda.get_device_name()}")
    sys.exit(77)

import cache_loop  # noqa: E402
import public_kernels  # noqa: E402
import references as ref  # noqa: E402

import kvbuf  # noqa: E402

DEV = torch.device("cuda")
U = ref.U16
TOL_OUT, TOL_STATE = U + 1e-4, 1e-4  # one recurrent step against float64, fp32 state
BATCHES = (1, 3, 64)


def slots_for(gen, batch, extra=7):
    """A pool of batch + extra slots and each row's slot, in random order (int32)."""
    pool = batch + extra
    return pool, torch.randperm(pool, generator=gen, device=DEV)[:batch].to(torch.int32)


class Case(unittest.TestCase):
    def assert_close(self, x, want, tol, dims, what):
        err = ref.rel_err(x, want, dims).max().item()
        self.assertTrue(err <= tol, f"{what}: relative error {err:.3g} > {tol:.3g}")
        return err

    def assert_untouched(self, pool, before, slots, what):
        others = torch.ones(pool.shape[0], dtype=torch.bool, device=DEV)
        others[slots.long()] = False
        self.assertTrue(torch.equal(pool[others], before[others]), f"{what}: a slot no row addresses changed")


class Fla(Case):
    """kvbuf.gdn_decode_recurrent against fla-core's fused_recurrent_gated_delta_rule (V-first state)."""

    @classmethod
    def setUpClass(cls):
        try:
            fn, cls.version = public_kernels.fla_fused_recurrent()
            cls.fla = staticmethod(fn)
        except ImportError as e:
            raise unittest.SkipTest(str(e))

    H, HV, K, V = 16, 32, 128, 128  # Qwen3-Next's linear layers

    def run_fla(self, x, h0, gates_in_kernel=False):
        t = lambda a: a[:, None]  # noqa: E731  FLA's [B, T, ...], T = 1
        if gates_in_kernel:
            o, ht = self.fla(t(x["q"]), t(x["k"]), t(x["v"]), g=t(x["a"].float()), beta=t(x["b"].float()), scale=self.K ** -0.5,
                             initial_state=h0, output_final_state=True, use_qk_l2norm_in_kernel=True,
                             use_gate_in_kernel=True, A_log=x["A_log"], dt_bias=x["dt_bias"],
                             use_beta_sigmoid_in_kernel=True, state_v_first=True)
        else:
            o, ht = self.fla(t(x["q"]), t(x["k"]), t(x["v"]), g=t(x["g"]), beta=t(x["beta"]), scale=self.K ** -0.5,
                             initial_state=h0, output_final_state=True, use_qk_l2norm_in_kernel=True,
                             state_v_first=True)
        return o[:, 0], ht

    def compare(self, batch, gates_in_kernel=False, seed=0):
        gen = torch.Generator(device=DEV).manual_seed(seed + batch)
        S, slot = slots_for(gen, batch)
        pool = 0.1 * torch.randn(S, self.HV, self.V, self.K, generator=gen, device=DEV)
        x = ref.gdn_inputs(gen, batch, self.H, self.HV, self.K, self.V, DEV)
        if gates_in_kernel:
            x = dict(q=x["q"], k=x["k"], v=x["v"], a=ref.bf16_randn(gen, batch, self.HV, device=DEV),
                     b=ref.bf16_randn(gen, batch, self.HV, device=DEV),
                     A_log=torch.randn(self.HV, generator=gen, device=DEV) * 0.5,
                     dt_bias=torch.randn(self.HV, generator=gen, device=DEV) * 0.5)
            g, beta = ref.gdn_gates(x["a"], x["b"], x["A_log"], x["dt_bias"])
            x64 = dict(q=x["q"], k=x["k"], v=x["v"], g=g, beta=beta)
        else:
            x64 = x
        h0 = pool[slot.long()].clone()
        o64, S64 = ref.gdn_step(h0, **x64)
        ours_pool = pool.clone()
        o = kvbuf.gdn_decode_recurrent(**x, slot=slot, state=ours_pool)
        o_fla, ht = self.run_fla(x, h0.clone(), gates_in_kernel)
        torch.cuda.synchronize()
        what = f"batch {batch}{' gates in kernel' if gates_in_kernel else ''}"
        self.assertEqual(o.dtype, torch.bfloat16)
        self.assert_close(o, o64, TOL_OUT, (-2, -1), f"{what}: kvbuf output vs float64")
        self.assert_close(o_fla, o64, TOL_OUT, (-2, -1), f"{what}: FLA output vs float64")
        self.assert_close(o, o_fla.double(), 2 * TOL_OUT, (-2, -1), f"{what}: kvbuf output vs FLA")
        self.assert_close(ours_pool[slot.long()], S64, TOL_STATE, (-3, -2, -1), f"{what}: kvbuf state vs float64")
        self.assert_close(ht, S64, TOL_STATE, (-3, -2, -1), f"{what}: FLA state vs float64")
        self.assert_close(ours_pool[slot.long()], ht.double(), 2 * TOL_STATE, (-3, -2, -1), f"{what}: kvbuf vs FLA")
        self.assert_untouched(ours_pool, pool, slot, what)
        # FLA's out-of-place placement: read state, write state_out; state itself unchanged
        out_pool = torch.zeros_like(pool)
        o2 = kvbuf.gdn_decode_recurrent(**x, slot=slot, state=pool, state_out=out_pool)
        self.assert_close(o2, o64, TOL_OUT, (-2, -1), f"{what}: out of place output vs float64")
        self.assert_close(out_pool[slot.long()], S64, TOL_STATE, (-3, -2, -1), f"{what}: out of place state")
        self.assertTrue(torch.equal(pool[slot.long()], h0), f"{what}: out of place wrote its input pool")

    def test_batches(self):
        for batch in BATCHES:
            with self.subTest(batch=batch):
                self.compare(batch)

    def test_gates_in_kernel(self):
        self.compare(3, gates_in_kernel=True)

    def test_fla_token_axis_and_bf16_state(self):
        """q, k, v, g, beta in FLA's [B, 1, ...] form give the same; a bf16 pool rounds once per step."""
        gen = torch.Generator(device=DEV).manual_seed(5)
        S, slot = slots_for(gen, 3)
        pool = 0.1 * torch.randn(S, self.HV, self.V, self.K, generator=gen, device=DEV)
        x = ref.gdn_inputs(gen, 3, self.H, self.HV, self.K, self.V, DEV)
        p1, p2 = pool.clone(), pool.clone()
        o1 = kvbuf.gdn_decode_recurrent(**x, slot=slot, state=p1)
        o2 = kvbuf.gdn_decode_recurrent(**{k: v[:, None] for k, v in x.items()}, slot=slot, state=p2)
        self.assertEqual(tuple(o2.shape), (3, 1, self.HV, self.V))
        self.assertTrue(torch.equal(o1, o2[:, 0]) and torch.equal(p1, p2))
        pb = pool.to(torch.bfloat16)
        h0 = pb[slot.long()].double()
        o64, S64 = ref.gdn_step(h0, **x)
        o = kvbuf.gdn_decode_recurrent(**x, slot=slot, state=pb)
        self.assert_close(o, o64, TOL_OUT + 2 * U, (-2, -1), "bf16 state: output")
        self.assert_close(pb[slot.long()], S64.to(torch.bfloat16).double(), TOL_STATE + 2 * U, (-3, -2, -1),
                          "bf16 state: state")


class MambaSsm(Case):
    """kvbuf.mamba2_decode_recurrent against mamba-ssm's Triton selective_state_update."""

    @classmethod
    def setUpClass(cls):
        try:
            fn, cls.version = public_kernels.mamba_selective_state_update()
            cls.ssu = staticmethod(fn)
        except ImportError as e:
            raise unittest.SkipTest(str(e))

    G, NH, P, N = 8, 64, 64, 128  # Nemotron-H's Mamba-2 layers (heads per GPU shard)

    def compare(self, batch, state_dtype=torch.float32, seed=0):
        gen = torch.Generator(device=DEV).manual_seed(seed + batch)
        NH, P, N = self.NH, self.P, self.N
        S, slot = slots_for(gen, batch)
        pool = (0.1 * torch.randn(S, NH, P, N, generator=gen, device=DEV)).to(state_dtype)
        x = ref.mamba2_inputs(gen, batch, self.G, NH, P, N, DEV)
        prm = ref.mamba2_params(gen, NH, DEV)
        h0 = pool[slot.long()].double()
        y64, S64 = ref.mamba2_step(h0, **x, **prm)
        ours, theirs = pool.clone(), pool.clone()
        y = kvbuf.mamba2_decode_recurrent(**x, **prm, slot=slot, state=ours)
        # mamba-ssm's per-(head, dim) layout: stride-0 expansions of the per-head values
        y_m = self.ssu(theirs, x["x"], x["dt"][..., None].expand(batch, NH, P), prm["A"][:, None, None].expand(NH, P, N),
                       x["B"], x["C"], D=prm["D"][:, None].expand(NH, P), z=x["z"],
                       dt_bias=prm["dt_bias"][:, None].expand(NH, P), dt_softplus=True, state_batch_indices=slot)
        torch.cuda.synchronize()
        extra = 0.0 if state_dtype == torch.float32 else 2 * U
        want_state = S64 if state_dtype == torch.float32 else S64.to(state_dtype).double()
        what = f"batch {batch} state {str(state_dtype).split('.')[-1]}"
        self.assert_close(y, y64, TOL_OUT + extra, (-2, -1), f"{what}: kvbuf output vs float64")
        self.assert_close(y_m, y64, TOL_OUT + extra, (-2, -1), f"{what}: mamba-ssm output vs float64")
        self.assert_close(y, y_m.double(), 2 * (TOL_OUT + extra), (-2, -1), f"{what}: kvbuf output vs mamba-ssm")
        s_ours, s_theirs = ours[slot.long()], theirs[slot.long()]
        self.assert_close(s_ours, want_state, TOL_STATE + extra, (-3, -2, -1), f"{what}: kvbuf state vs float64")
        self.assert_close(s_theirs, want_state, TOL_STATE + extra, (-3, -2, -1), f"{what}: mamba-ssm state vs float64")
        self.assert_close(s_ours, s_theirs.double(), 2 * (TOL_STATE + extra), (-3, -2, -1),
                          f"{what}: kvbuf state vs mamba-ssm")
        self.assert_untouched(ours, pool, slot, what)

    def test_batches(self):
        for batch in BATCHES:
            with self.subTest(batch=batch):
                self.compare(batch)

    def test_bf16_state(self):
        self.compare(3, state_dtype=torch.bfloat16)


def verify_kernel_names(cache):
    """The CUDA kernels one verify and accept of `cache` launch, as torch.profiler records them (an
    empty set where it records none)."""
    from torch.profiler import ProfilerActivity, profile

    gen = torch.Generator(device="cuda").manual_seed(0)
    slots = cache.slot_tensor([cache.allocate(initial_state=torch.randn(cache.HV, cache.V, cache.K, generator=gen,
                                                                        device="cuda")) for _ in range(2)])
    inputs = ref.gdn_inputs(gen, 2, cache.H, cache.HV, cache.K, cache.V, "cuda", tokens=cache_loop.MAX_TOKENS)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        cache.verify(slots, **inputs)
        cache.accept([1, 1])
        torch.cuda.synchronize()
    return {e.key for e in prof.key_averages()}


class CacheLoop(Case):
    """200 steps of KVBufferCache (decode, verify with rejections, folds, reuse) against float64."""

    def check(self, cache, tol_out, tol_state):
        stats = cache_loop.run(cache, steps=200, device="cuda")
        for what in ("decode_folds", "verify_folds", "commit_folds", "rejected", "reused"):
            self.assertGreater(stats[what], 0, (what, stats))
        self.assertLessEqual(stats["out_err"], tol_out, stats)
        self.assertLessEqual(stats["state_err"], tol_state, stats)
        print(f"\n  {cache.family} ({getattr(cache, 'verify_path', '')}): {stats}", file=sys.stderr)
        return stats

    def test_gdn(self):
        self.check(cache_loop.gdn_cache(kvbuf, "cuda", rows=5), 8 * U, 8 * U)

    def test_gdn_split_verify(self):
        # the verify's split path (coefficient kernel, then state kernel) forced at every T: the cache
        # launches the coefficient kernel (seen by the profiler where it records kernels), and the loop
        # meets the same bounds
        for verify_path, launched in (("split", True), ("single", False)):
            names = verify_kernel_names(cache_loop.gdn_cache(kvbuf, "cuda", rows=2, verify_path=verify_path))
            if names:
                self.assertEqual(any("gdn_verify_kvbuffer_coef_kernel" in n for n in names), launched, names)
        stats = self.check(cache_loop.gdn_cache(kvbuf, "cuda", rows=5, verify_path="split"), 8 * U, 8 * U)
        self.assertLessEqual(stats["verify_out_err"], 8 * U, stats)

    def test_mamba2(self):
        self.check(cache_loop.mamba2_cache(kvbuf, "cuda", rows=5), U + 1e-4, 1e-4)


class Trees(Case):
    """Tree verifies through KVBufferCache (both families, C = 8, T = 4) against float64, accepting
    root paths (accept_nodes); cache_loop.run_tree."""

    def test_gdn(self):
        for verify_path in ("auto", "split"):
            stats = cache_loop.run_tree(cache_loop.gdn_cache(kvbuf, "cuda", rows=4, capacity=8, verify_path=verify_path))
            self.assertGreater(stats["verify_folds"], 0, (verify_path, stats))
            self.assertLessEqual(stats["out_err"], 8 * U, (verify_path, stats))
            self.assertLessEqual(stats["state_err"], 8 * U, (verify_path, stats))

    def test_mamba2(self):
        stats = cache_loop.run_tree(cache_loop.mamba2_cache(kvbuf, "cuda", rows=4, capacity=8))
        self.assertGreater(stats["verify_folds"], 0, stats)
        self.assertLessEqual(stats["out_err"], U + 1e-4, stats)
        self.assertLessEqual(stats["state_err"], 1e-4, stats)


class Classic(Case):
    """The classic verify kernels of both families on trees (cache_loop.TREES): every node's output and
    state against the float64 recurrence along its root path; GDN's copy variant and its commit of a
    root path, GDN's and Mamba-2's in-place variant (node t's state into its step slot, nothing else
    written)."""

    rows, T = 3, 4

    def setup(self, family):
        gen = torch.Generator(device=DEV).manual_seed(11)
        R, T = self.rows, self.T
        S = 4 * R * (T + 1)
        perm = torch.randperm(S, generator=gen, device=DEV).to(torch.int32)
        slot, step_slot = perm[:R].contiguous(), perm[R:R + R * T].reshape(R, T).contiguous()
        parents = torch.tensor(cache_loop.TREES[:R], dtype=torch.int32, device=DEV)
        if family == "gdn":
            H, HV, K, V = 2, 4, 128, 128
            pool = 0.1 * torch.randn(S, HV, V, K, generator=gen, device=DEV)
            x = ref.gdn_inputs(gen, R, H, HV, K, V, DEV, tokens=T)
            step = lambda St, t: ref.gdn_step(St, **{k: v[:, t] for k, v in x.items()})  # noqa: E731
            call = x
        else:
            G, NH, P, N = 2, 8, 64, 128
            pool = 0.1 * torch.randn(S, NH, P, N, generator=gen, device=DEV)
            x = ref.mamba2_inputs(gen, R, G, NH, P, N, DEV, tokens=T)
            prm = ref.mamba2_params(gen, NH, DEV)
            step = lambda St, t: ref.mamba2_step(St, **{k: v[:, t] for k, v in x.items()}, **prm)  # noqa: E731
            call = {**x, **prm}
        node_states, outs = [pool[slot.long()].double()], []
        for t in range(T):
            par = torch.stack([node_states[cache_loop.TREES[r][t]][r] for r in range(R)])
            y, St = step(par, t)
            outs.append(y)
            node_states.append(St)
        return pool, slot, step_slot, parents, call, node_states, torch.stack(outs, 1)

    def check_nodes(self, o, outs, node_state_of, node_states, what):
        self.assert_close(o, outs, TOL_OUT, (-2, -1), f"{what}: node outputs")
        for t in range(self.T):
            self.assert_close(node_state_of(t), node_states[t + 1], TOL_STATE, (-3, -2, -1), f"{what}: node {t + 1} states")

    def test_gdn_copy_and_commit(self):
        pool, slot, _, parents, x, node_states, outs = self.setup("gdn")
        before = pool.clone()
        R, T = self.rows, self.T
        ss = torch.empty(R, T, *pool.shape[1:], device=DEV)
        o = kvbuf.gdn_verify_classic(**x, slot=slot, state=pool, step_states=ss, parents=parents)
        self.check_nodes(o, outs, lambda t: ss[:, t], node_states, "GDN classic copy")
        self.assertTrue(torch.equal(pool, before), "the copy variant's verify wrote the pool")
        paths = [cache_loop.TREE_PATHS[r][0] for r in range(R)]
        accept_len = torch.tensor([len(p) for p in paths], dtype=torch.int32, device=DEV)
        accept_nodes = torch.tensor([p + [0] * (T - len(p)) for p in paths], dtype=torch.int32, device=DEV)
        kvbuf.gdn_verify_classic_commit(state=pool, slot=slot, step_states=ss, accept_len=accept_len,
                                        accept_nodes=accept_nodes)
        for r, p in enumerate(paths):
            want = node_states[p[-1]][r] if p else before[slot[r].long()].double()
            self.assert_close(pool[slot[r].long()], want, TOL_STATE, (-3, -2, -1), f"GDN classic commit, row {r}")
        self.assert_untouched(pool, before, slot, "GDN classic commit")

    def in_place(self, family, fn):
        pool, slot, step_slot, parents, x, node_states, outs = self.setup(family)
        before = pool.clone()
        o = fn(**x, slot=slot, state=pool, step_slot=step_slot, parents=parents)
        self.check_nodes(o, outs, lambda t: pool[step_slot[:, t].long()], node_states, f"{family} classic in place")
        self.assert_untouched(pool, before, step_slot.flatten(), f"{family} classic in place")

    def test_gdn_in_place(self):
        self.in_place("gdn", kvbuf.gdn_verify_classic)

    def test_mamba2_in_place(self):
        self.in_place("mamba2", kvbuf.mamba2_verify_classic)


class Graphs(Case):
    """KVBufferCache steps, a verify and its accept captured in torch.cuda.graph: the default
    stream is the capture stream, outputs are allocated from the graph's pool, and replays equal the
    same calls run eagerly on an identical cache."""

    def make(self, gen_seed=0):
        cache = cache_loop.gdn_cache(kvbuf, "cuda", rows=3)
        gen = torch.Generator(device=DEV).manual_seed(gen_seed)
        slots = [cache.allocate(initial_state=0.1 * torch.randn(cache.HV, cache.V, cache.K, generator=gen,
                                                                   device=DEV)) for _ in range(2)]
        slots.append(cache.allocate())
        return cache, cache.slot_tensor(slots + [-1]), slots

    def test_capture_and_replay(self):
        gen = torch.Generator(device=DEV).manual_seed(3)
        eager, e_slot, e_slots = self.make()
        graphed, g_slot, g_slots = self.make()
        c = eager
        steps = [ref.gdn_inputs(gen, 4, c.H, c.HV, c.K, c.V, DEV) for _ in range(5)]
        window = ref.gdn_inputs(gen, 4, c.H, c.HV, c.K, c.V, DEV, tokens=3)
        accept = torch.tensor([2, 3, 0, 0], dtype=torch.int32, device=DEV)

        def run(cache, slot):
            outs = [cache.step(slot, **x) for x in steps]
            outs.append(cache.verify(slot, **window))
            cache.accept(accept)
            return outs

        warm, w_slot, _ = self.make()  # first launches (module loading, attributes) outside the capture
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            run(warm, w_slot)
        torch.cuda.current_stream().wait_stream(side)

        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            g_outs = run(graphed, g_slot)
        for replay in range(2):
            e_outs = run(eager, e_slot)
            graph.replay()
            torch.cuda.synchronize()
            for i, (a, b) in enumerate(zip(e_outs, g_outs)):
                self.assertTrue(torch.equal(a, b), f"replay {replay}: output {i} differs from eager")
            for s_e, s_g in zip(e_slots, g_slots):
                self.assertEqual(eager.fill(s_e), graphed.fill(s_g))
                self.assertTrue(torch.equal(eager.state(s_e), graphed.state(s_g)), f"replay {replay}: state differs")


class Streams(Case):
    def setUp(self):
        gen = torch.Generator(device=DEV).manual_seed(7)
        self.S, self.slot = slots_for(gen, 3)
        self.pool = 0.1 * torch.randn(self.S, 4, 64, 64, generator=gen, device=DEV)
        self.x = ref.gdn_inputs(gen, 3, 2, 4, 64, 64, DEV)
        p = self.pool.clone()
        self.want = kvbuf.gdn_decode_recurrent(**self.x, slot=self.slot, state=p)
        self.want_state = p

    def check(self, o, p):
        torch.cuda.synchronize()
        self.assertTrue(torch.equal(o, self.want) and torch.equal(p, self.want_state))

    def test_current_stream_handle_and_object(self):
        side = torch.cuda.Stream()
        for how in ("current", "int", "object"):
            with self.subTest(how=how):
                p = self.pool.clone()
                side.wait_stream(torch.cuda.current_stream())
                if how == "current":
                    with torch.cuda.stream(side):
                        o = kvbuf.gdn_decode_recurrent(**self.x, slot=self.slot, state=p)
                else:
                    stream = side.cuda_stream if how == "int" else side
                    o = torch.empty(3, 4, 64, dtype=torch.bfloat16, device=DEV)
                    kvbuf.gdn_decode_recurrent(**self.x, slot=self.slot, state=p, out=o, stream=stream)
                side.synchronize()
                self.check(o, p)

    def test_another_dlpack_producer(self):
        """Objects with __dlpack__ only (no exchange table): nanobind's import; out is required."""

        class Plain:
            def __init__(self, t):
                self.t = t

            def __dlpack__(self, **kw):
                return self.t.__dlpack__(**kw)

            def __dlpack_device__(self):
                return self.t.__dlpack_device__()

        p = self.pool.clone()
        o = torch.empty(3, 4, 64, dtype=torch.bfloat16, device=DEV)
        args = {k: Plain(v) for k, v in self.x.items()}
        torch.cuda.synchronize()
        r = kvbuf.gdn_decode_recurrent(**args, slot=Plain(self.slot), state=Plain(p), out=Plain(o))
        self.assertIsInstance(r, Plain)
        self.check(o, p)
        with self.assertRaisesRegex(ValueError, "out is required"):
            kvbuf.gdn_decode_recurrent(**args, slot=Plain(self.slot), state=Plain(p))


class KernelRefusals(Case):
    """What a kernel has no instantiation for comes back as ValueError (its std::invalid_argument),
    before any launch."""

    def test_unsupported_shapes(self):
        x = ref.gdn_inputs(torch.Generator(device=DEV).manual_seed(0), 2, 1, 1, 96, 96, DEV)
        with self.assertRaisesRegex(ValueError, "unsupported head dims"):
            kvbuf.gdn_decode_recurrent(**x, slot=torch.zeros(2, dtype=torch.int32, device=DEV),
                                       state=torch.zeros(2, 1, 96, 96, device=DEV))
        c = cache_loop.gdn_cache(kvbuf, "cuda", rows=1)
        pools = {k: v for k, v in c._pools[0].items()}
        x = ref.gdn_inputs(torch.Generator(device=DEV).manual_seed(0), 1, c.H, c.HV, c.K, c.V, DEV)
        with self.assertRaisesRegex(ValueError, "split path needs"):
            kvbuf.gdn_decode_kvbuffer(**x, **pools, slot=c.slot_tensor([0]), done_count=c._done_count[0], path="split")
        with self.assertRaisesRegex(ValueError, "row_fill"):
            kvbuf.gdn_decode_kvbuffer(**x, **{k: v for k, v in pools.items() if k != "fill"},
                                      slot=c.slot_tensor([0]), done_count=c._done_count[0])


class ReadmeExample(Case):
    """The README's example runs as written (it compares KVBufferCache with FLA itself)."""

    def test_readme_example(self):
        try:
            public_kernels.fla_fused_recurrent()
        except ImportError as e:
            self.skipTest(str(e))
        with open(os.path.join(ROOT, "README.md")) as f:
            text = f.read()
        m = re.search(r"<!-- python-example -->\s*```python\n(.*?)```", text, re.S)
        self.assertIsNotNone(m, "README.md has no python example")
        exec(compile(m.group(1), "README.md example", "exec"), {"__name__": "readme_example"})


if __name__ == "__main__":
    unittest.main()
