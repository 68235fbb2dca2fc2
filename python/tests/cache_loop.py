"""A serving loop through KVBufferCache against a float64 reference (references.py), for the GPU
tests (the kernels) and the CPU tests (emulated_kernels.py): requests with and without a state from
prefill (direct mode), a padding row, decode steps and speculative verifies of T = 1..4 drafted
tokens with random accepted lengths (rejections), slots released and reused, at capacity C = 4, so
that decodes, verifies and commits fold. Checks every output of every step (each request token's
HV x V values, norm-wise relative error against the reference, as the kernel checks measure), the
state of every live request every 10 steps and at the end (cache.state(): S0 folded with the
buffer), and every fill against the protocol's (kernels/gdn/gdn_verify.h), mirrored here.
"""
import torch

import references as ref

CAPACITY, MAX_TOKENS = 4, 4


def gdn_cache(kvbuf, device, rows, capacity=CAPACITY, verify_path="auto"):
    return kvbuf.KVBufferCache.gdn(max_requests=rows + 2, num_heads=2, num_value_heads=4, head_k_dim=128,
                                   head_v_dim=128, capacity=capacity, max_tokens=MAX_TOKENS, verify_path=verify_path,
                                   device=device)


def mamba2_cache(kvbuf, device, rows, capacity=CAPACITY):
    return kvbuf.KVBufferCache.mamba2(max_requests=rows + 2, nheads=8, headdim=64, d_state=128, ngroups=2,
                                      capacity=capacity, max_tokens=MAX_TOKENS, device=device)


class _Model:
    """The family's inputs and float64 step."""

    def __init__(self, cache, gen, device):
        self.cache, self.gen, self.device = cache, gen, device
        self.gdn = cache.family == "gdn"
        if not self.gdn:
            self.params = ref.mamba2_params(gen, cache.HV, device)

    def inputs(self, rows, tokens=None):
        c = self.cache
        if self.gdn:
            return ref.gdn_inputs(self.gen, rows, c.H, c.HV, c.K, c.V, self.device, tokens)
        return ref.mamba2_inputs(self.gen, rows, c.H, c.HV, c.V, c.K, self.device, tokens)

    def call_args(self, inputs):
        return inputs if self.gdn else {**inputs, **self.params}

    def step(self, S, inputs, t=None):
        x = {k: (v[:, t] if t is not None else v) for k, v in inputs.items()}
        if self.gdn:
            return ref.gdn_step(S, **x)
        return ref.mamba2_step(S, **x, **self.params)

    def initial_state(self):
        c = self.cache
        return 0.1 * torch.randn(c.HV, c.V, c.K, generator=self.gen, device=self.device)


def run(cache, *, steps=200, rows=5, seed=0, device="cuda"):
    """Runs the loop; returns the largest errors and what happened (counts)."""
    gen = torch.Generator(device=device).manual_seed(seed)
    pick = torch.Generator().manual_seed(seed)
    model = _Model(cache, gen, device)
    C = cache.capacity
    states, fills = {}, {}

    def start(with_state):
        s0 = model.initial_state().to(cache.state_dtype) if with_state else None
        slot = cache.allocate(initial_state=s0)
        states[slot] = s0.to(ref.F64) if with_state else torch.zeros(cache.HV, cache.V, cache.K, dtype=ref.F64,
                                                                       device=device)
        fills[slot] = 0
        return slot

    slots = [start(with_state=(i % 2 == 0)) for i in range(rows)]
    padding = rows  # the last row of every batch is a padding row (slot -1)
    stats = dict(out_err=0.0, verify_out_err=0.0, state_err=0.0, decodes=0, verifies=0, decode_folds=0,
                 verify_folds=0, commit_folds=0, rejected=0, reused=0)

    def batch_slots():
        return cache.slot_tensor(slots + [-1])

    def check_outputs(o, o64, what):
        # o [R, (T,) HV, V]: every live row against the reference, the padding row exactly zero
        live = o[:padding]
        err = ref.rel_err(live, o64, (-2, -1)).max().item()
        assert err == err, f"{what}: NaN output"
        stats["out_err"] = max(stats["out_err"], err)
        if "verify" in what:
            stats["verify_out_err"] = max(stats["verify_out_err"], err)
        assert torch.count_nonzero(o[padding]).item() == 0, f"{what}: the padding row's output is not zero"

    def check_states():
        for slot in slots:
            err = ref.rel_err(cache.state(slot), states[slot], (-3, -2, -1)).item()
            assert err == err, "NaN state"
            stats["state_err"] = max(stats["state_err"], err)
            assert cache.fill(slot) == fills[slot], f"slot {slot}: fill {cache.fill(slot)}, protocol says {fills[slot]}"

    for step in range(steps):
        if step in (60, 130):  # a request ends, a new one (no state: direct mode) takes a slot
            i = 1 + step % (rows - 1)
            cache.release(slots[i])
            del states[slots[i]], fills[slots[i]]
            slots[i] = start(with_state=False)
            stats["reused"] += 1
        S = torch.stack([states[s] for s in slots])
        if torch.rand(1, generator=pick).item() < 0.5:
            inputs = model.inputs(rows + 1)
            o = cache.step(batch_slots(), **model.call_args(inputs))
            o64, S1 = model.step(S, {k: v[:padding] for k, v in inputs.items()})
            check_outputs(o, o64, f"step {step} decode")
            for i, slot in enumerate(slots):
                states[slot] = S1[i]
                if fills[slot] + 1 == C:
                    stats["decode_folds"] += 1
                fills[slot] = (fills[slot] + 1) % C
            stats["decodes"] += 1
        else:
            T = int(torch.randint(1, MAX_TOKENS + 1, (1,), generator=pick))
            inputs = model.inputs(rows + 1, tokens=T)
            o = cache.verify(batch_slots(), **model.call_args(inputs))
            live = {k: v[:padding] for k, v in inputs.items()}
            path, outs = [S], []
            for t in range(T):
                y, St = model.step(path[-1], live, t)
                outs.append(y)
                path.append(St)
            check_outputs(o, torch.stack(outs, 1), f"step {step} verify T={T}")
            m = torch.randint(0, T + 1, (rows + 1,), generator=pick)
            cache.accept(m.tolist())
            for i, slot in enumerate(slots):
                mi = int(m[i])
                states[slot] = path[mi][i]
                n = fills[slot]
                folds_first = n > 0 and n + T >= C
                n0 = 0 if folds_first else n
                stats["verify_folds"] += folds_first
                stats["commit_folds"] += n0 + mi == C
                stats["rejected"] += mi < T
                fills[slot] = 0 if n0 + mi == C else n0 + mi
            stats["verifies"] += 1
        if step % 10 == 9 or step == steps - 1:
            check_states()
    return stats


