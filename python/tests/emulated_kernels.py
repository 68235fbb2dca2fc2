"""The KVBuffer protocol of both families in plain PyTorch, for CPU tests of what drives the kernels
(KVBufferCache, the test loop of cache_loop.py): the same keyword arguments, pools and bookkeeping
as kvbuf.gdn_decode_kvbuffer / gdn_verify_kvbuffer / gdn_verify_kvbuffer_commit and the Mamba-2
three, computed in float64 from the pools and stored in their dtypes (bf16 entries rounded where the
kernels round them); chains and trees. Not a model of the kernels' arithmetic: the GPU tests
check the kernels themselves.

The protocol (kernels/gdn/gdn_verify.h, docs/kvbuffer-math.md sections 3, 5, 8):
  decode at fill n: output from S0 (none in direct mode) and the n entries; append the token, or,
    at n + 1 = C, fold S0, the n entries and the token into S0 (fill 0, has_state 1);
  verify of T tokens at fill n: when n > 0 and n + T >= C fold the n entries into S0 first (n0 = 0),
    else n0 = n; the T candidates go to the scratch, win_base = (n0, has_state);
  commit of m: at n0 + m = C fold S0, the n0 entries and the m candidates (fill 0), else append
    the m candidates at n0 (fill n0 + m).
"""
import torch

from references import F64, softplus64


def _entries(buf_k, buf_val, buf_gcum, buf_beta, s, n):
    e = [buf_k[s, :n].to(F64), buf_val[s, :n].to(F64), buf_gcum[s, :n].to(F64)]
    e.append(buf_beta[s, :n].to(F64) if buf_beta is not None else None)
    return e


def _flat(x, R):
    """Drops FLA's singleton token axis of a decode input ([R, 1, ...] -> [R, ...])."""
    return x.reshape(R, *x.shape[2:]) if x is not None and x.dim() >= 2 and x.shape[1] == 1 and x.dim() > 2 else x


class _Family:
    """What differs between GDN and Mamba-2: one token's candidate entry and output from S0 and the
    entries before it, and a fold's increment."""


class Gdn(_Family):
    def __init__(self, H, HV, K):
        self.H, self.HV, self.K, self.rep = H, HV, K, HV // H

    def token(self, inp):
        k, q = inp["k"].to(F64), inp["q"].to(F64)
        kn = k / torch.sqrt((k * k).sum(-1, keepdim=True) + 1e-6)
        qn = q / torch.sqrt((q * q).sum(-1, keepdim=True) + 1e-6) * self.K ** -0.5
        return dict(kn=kn, qn=qn, decay=inp["g"].to(F64), beta=inp["beta"].to(F64), v=inp["v"].to(F64))

    def step(self, S0, G_t, tok, ks, us, Gs, _dts, entry_dtype):
        """Output and candidate entry (k [H, K], u [HV, V], rounded) of one token."""
        kn = tok["kn"].repeat_interleave(self.rep, 0)
        qn = tok["qn"].repeat_interleave(self.rep, 0)
        w = torch.exp(G_t[None] - Gs) if len(Gs) else Gs                    # [n, HV]
        kk = ks.repeat_interleave(self.rep, 1) if len(ks) else ks            # [n, HV, K]
        a = torch.einsum("hvk,hk->hv", S0, kn)
        b = torch.einsum("hvk,hk->hv", S0, qn)
        e = torch.exp(G_t)[:, None]
        ck = torch.einsum("jhk,hk->jh", kk, kn) if len(ks) else None
        cq = torch.einsum("jhk,hk->jh", kk, qn) if len(ks) else None
        rhs = tok["v"] - e * a
        if len(ks):
            rhs = rhs - torch.einsum("jh,jh,jhv->hv", w, ck, us)
        u = tok["beta"][:, None] * rhs
        o = e * b + (kn * qn).sum(-1)[:, None] * u
        if len(ks):
            o = o + torch.einsum("jh,jh,jhv->hv", w, cq, us)
        k_store = tok["kn"].to(entry_dtype).to(F64)
        return o, k_store, u.to(entry_dtype).to(F64), None

    def increment(self, ks, us, Gs, _dts, G_last):
        """sum_j e^(G_last - G_j) u_j k_j^T as [HV, V, K]."""
        w = torch.exp(G_last[None] - Gs)
        return torch.einsum("jh,jhv,jhk->hvk", w, us, ks.repeat_interleave(self.rep, 1))


