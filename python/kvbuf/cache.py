"""KVBufferCache: the KVBuffer pools of a batch of requests, for `layers` linear-attention layers of
one family (Gated DeltaNet or Mamba-2), in PyTorch tensors, driven by kvbuf's kernels.

A request holds one slot in every layer's pools (sim/layout.h):
  state       [slots, HV, V, K]  the checkpoint S0 (state_dtype)
  buf_k       [slots, C, H, K]   normalised keys (GDN) or B (Mamba-2), entry dtype
  buf_val     [slots, C, HV, V]  corrected values u (GDN) or x (Mamba-2), entry dtype
  buf_gcum    [slots, C, HV]     cumulative log decay since S0, float32
  buf_beta    [slots, C, HV]     dt (Mamba-2 only), float32
  fill, has_state, done_count [slots] int32, advanced by the kernels
and a verify scratch of max_rows x max_tokens candidate entries per layer (GDN: also the split
path's coefficient workspace, one for all layers). Mamba-2 names map onto these: G groups = H, NH
heads = HV, d_state N = K, headdim P = V.

The protocol (kernels/gdn/gdn_verify.h): allocate() a slot per request (with a state from prefill,
or none: direct mode), step() decodes one token of every row, verify() runs T drafts (chains, or
trees with parents) through one layer, accept() commits the accepted tokens of the last verify of
every layer, release() frees the slot. Everything runs on the current CUDA stream (or `stream`) and
is capturable in torch.cuda.graph, except allocate(), release() and the inspection helpers
(fill(), state()), which index the pools from the host.
"""

_FAMILIES = {
    "gdn": ("gdn_decode_kvbuffer", "gdn_verify_kvbuffer", "gdn_verify_kvbuffer_commit"),
    "mamba2": ("mamba2_decode_kvbuffer", "mamba2_verify_kvbuffer", "mamba2_verify_kvbuffer_commit"),
}


