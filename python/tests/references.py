"""Float64 references for the module's tests (PyTorch, on any device): one decode step of each
family on a batch of states, in the pools' layouts (docs/kvbuffer-math.md sections 1 and 8), and
the inputs they are checked on.

GDN, per value head h (key head h // (HV / H)), state S [V, K] (row v of the pool):
  k <- k / sqrt(|k|^2 + 1e-6), q <- q / sqrt(|q|^2 + 1e-6) / sqrt(K)
  S <- e^g S;  u = beta (v - S k);  S <- S + u k^T;  o = S q
Mamba-2, per head h (group h // (NH / G)), state S [P, N]:
  dt <- softplus(dt + dt_bias);  S <- e^{dt A} S + dt x B^T;  y = S C + D x;  y *= silu(z)
"""
import torch
import torch.nn.functional as F

F64 = torch.float64
U16 = 2.0 ** -8  # bf16 keeps 8 significant bits: rounding costs at most 2^-8 relative


def softplus64(x):
    return torch.where(x > 20, x, torch.log1p(torch.exp(torch.clamp(x, max=20))))


def gdn_step(S, q, k, v, g, beta):
    """S [R, HV, V, K]; q, k [R, H, K]; v [R, HV, V]; g, beta [R, HV] -> (o [R, HV, V], S')."""
    S, q, k, v, g, beta = (x.to(F64) for x in (S, q, k, v, g, beta))
    HV, H, K = v.shape[1], q.shape[1], q.shape[2]
    kn = (k / torch.sqrt((k * k).sum(-1, keepdim=True) + 1e-6)).repeat_interleave(HV // H, dim=1)
    qn = (q / torch.sqrt((q * q).sum(-1, keepdim=True) + 1e-6)).repeat_interleave(HV // H, dim=1) * K ** -0.5
    S = S * torch.exp(g)[..., None, None]
    u = beta[..., None] * (v - torch.einsum("rhvk,rhk->rhv", S, kn))
    S = S + u[..., None] * kn[:, :, None, :]
    return torch.einsum("rhvk,rhk->rhv", S, qn), S


def gdn_gates(a, b, A_log, dt_bias):
    """g and beta from a model's raw inputs (FLA's use_gate_in_kernel, sigmoid beta)."""
    g = -torch.exp(A_log.to(F64)) * softplus64(a.to(F64) + dt_bias.to(F64))
    return g, torch.sigmoid(b.to(F64))


def mamba2_step(S, x, dt, A, B, C, D, z=None, dt_bias=None, dt_softplus=True):
    """S [R, NH, P, N]; x [R, NH, P]; dt [R, NH]; A, D, dt_bias [NH]; B, C [R, G, N]; z [R, NH, P]
    -> (y [R, NH, P], S')."""
    S, x, dt, A, B, C, D = (t.to(F64) for t in (S, x, dt, A, B, C, D))
    NH, G = x.shape[1], B.shape[1]
    if dt_bias is not None:
        dt = dt + dt_bias.to(F64)
    if dt_softplus:
        dt = softplus64(dt)
    Bh, Ch = B.repeat_interleave(NH // G, dim=1), C.repeat_interleave(NH // G, dim=1)
    S = torch.exp(dt * A)[..., None, None] * S + (dt[..., None] * x)[..., None] * Bh[:, :, None, :]
    y = torch.einsum("rhpn,rhn->rhp", S, Ch) + D[None, :, None] * x
    if z is not None:
        z = z.to(F64)
        y = y * z * torch.sigmoid(z)
    return y, S


def rel_err(x, ref, dims):
    """Norm-wise relative error ||x - ref|| / ||ref|| over `dims` (per request, per token: the
    kernel checks' measure), as a tensor over the other dimensions."""
    d = (x.to(F64) - ref).pow(2).sum(dims).sqrt()
    n = ref.pow(2).sum(dims).sqrt()
    return d / n.clamp_min(1e-300)


def bf16_randn(gen, *shape, device, scale=1.0):
    return (torch.randn(*shape, generator=gen, device=device) * scale).to(torch.bfloat16)


def gdn_inputs(gen, R, H, HV, K, V, device, tokens=None):
    """Decode (tokens None: [R, ...]) or verify ([R, T, ...]) inputs: bf16 q, k, v; fp32 g <= 0
    (log sigmoid of a normal: decays of about one half per token) and beta in [0, 1]."""
    t = () if tokens is None else (tokens,)
    return dict(q=bf16_randn(gen, R, *t, H, K, device=device), k=bf16_randn(gen, R, *t, H, K, device=device),
                v=bf16_randn(gen, R, *t, HV, V, device=device),
                g=F.logsigmoid(torch.randn(R, *t, HV, generator=gen, device=device)),
                beta=torch.rand(R, *t, HV, generator=gen, device=device))


def mamba2_params(gen, NH, device):
    """A < 0, D, dt_bias per head (float32)."""
    A = -(0.5 + 1.5 * torch.rand(NH, generator=gen, device=device))
    D = torch.randn(NH, generator=gen, device=device)
    dt_bias = 0.5 * torch.randn(NH, generator=gen, device=device)
    return dict(A=A, D=D, dt_bias=dt_bias)


def mamba2_inputs(gen, R, G, NH, P, N, device, tokens=None, gate=True):
    t = () if tokens is None else (tokens,)
    d = dict(x=bf16_randn(gen, R, *t, NH, P, device=device), dt=bf16_randn(gen, R, *t, NH, device=device),
             B=bf16_randn(gen, R, *t, G, N, device=device), C=bf16_randn(gen, R, *t, G, N, device=device))
    if gate:
        d["z"] = bf16_randn(gen, R, *t, NH, P, device=device)
    return d