class Mamba2(_Family):
    def __init__(self, G, NH):
        self.rep = NH // G

    def token(self, inp):
        dt = inp["dt"].to(F64)
        if inp.get("dt_bias") is not None:
            dt = dt + inp["dt_bias"].to(F64)
        if inp.get("dt_softplus", True):
            dt = softplus64(dt)
        z = inp.get("z")
        return dict(x=inp["x"].to(F64), B=inp["B"].to(F64), C=inp["C"].to(F64), dt=dt,
                    decay=dt * inp["A"].to(F64), D=inp["D"].to(F64), z=None if z is None else z.to(F64))

    def step(self, S0, G_t, tok, Bs, xs, Gs, dts, entry_dtype):
        Ch = tok["C"].repeat_interleave(self.rep, 0)                         # [NH, N]
        Bt = tok["B"].repeat_interleave(self.rep, 0)
        y = torch.exp(G_t)[:, None] * torch.einsum("hpn,hn->hp", S0, Ch)
        y = y + (tok["dt"] * (Bt * Ch).sum(-1))[:, None] * tok["x"] + tok["D"][:, None] * tok["x"]
        if len(Bs):
            w = torch.exp(G_t[None] - Gs) * dts                              # [n, NH]
            c = torch.einsum("jhn,hn->jh", Bs.repeat_interleave(self.rep, 1), Ch)
            y = y + torch.einsum("jh,jh,jhp->hp", w, c, xs)
        if tok["z"] is not None:
            y = y * tok["z"] * torch.sigmoid(tok["z"])
        return y, tok["B"], tok["x"], tok["dt"]

    def increment(self, Bs, xs, Gs, dts, G_last):
        w = torch.exp(G_last[None] - Gs) * dts
        return torch.einsum("jh,jhp,jhn->hpn", w, xs, Bs.repeat_interleave(self.rep, 1))


def _family(inputs, state, buf_k):
    if "q" in inputs:
        H, K = buf_k.shape[2], buf_k.shape[3]
        return Gdn(H, state.shape[1], K)
    return Mamba2(buf_k.shape[2], state.shape[1])


_TOKEN_KEYS = {"q", "k", "v", "g", "beta", "x", "dt", "B", "C", "z"}


def _row(inputs, r, t=None):
    d = {}
    for key, val in inputs.items():
        if key in _TOKEN_KEYS and val is not None:
            d[key] = val[r] if t is None else val[r, t]
        else:
            d[key] = val
    return d


def _initial_state(state, s, has):
    """Slot s's committed state in float64; zeros while it has none (short context)."""
    return state[s].to(F64) if has else torch.zeros(state.shape[1:], dtype=F64)


def _stack_rows(outs):
    """The rows' outputs as one bf16 tensor; a padded row (slot < 0, None here) reads zeros."""
    ref = next(o for o in outs if o is not None)
    return torch.stack([o if o is not None else torch.zeros_like(ref) for o in outs]).to(torch.bfloat16)


def _fold(fam, state, s, has, entries, G_last):
    S0 = _initial_state(state, s, has)
    ks, us, Gs, dts = entries
    S = torch.exp(G_last)[:, None, None] * S0
    if len(ks):
        S = S + fam.increment(ks, us, Gs, dts, G_last)
    state[s] = S.to(state.dtype)


def decode_kvbuffer(*, slot, state, buf_k, buf_val, buf_gcum, fill, has_state, buf_beta=None, out=None, stream=None,
                    done_count=None, **inputs):
    R, C = slot.shape[0], buf_k.shape[1]
    first = inputs.get("q", inputs.get("x"))
    t1_form = first.dim() == 4 and first.shape[1] == 1  # FLA's [B, 1, ...]
    inputs = {k: _flat(v, R) if k in _TOKEN_KEYS else v for k, v in inputs.items()}
    fam = _family(inputs, state, buf_k)
    outs = []
    for r in range(R):
        s = int(slot[r])
        if s < 0:
            outs.append(None)
            continue
        tok = fam.token(_row(inputs, r))
        n, has = int(fill[s]), int(has_state[s])
        ks, us, Gs, dts = _entries(buf_k, buf_val, buf_gcum, buf_beta, s, n)
        S0 = _initial_state(state, s, has)
        G_t = (Gs[-1] if n else torch.zeros_like(tok["decay"])) + tok["decay"]
        o, k_new, u_new, dt_new = fam.step(S0, G_t, tok, ks, us, Gs, dts, buf_k.dtype)
        outs.append(o)
        if n + 1 < C:
            buf_k[s, n], buf_val[s, n], buf_gcum[s, n] = k_new.to(buf_k.dtype), u_new.to(buf_val.dtype), G_t.float()
            if buf_beta is not None:
                buf_beta[s, n] = dt_new.float()
            fill[s] = n + 1
        else:
            cat = lambda a, b: torch.cat([a, b[None]]) if a is not None else None  # noqa: E731
            _fold(fam, state, s, has, (cat(ks, k_new), cat(us, u_new), cat(Gs, G_t), cat(dts, dt_new)), G_t)
            fill[s], has_state[s] = 0, 1
    result = _stack_rows(outs)
    if out is None:
        return result[:, None] if t1_form else result  # the output takes the inputs' form, as the binding's
    out.copy_(result.reshape(out.shape))
    return out