class KVBufferCache:
    """The KVBuffer pools of up to `max_requests` requests for `layers` layers (module docstring).

    Build it with KVBufferCache.gdn(...) or KVBufferCache.mamba2(...); `capacity` is the buffer's C
    (1..64), `max_tokens` the most tokens one verify takes (T <= min(8, C)), `max_rows` the most
    request rows one step or verify takes (default max_requests). `verify_path` (GDN only) is
    gdn_verify_kvbuffer's path: 'auto' (the split path from T = 5 on large batches), 'single' or
    'split'.
    """

    def __init__(self, family, *, max_requests, key_heads, value_heads, head_k, head_v, capacity=8, max_tokens=4,
                 layers=1, max_rows=None, state_dtype=None, entry_dtype=None, verify_path="auto", device=None):
        import torch

        if family not in _FAMILIES:
            raise ValueError(f"family must be one of {sorted(_FAMILIES)}, got {family!r}")
        if max_requests < 1 or layers < 1:
            raise ValueError("max_requests and layers must be >= 1")
        if not 1 <= capacity <= 64:
            raise ValueError(f"capacity must be in 1..64, got {capacity}")
        if not 1 <= max_tokens <= min(8, capacity):
            raise ValueError(f"max_tokens must be in 1..min(8, capacity), got {max_tokens}")
        if value_heads % key_heads:
            raise ValueError("value_heads must be a multiple of key_heads")
        if verify_path not in ("auto", "single", "split") or (family != "gdn" and verify_path != "auto"):
            raise ValueError(f"verify_path must be 'auto', 'single' or 'split' (GDN only), got {verify_path!r}")
        from . import _C

        self._torch, self._C = torch, _C
        self.family = family
        self._decode, self._verify, self._commit = (getattr(_C, n) for n in _FAMILIES[family])
        self.max_requests, self.layers, self.capacity, self.max_tokens = max_requests, layers, capacity, max_tokens
        self.max_rows = max_rows or max_requests
        self.H, self.HV, self.K, self.V = key_heads, value_heads, head_k, head_v
        self.device = torch.device(device if device is not None else "cuda")
        self.state_dtype = state_dtype or torch.float32
        self.entry_dtype = entry_dtype or torch.bfloat16
        if family == "mamba2" and self.entry_dtype != torch.bfloat16:
            raise ValueError("Mamba-2 entries are bfloat16 (x and B arrive in bfloat16)")
        S, C, H, HV, K, V = max_requests, capacity, key_heads, value_heads, head_k, head_v
        R, T = self.max_rows, max_tokens
        dev, f32, i32, e = self.device, torch.float32, torch.int32, self.entry_dtype
        self._pools, self._scratch = [], []
        for _ in range(layers):
            p = dict(state=torch.zeros(S, HV, V, K, dtype=self.state_dtype, device=dev),
                     buf_k=torch.zeros(S, C, H, K, dtype=e, device=dev),
                     buf_val=torch.zeros(S, C, HV, V, dtype=e, device=dev),
                     buf_gcum=torch.zeros(S, C, HV, dtype=f32, device=dev),
                     fill=torch.zeros(S, dtype=i32, device=dev),
                     has_state=torch.zeros(S, dtype=i32, device=dev))
            w = dict(win_k=torch.empty(R * T * H * K, dtype=e, device=dev),
                     win_u=torch.empty(R * T * HV * V, dtype=e, device=dev),
                     win_gcum=torch.empty(R * T * HV, dtype=f32, device=dev),
                     win_base=torch.empty(R * 2, dtype=i32, device=dev))
            if family == "mamba2":
                p["buf_beta"] = torch.zeros(S, C, HV, dtype=f32, device=dev)
                w["win_beta"] = torch.empty(R * T * HV, dtype=f32, device=dev)
            self._pools.append(p)
            self._scratch.append(w)
        # GDN: the split path's coefficients (gdn_verify_coef_shape), written and read within one
        # verify, so one workspace serves every layer; sized for the largest record (T <= max_tokens).
        self.verify_path = verify_path
        self._coef = None
        if family == "gdn":
            record = max(_C.gdn_verify_coef_shape(1, HV, t, C)[2] for t in range(1, T + 1))
            self._coef = torch.empty(R * HV * record, dtype=f32, device=dev)
        self._done_count = [torch.zeros(S, dtype=i32, device=dev) for _ in range(layers)]
        self._free = list(range(S - 1, -1, -1))  # pop() hands out slot 0 first
        self._pending = [None] * layers  # per layer: (slots, B, T) of its last verify, until accept()
        self._views = {}

    @classmethod
    def gdn(cls, *, max_requests, num_heads, num_value_heads=None, head_k_dim=128, head_v_dim=128, **kw):
        """Gated DeltaNet pools: num_heads key heads H, num_value_heads HV (default H), head dims K, V."""
        return cls("gdn", max_requests=max_requests, key_heads=num_heads, value_heads=num_value_heads or num_heads,
                   head_k=head_k_dim, head_v=head_v_dim, **kw)

    @classmethod
    def mamba2(cls, *, max_requests, nheads, headdim, d_state, ngroups=1, **kw):
        """Mamba-2 pools: nheads NH, headdim P, d_state N, ngroups G (B and C per group)."""
        return cls("mamba2", max_requests=max_requests, key_heads=ngroups, value_heads=nheads, head_k=d_state,
                   head_v=headdim, **kw)

    # ---- slots ----
    def allocate(self, initial_state=None):
        """A free slot for a new request, its buffer empty. initial_state (the state after prefill,
        [HV, V, K], or [layers, HV, V, K]) becomes S0; without it the request starts in direct mode
        (no S0 until its first fold). Returns the slot (an int)."""
        if not self._free:
            raise RuntimeError(f"KVBufferCache: all {self.max_requests} slots are in use")
        slot = self._free.pop()
        if initial_state is not None:
            shape = (self.HV, self.V, self.K)
            s = initial_state
            if tuple(s.shape) == shape:
                s = s.unsqueeze(0).expand(self.layers, *shape)
            if tuple(s.shape) != (self.layers, *shape):
                self._free.append(slot)
                raise ValueError(f"initial_state must have shape {shape} or {(self.layers, *shape)}, "
                                 f"got {tuple(initial_state.shape)}")
        for layer, p in enumerate(self._pools):
            p["fill"][slot] = 0
            p["has_state"][slot] = 0 if initial_state is None else 1
            self._done_count[layer][slot] = 0
            if initial_state is not None:
                p["state"][slot].copy_(s[layer])
        return slot

    def release(self, slot):
        """Frees a request's slot (its pools are reset by the next allocate())."""
        if not 0 <= slot < self.max_requests or slot in self._free:
            raise ValueError(f"KVBufferCache: slot {slot} is not allocated")
        self._free.append(slot)

    def slot_tensor(self, slots):
        """The int32 device tensor of a batch's slots (one per row; -1: a padding row)."""
        return self._torch.tensor(list(slots), dtype=self._torch.int32, device=self.device)

    # ---- steps ----
    def step(self, slots, *, layer=0, out=None, stream=None, **inputs):
        """KVBuffer decode of one token per row through `layer`. slots: int32 [B] (slot_tensor());
        inputs: the family's token inputs as kvbuf.gdn_decode_kvbuffer / mamba2_decode_kvbuffer take
        them (GDN: q, k, v and g, beta or a, b, A_log, dt_bias; Mamba-2: x, dt, A, B, C, D, z,
        dt_bias). Returns the output [B, HV, V] (bfloat16)."""
        self._no_pending(layer, "step")
        return self._decode(slot=slots, out=out, stream=stream, done_count=self._done_count[layer],
                            **self._pools[layer], **inputs)

    def verify(self, slots, *, layer=0, parents=None, out=None, stream=None, **inputs):
        """Speculative verify of T tokens per row through `layer` (the last accepted token then T-1
        drafts; a tree with parents int32 [B, T]). Inputs as kvbuf.gdn_verify_kvbuffer /
        mamba2_verify_kvbuffer with their T axis. Nothing is appended until accept(). Returns the
        outputs [B, T, HV, V]."""
        self._no_pending(layer, "verify")
        first = inputs.get("q", inputs.get("x"))
        if first is None or first.dim() != 4:
            raise ValueError("verify: the token inputs (q or x) must be [B, T, heads, dim]")
        B, T = int(first.shape[0]), int(first.shape[1])
        if not 1 <= T <= self.max_tokens or B > self.max_rows:
            raise ValueError(f"verify: T = {T} (1..{self.max_tokens}) and B = {B} (at most {self.max_rows}) "
                             "must fit the cache's scratch")
        path = {} if self._coef is None else dict(coef=self._coef_view(B, T), path=self.verify_path)
        r = self._verify(slot=slots, parents=parents, out=out, stream=stream, **self._pools[layer],
                         **self._window(layer, B, T), **path, **inputs)
        self._pending[layer] = (slots, B, T)
        return r

    def accept(self, accept_len, accept_nodes=None, *, stream=None):
        """Commits the last verify of every layer: per row accept_len in 0..T accepted tokens (int32
        [B] on the device, or a list), the chain prefix or, for trees, accept_nodes int32 [B, T]
        (the 1-based root path). The buffer gets the accepted entries (and folds when full)."""
        torch = self._torch
        if not isinstance(accept_len, torch.Tensor):
            accept_len = torch.tensor(list(accept_len), dtype=torch.int32, device=self.device)
        done = False
        for layer, pending in enumerate(self._pending):
            if pending is None:
                continue
            slots, B, T = pending
            self._commit(slot=slots, accept_len=accept_len, accept_nodes=accept_nodes, stream=stream,
                         **self._pools[layer], **self._window(layer, B, T))
            self._pending[layer] = None
            done = True
        if not done:
            raise RuntimeError("accept: no verify to commit")

    def _no_pending(self, layer, what):
        # A verify that folded has rewritten S0 and leaves the fill to its commit: nothing may run in
        # between on that layer.
        if self._pending[layer] is not None:
            raise RuntimeError(f"{what}: layer {layer} has a verify waiting for accept()")

    def _window(self, layer, B, T):
        key = (layer, B, T)
        w = self._views.get(key)
        if w is None:
            H, HV, K, V, s = self.H, self.HV, self.K, self.V, self._scratch[layer]
            w = dict(win_k=s["win_k"][:B * T * H * K].view(B, T, H, K),
                     win_u=s["win_u"][:B * T * HV * V].view(B, T, HV, V),
                     win_gcum=s["win_gcum"][:B * T * HV].view(B, T, HV),
                     win_base=s["win_base"][:B * 2].view(B, 2))
            if "win_beta" in s:
                w["win_beta"] = s["win_beta"][:B * T * HV].view(B, T, HV)
            self._views[key] = w
        return w

    def _coef_view(self, B, T):
        key = ("coef", B, T)
        c = self._views.get(key)
        if c is None:
            shape = self._C.gdn_verify_coef_shape(B, self.HV, T, self.capacity)
            c = self._views[key] = self._coef[:shape[0] * shape[1] * shape[2]].view(*shape)
        return c

    # ---- inspection (host reads: synchronises) ----
    def fill(self, slot, layer=0):
        """The number of buffered entries of a slot."""
        return int(self._pools[layer]["fill"][slot])

    def state(self, slot, layer=0):
        """The request's state now, S0 folded with its n buffered entries, in float64 [HV, V, K]:
        exp(G_n) S0 + sum_j exp(G_n - G_j) k_j u_j^T (GDN) or dt_j x_j B_j^T (Mamba-2)."""
        torch, p = self._torch, self._pools[layer]
        n, has = int(p["fill"][slot]), int(p["has_state"][slot])
        s0 = p["state"][slot].double() if has else torch.zeros(self.HV, self.V, self.K, dtype=torch.float64,
                                                                 device=self.device)
        if n == 0:
            return s0
        g = p["buf_gcum"][slot, :n].double()                    # [n, HV]
        w = torch.exp(g[-1] - g)                                # [n, HV]
        keys = p["buf_k"][slot, :n].double().repeat_interleave(self.HV // self.H, dim=1)  # [n, HV, K]
        vals = p["buf_val"][slot, :n].double()                  # [n, HV, V]
        if self.family == "mamba2":
            w = w * p["buf_beta"][slot, :n].double()            # dt_j
        return torch.exp(g[-1])[:, None, None] * s0 + torch.einsum("jh,jhv,jhk->hvk", w, vals, keys)
