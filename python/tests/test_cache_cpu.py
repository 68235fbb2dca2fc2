#!/usr/bin/env python3
"""CPU tests (PyTorch needed, no GPU): the float64 references of the GPU tests against the public
packages' own PyTorch references (fla-core's naive recurrent gated delta rule, mamba-ssm's
selective_state_update_ref, each where installed), and KVBufferCache driving the serving loop of
cache_loop.py through emulated_kernels.py (the KVBuffer protocol in plain PyTorch) instead of the
kernels: slots, the verify scratch views, accept, release and reuse, fills and the loop's own
bookkeeping, as the GPU test then runs them on the kernels. Exit 77 (skipped) without torch.

    PYTHONPATH=build/python python3 python/tests/test_cache_cpu.py
"""
import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts"))

try:
    import torch
except ImportError:
    print("skipped: torch is not installed")
    sys.exit(77)

import cache_loop  # noqa: E402
import emulated_kernels as emu  # noqa: E402
import references as ref  # noqa: E402

import kvbuf  # noqa: E402


class References(unittest.TestCase):
    def test_gdn_step_equals_fla_naive(self):
        try:
            from fla.ops.gated_delta_rule.naive import naive_recurrent_gated_delta_rule
        except ImportError:
            self.skipTest("fla-core is not installed")
        gen = torch.Generator().manual_seed(1)
        R, H, HV, K, V = 3, 2, 4, 64, 32
        x = ref.gdn_inputs(gen, R, H, HV, K, V, "cpu")
        S = torch.randn(R, HV, V, K, generator=gen, dtype=torch.float64)
        o, S1 = ref.gdn_step(S, **x)
        # FLA's naive reference: one head per value head, state [K, V], normalised inputs given.
        kn = torch.nn.functional.normalize(x["k"].double(), dim=-1, eps=1e-30).repeat_interleave(HV // H, 1)
        qn = torch.nn.functional.normalize(x["q"].double(), dim=-1, eps=1e-30).repeat_interleave(HV // H, 1)
        o2, S2 = naive_recurrent_gated_delta_rule(qn[:, None], kn[:, None], x["v"].double()[:, None],
                                                  x["beta"].double()[:, None], x["g"].double()[:, None],
                                                  initial_state=S.transpose(-1, -2).clone(), output_final_state=True)
        # the naive one works in float32 (its .to(torch.float32)); the references agree to that
        self.assertLess(ref.rel_err(o2[:, 0], o, (-2, -1)).max().item(), 1e-5)
        self.assertLess(ref.rel_err(S2.transpose(-1, -2), S1, (-3, -2, -1)).max().item(), 1e-5)

    def test_mamba2_step_equals_mamba_ssm_ref(self):
        try:
            from public_kernels import mamba_selective_state_update  # noqa: F401
            mamba_selective_state_update()
            from mamba_ssm.ops.triton.selective_state_update import selective_state_update_ref
        except ImportError:
            self.skipTest("mamba-ssm is not installed")
        gen = torch.Generator().manual_seed(2)
        R, G, NH, P, N = 3, 2, 4, 8, 16
        x = ref.mamba2_inputs(gen, R, G, NH, P, N, "cpu")
        prm = ref.mamba2_params(gen, NH, "cpu")
        S = torch.randn(R, NH, P, N, generator=gen, dtype=torch.float64)
        y, S1 = ref.mamba2_step(S, **x, **prm)
        S2 = S.clone()
        expand = lambda t: t.double()[:, None].expand(NH, P)  # noqa: E731
        y2 = selective_state_update_ref(S2, x["x"].double(), x["dt"].double()[..., None].expand(R, NH, P),
                                        prm["A"].double()[:, None, None].expand(NH, P, N), x["B"].double(),
                                        x["C"].double(), D=expand(prm["D"]), z=x["z"].double(),
                                        dt_bias=expand(prm["dt_bias"]), dt_softplus=True)
        self.assertLess(ref.rel_err(y2, y, (-2, -1)).max().item(), 1e-12)
        self.assertLess(ref.rel_err(S2, S1, (-3, -2, -1)).max().item(), 1e-12)


class EmulatedCacheLoop(unittest.TestCase):
    def emulated(self, cache):
        cache._decode = emu.decode_kvbuffer
        cache._verify = emu.verify_kvbuffer
        cache._commit = emu.verify_kvbuffer_commit
        return cache

    def check(self, cache, tol_out, tol_state):
        stats = cache_loop.run(self.emulated(cache), steps=200, device="cpu")
        for what in ("decode_folds", "verify_folds", "commit_folds", "rejected", "reused"):
            self.assertGreater(stats[what], 0, (what, stats))
        self.assertLessEqual(stats["out_err"], tol_out, stats)
        self.assertLessEqual(stats["state_err"], tol_state, stats)
        return stats

    def test_gdn(self):
        # the GPU test's tolerances (test_gpu.py says where they come from)
        self.check(cache_loop.gdn_cache(kvbuf, "cpu", rows=5), 8 * ref.U16, 8 * ref.U16)

    def test_mamba2(self):
        self.check(cache_loop.mamba2_cache(kvbuf, "cpu", rows=5), ref.U16 + 1e-4, 1e-4)

    def test_trees(self):
        for make, tol_out, tol_state in ((cache_loop.gdn_cache, 8 * ref.U16, 8 * ref.U16),
                                         (cache_loop.mamba2_cache, ref.U16 + 1e-4, 1e-4)):
            cache = self.emulated(make(kvbuf, "cpu", rows=4, capacity=8))
            stats = cache_loop.run_tree(cache, device="cpu")
            self.assertGreater(stats["verify_folds"], 0, stats)
            self.assertLessEqual(stats["out_err"], tol_out, stats)
            self.assertLessEqual(stats["state_err"], tol_state, stats)

    def test_verify_path(self):
        # GDN: the split path's workspace reaches the verify, shaped by gdn_verify_coef_shape
        cache = cache_loop.gdn_cache(kvbuf, "cpu", rows=2, verify_path="split")
        seen = []
        cache._verify = lambda **kw: seen.append((kw["coef"].shape, kw["path"])) or emu.verify_kvbuffer(**kw)
        cache._commit = emu.verify_kvbuffer_commit
        gen = torch.Generator().manual_seed(0)
        slots = cache.slot_tensor([cache.allocate(), cache.allocate(), -1])
        for T in (1, 4):
            cache.verify(slots, **ref.gdn_inputs(gen, 3, cache.H, cache.HV, cache.K, cache.V, "cpu", tokens=T))
            cache.accept([0, 0, 0])
        self.assertEqual(seen, [(kvbuf.gdn_verify_coef_shape(3, cache.HV, T, cache.capacity), "split") for T in (1, 4)])
        with self.assertRaisesRegex(ValueError, "verify_path"):
            cache_loop.gdn_cache(kvbuf, "cpu", rows=1, verify_path="fast")
        with self.assertRaisesRegex(ValueError, "GDN only"):
            kvbuf.KVBufferCache.mamba2(max_requests=1, nheads=8, headdim=64, d_state=128, verify_path="split",
                                       device="cpu")

    def test_cache_refuses_misuse(self):
        cache = self.emulated(cache_loop.gdn_cache(kvbuf, "cpu", rows=1))
        a, b, c = (cache.allocate() for _ in range(3))
        with self.assertRaisesRegex(RuntimeError, "all 3 slots are in use"):
            cache.allocate()
        cache.release(b)
        with self.assertRaisesRegex(ValueError, "not allocated"):
            cache.release(b)
        self.assertEqual(cache.allocate(), b)
        with self.assertRaisesRegex(ValueError, "initial_state must have shape"):
            cache.release(c)
            cache.allocate(initial_state=torch.zeros(3))
        with self.assertRaisesRegex(RuntimeError, "no verify to commit"):
            cache.accept([0])
        gen = torch.Generator().manual_seed(0)
        x = ref.gdn_inputs(gen, 1, cache.H, cache.HV, cache.K, cache.V, "cpu", tokens=2)
        cache.verify(cache.slot_tensor([a]), **x)
        with self.assertRaisesRegex(RuntimeError, "accept"):
            cache.step(cache.slot_tensor([a]), **{k: v[:, 0] for k, v in x.items()})
        with self.assertRaisesRegex(RuntimeError, "accept"):
            cache.verify(cache.slot_tensor([a]), **x)
        cache.accept([1])
        with self.assertRaisesRegex(ValueError, "T = 5"):
            cache.verify(cache.slot_tensor([a]), **ref.gdn_inputs(gen, 1, cache.H, cache.HV, cache.K, cache.V, "cpu",
                                                                   tokens=5))


if __name__ == "__main__":
    unittest.main()