def tree_parents(parents, r, T):
    """Node t's parent (0-based nodes, -1 the committed state) for row r: parents [B, T] holds p(i)
    of node i = 1..T in 0..i-1 (an out-of-range entry reads 0); None is the chain."""
    out = []
    for t in range(T):
        p = t if parents is None else int(parents[r, t])
        out.append(p - 1 if 0 <= p <= t else -1)
    return out


def depth_of(par):
    depth = []
    for p in par:
        depth.append(1 if p < 0 else depth[p] + 1)
    return max(depth)


def verify_kvbuffer(*, slot, state, buf_k, buf_val, buf_gcum, fill, has_state, win_k, win_u, win_gcum, win_base,
                    buf_beta=None, win_beta=None, parents=None, out=None, stream=None, coef=None, path="auto",
                    **inputs):
    R, C = slot.shape[0], buf_k.shape[1]
    T = win_k.shape[1]
    fam = _family(inputs, state, buf_k)
    outs = []
    for r in range(R):
        s = int(slot[r])
        if s < 0:
            outs.append(None)
            continue
        par = tree_parents(parents, r, T)
        n, has = int(fill[s]), int(has_state[s])
        ks, us, Gs, dts = _entries(buf_k, buf_val, buf_gcum, buf_beta, s, n)
        if n > 0 and n + depth_of(par) >= C:  # fold first
            _fold(fam, state, s, has, (ks, us, Gs, dts), Gs[-1])
            has, n = 1, 0
            ks, us, Gs, dts = _entries(buf_k, buf_val, buf_gcum, buf_beta, s, 0)
        S0 = _initial_state(state, s, has)
        nodes, row = [], []  # per node: (k, u, G, dt) of its candidate entry
        for t in range(T):
            tok = fam.token(_row(inputs, r, t))
            path, p = [], par[t]
            while p >= 0:  # the node's ancestors, root first
                path.insert(0, p)
                p = par[p]
            G0 = nodes[par[t]][2] if par[t] >= 0 else (Gs[-1] if len(Gs) else torch.zeros_like(tok["decay"]))
            G = G0 + tok["decay"]
            cat = lambda a, i: torch.cat([a] + [nodes[j][i][None] for j in path]) if a is not None else None  # noqa
            o, k_new, u_new, dt_new = fam.step(S0, G, tok, cat(ks, 0), cat(us, 1), cat(Gs, 2), cat(dts, 3),
                                               buf_k.dtype)
            row.append(o)
            nodes.append((k_new, u_new, G, dt_new))
            win_k[r, t], win_u[r, t], win_gcum[r, t] = k_new.to(win_k.dtype), u_new.to(win_u.dtype), G.float()
            if win_beta is not None:
                win_beta[r, t] = dt_new.float()
        win_base[r, 0], win_base[r, 1] = n, has
        outs.append(torch.stack(row))
    result = _stack_rows(outs)
    if out is None:
        return result
    out.copy_(result)
    return out


def verify_kvbuffer_commit(*, slot, state, buf_k, buf_val, buf_gcum, fill, has_state, win_k, win_u, win_gcum,
                           win_base, accept_len, accept_nodes=None, buf_beta=None, win_beta=None, stream=None):
    R, C, T = slot.shape[0], buf_k.shape[1], win_k.shape[1]
    fam = Gdn(buf_k.shape[2], state.shape[1], buf_k.shape[3]) if buf_beta is None else Mamba2(buf_k.shape[2],
                                                                                                 state.shape[1])
    for r in range(R):
        s = int(slot[r])
        if s < 0:
            continue
        m = min(max(int(accept_len[r]), 0), T)
        nodes = [int(accept_nodes[r, i]) - 1 for i in range(m)] if accept_nodes is not None else list(range(m))
        pick = lambda w: w[r, nodes] if m else w[r, :0]  # noqa: E731
        n0, has = int(win_base[r, 0]), int(win_base[r, 1])
        if n0 + m == C:
            ks, us, Gs, dts = _entries(buf_k, buf_val, buf_gcum, buf_beta, s, n0)
            ks = torch.cat([ks, pick(win_k).to(F64)])
            us = torch.cat([us, pick(win_u).to(F64)])
            Gs = torch.cat([Gs, pick(win_gcum).to(F64)])
            if dts is not None:
                dts = torch.cat([dts, pick(win_beta).to(F64)])
            _fold(fam, state, s, has, (ks, us, Gs, dts), Gs[-1])
            fill[s], has_state[s] = 0, 1
        else:
            buf_k[s, n0:n0 + m], buf_val[s, n0:n0 + m], buf_gcum[s, n0:n0 + m] = pick(win_k), pick(win_u), \
                pick(win_gcum)
            if buf_beta is not None:
                buf_beta[s, n0:n0 + m] = pick(win_beta)
            fill[s], has_state[s] = n0 + m, has