# Trees (docs/kvbuffer-math.md section 6): per row, p(i) of nodes 1..4, and the root paths accepted
# in alternate rounds (1-based nodes; each the parent of the next, the first a child of 0).
TREES = ([0, 1, 1, 2], [0, 0, 1, 3], [0, 1, 2, 3], [0, 1, 1, 1])
TREE_PATHS = (([1, 2, 4], [1, 3]), ([2], [1, 3, 4]), ([1, 2, 3, 4], [1, 2]), ([], [1, 4]))


def tree_depth(parents):
    depth = [0]
    for p in parents:
        depth.append(depth[p] + 1)
    return max(depth)


def run_tree(cache, *, rounds=8, seed=1, device="cuda"):
    """Tree verifies through KVBufferCache (capacity 8, T = 4: folds first and not) against the float64
    recurrence along each node's root path; accepts a root path per row (accept_nodes), then checks the
    request's state and fill. Returns the largest errors and the folds."""
    gen = torch.Generator(device=device).manual_seed(seed)
    model = _Model(cache, gen, device)
    C, T, rows = cache.capacity, len(TREES[0]), len(TREES)
    slots = [cache.allocate(initial_state=model.initial_state().to(cache.state_dtype) if i % 2 == 0 else None)
             for i in range(rows)]
    states = [cache.state(s) for s in slots]
    fills = [0] * rows
    parents = torch.tensor(TREES + ([0] * T,), dtype=torch.int32, device=device)  # + a padding row
    stats = dict(out_err=0.0, state_err=0.0, verify_folds=0, commit_folds=0)
    slot_t = cache.slot_tensor(slots + [-1])
    for rnd in range(rounds):
        inputs = model.inputs(rows + 1, tokens=T)
        o = cache.verify(slot_t, parents=parents, **model.call_args(inputs))
        live = {k: v[:rows] for k, v in inputs.items()}
        node_states, outs = [torch.stack(states)], []
        for t in range(T):
            S_parent = torch.stack([node_states[TREES[r][t]][r] for r in range(rows)])
            y, St = model.step(S_parent, live, t)
            outs.append(y)
            node_states.append(St)
        err = ref.rel_err(o[:rows], torch.stack(outs, 1), (-2, -1)).max().item()
        assert err == err, f"round {rnd}: NaN output"
        stats["out_err"] = max(stats["out_err"], err)
        assert torch.count_nonzero(o[rows]).item() == 0, f"round {rnd}: the padding row's output is not zero"
        paths = [TREE_PATHS[r][rnd % 2] for r in range(rows)]
        accept_len = torch.tensor([len(p) for p in paths] + [0], dtype=torch.int32, device=device)
        accept_nodes = torch.tensor([p + [0] * (T - len(p)) for p in paths] + [[0] * T], dtype=torch.int32,
                                    device=device)
        cache.accept(accept_len, accept_nodes)
        for r in range(rows):
            if paths[r]:
                states[r] = node_states[paths[r][-1]][r]
            n, m = fills[r], len(paths[r])
            folds_first = n > 0 and n + tree_depth(TREES[r]) >= C
            n0 = 0 if folds_first else n
            stats["verify_folds"] += folds_first
            stats["commit_folds"] += n0 + m == C
            fills[r] = 0 if n0 + m == C else n0 + m
            assert cache.fill(slots[r]) == fills[r], f"round {rnd} row {r}: fill {cache.fill(slots[r])}, protocol {fills[r]}"
            err = ref.rel_err(cache.state(slots[r]), states[r], (-3, -2, -1)).item()
            assert err == err, "NaN state"
            stats["state_err"] = max(stats["state_err"], err)
    return stats
