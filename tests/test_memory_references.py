"""New memory models against sequential references written from their papers' equations.

Each reference below is a plain per-step Python loop over ``jax.numpy`` arrays (one step at a
time, explicit resets, explicit windows), written from the equations in the model's docstring,
not from the model's code: no scans, no window helpers, no monoid operators. Each test compares
the model's outputs, final carry and parameter gradients (of a random linear functional of the
outputs) with the reference, from a random non-zero carry, with episode starts inside the
sequence, and for every scan strategy where the model has one.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from stoixlite.networks.memory import build_memory
from stoixlite.networks.memory.indrnn import recurrent_init

jax.config.update("jax_enable_x64", False)

T, B, F, H = 8, 3, 5, 8
RTOL, ATOL = 2e-4, 2e-5


def _close(a, b, what, rtol=RTOL, atol=ATOL):
    la, ta = jax.tree_util.tree_flatten(a)
    lb, tb = jax.tree_util.tree_flatten(b)
    assert ta == tb, f"{what}: structures differ"
    for x, y in zip(la, lb, strict=True):
        x, y = np.asarray(x), np.asarray(y)
        scale = max(1.0, float(np.max(np.abs(y)))) if y.size else 1.0
        np.testing.assert_allclose(x, y, rtol=rtol, atol=atol * scale, err_msg=what)


def _inputs(seed: int = 0):
    kx, ks, kw = jax.random.split(jax.random.key(seed), 3)
    x = jax.random.normal(kx, (T, B, F))
    start = jax.random.bernoulli(ks, 0.2, (T, B)).at[4, 0].set(True).at[1, 2].set(True)
    w = jax.random.normal(kw, (T, B, H))
    return x, start, w


def _dense(p, x):
    return x @ p["kernel"] + (p["bias"] if "bias" in p else 0.0)


# --- windows of the last steps (frame stacks, causal convolutions) ----------------------------


def window_list(carry):
    """The carried window ``(values [B, M, D], valid [B, M])`` as a list of (value, ok) pairs."""
    window, valid = carry
    return [(window[:, i], valid[:, i]) for i in range(window.shape[1])]


def slide(past, start_t, new):
    """One step of a window of the last steps: a start invalidates the past, ``new`` is
    appended; returns the window's values (zeros where invalid, oldest first, ``new`` last) and
    the past for the next step (the oldest entry dropped)."""
    past = [(v, ok & ~start_t) for v, ok in past]
    frames = past + [(new, jnp.ones_like(start_t))]
    return [jnp.where(ok[:, None], v, 0.0) for v, ok in frames], frames[1:]


def window_carry(past, carry):
    """The final ``(values, valid)`` window (values zeroed where invalid)."""
    if not past:
        return carry
    valid = jnp.stack([ok for _, ok in past], axis=1)
    return jnp.stack([jnp.where(ok[:, None], v, 0.0) for v, ok in past], axis=1), valid


# --- Mamba ------------------------------------------------------------------------------------


def mamba_reference(p, carry, x, start):
    """Mamba block (Gu and Dao 2023, Algorithm 2) one step at a time, one layer.

    The conv window is a list of the last ``k - 1`` (input, valid) pairs (:func:`slide`).
    """
    conv_carry, (acc, h) = carry
    past = window_list(conv_carry)
    a = -jnp.exp(p["A_log"])
    ys = []
    for t in range(x.shape[0]):
        s = start[t]
        acc = jnp.where(s[:, None, None], 1.0, acc)
        h = jnp.where(s[:, None, None], 0.0, h)
        x_in, z = jnp.split(_dense(p["in_proj"], x[t]), 2, axis=-1)
        frames, past = slide(past, s, x_in)
        conv = sum(f * p["conv_kernel"][i] for i, f in enumerate(frames))
        u = jax.nn.silu(conv + p["conv_bias"])
        dt = jax.nn.softplus(_dense(p["dt"], _dense(p["dt_low"], u)))
        b, c = jnp.split(_dense(p["bc"], u), 2, axis=-1)
        decay = jnp.exp(dt[:, :, None] * a)
        acc = decay * acc
        h = decay * h + (dt * u)[:, :, None] * b[:, None, :]
        y = jnp.einsum("ben,bn->be", h, c) + p["D"] * u
        ys.append(_dense(p["out_proj"], y * jax.nn.silu(z)))
    return (window_carry(past, conv_carry), (acc, h)), jnp.stack(ys)


def layer0(cell_reference):
    """Reference of a one-layer stack from the reference of its cell (carry: 1-tuple)."""

    def ref(p, carry, x, start):
        c, y = cell_reference(p["cells_0"], carry[0], x, start)
        return (c,), y

    return ref


# --- POPGym baselines -------------------------------------------------------------------------


def elman_reference(p, h, x, start):
    ys = []
    for t in range(x.shape[0]):
        h = jnp.where(start[t][:, None], 0.0, h)
        h = jnp.tanh(_dense(p["input"], x[t]) + h @ p["recurrent_kernel"])
        ys.append(h)
    return h, jnp.stack(ys)


def framestack_reference(p, carry, x, start):
    """MLP on the concatenation of the last k projected frames (zeros before the start)."""
    past = window_list(carry)
    ys = []
    for t in range(x.shape[0]):
        frames, past = slide(past, start[t], x[t] @ p["frame"]["kernel"])
        ys.append(jax.nn.relu(_dense(p["mlp"], jnp.concatenate(frames, axis=-1))))
    return window_carry(past, carry), jnp.stack(ys)


def _sinusoid(n, size):
    """The sinusoidal encoding [B, size] of episode steps ``n [B]`` (period base 1024), written
    from its definition: sin at even and cos at odd features, frequencies 1024^(-2i/size)."""
    i = np.arange(size) // 2
    angle = n[:, None].astype(jnp.float32) / 1024.0 ** (2 * i / size)
    return jnp.where(np.arange(size) % 2 == 0, jnp.sin(angle), jnp.cos(angle))


def positional_mlp_reference(p, n, x, start):
    size = p["dense"]["kernel"].shape[1]
    ys = []
    for t in range(x.shape[0]):
        n = jnp.where(start[t], 0, n)
        pe = _sinusoid(n, size)
        ys.append(jax.nn.relu(_dense(p["dense"], x[t]) + pe))
        n = n + 1
    return n, jnp.stack(ys)


def lmu_reference(theta):
    """LMU (Voelker et al. 2019, eqs. 2, 4, 6, 7): the continuous delay system written entry by
    entry, discretised by scipy's zero-order hold, then one step at a time."""
    from scipy.signal import cont2discrete

    def ref(p, carry, x, start):
        h, m = carry
        size = m.shape[1]
        a_c, b_c = np.zeros((size, size)), np.zeros((size, 1))
        for i in range(size):
            b_c[i, 0] = (2 * i + 1) / theta * (-1) ** i
            for j in range(size):
                a_c[i, j] = (2 * i + 1) / theta * (-1.0 if i < j else (-1.0) ** (i - j + 1))
        a_d, b_d, *_ = cont2discrete(
            (a_c, b_c, np.ones((1, size)), np.zeros((1, 1))), dt=1.0, method="zoh"
        )
        a_d, b_d = jnp.asarray(a_d, jnp.float32), jnp.asarray(b_d[:, 0], jnp.float32)
        ys = []
        for t in range(x.shape[0]):
            h = jnp.where(start[t][:, None], 0.0, h)
            m = jnp.where(start[t][:, None], 0.0, m)
            u = x[t] @ p["input_encoder"] + h @ p["hidden_encoder"] + m @ p["memory_encoder"]
            m = jnp.einsum("ij,bj->bi", a_d, m) + u * b_d[None, :]
            h = jnp.tanh(x[t] @ p["input_kernel"] + h @ p["hidden_kernel"] + m @ p["memory_kernel"])
            ys.append(h)
        return (h, m), jnp.stack(ys)

    return ref


def indrnn_reference(max_len):
    """IndRNN (Li et al. 2018, eq. 2) per layer, one step at a time, with the recurrent weights
    clamped to POPGym's bound ``2^(1 / max_len)``."""

    def ref(p, carry, x, start):
        bound = 2.0 ** (1.0 / max_len)
        hs, ys = list(carry), []
        for t in range(x.shape[0]):
            inp = x[t]
            for layer in range(len(hs)):
                u = jnp.clip(p[f"recurrent_{layer}"], -bound, bound)
                prev = jnp.where(start[t][:, None], 0.0, hs[layer])
                hs[layer] = jax.nn.relu(
                    inp @ p[f"input_{layer}"]["kernel"] + p[f"bias_{layer}"] + u * prev
                )
                inp = hs[layer]
            ys.append(inp)
        return tuple(hs), jnp.stack(ys)

    return ref


def tcn_reference(p, carry, x, start):
    """Causal convolution of kernel k over the frames ``(1 - s) W_p x + s PE(n)`` of the
    episode (zeros before its start), written as a sum over the kernel's k taps."""
    window, n = carry
    past = window_list(window)
    size = p["frame"]["kernel"].shape[1]
    s = jnp.clip(p["embedding_strength"], 0.0, 1.0)
    k = len(past) + 1
    ys = []
    for t in range(x.shape[0]):
        n = jnp.where(start[t], 0, n)
        pe = _sinusoid(n, size)
        frames, past = slide(past, start[t], (1 - s) * (x[t] @ p["frame"]["kernel"]) + s * pe)
        taps = [p["conv"]["kernel"][j * size : (j + 1) * size] for j in range(k)]
        ys.append(sum(f @ w for f, w in zip(frames, taps, strict=True)) + p["conv"]["bias"])
        n = n + 1
    return (window_carry(past, window), n), jnp.stack(ys)


# --- matrix memories -------------------------------------------------------------------------


def _heads(u, heads):
    return u.reshape(*u.shape[:-1], heads, u.shape[-1] // heads)


def mlstm_reference(p, carry, x, start):
    """xLSTM mLSTM (Beck et al. 2024, eqs. 19-27) in true (unstabilised) space.

    The carry ``(C^, n^, m, F)`` holds the scaled state; the true state is ``exp(m) C^``. Returns
    the true ``(C, n)`` and the summed log forget gates ``F`` since the episode start.
    """
    c_hat, n_hat, m, f_sum = carry
    heads = m.shape[-1]
    c, n = jnp.exp(m)[..., None, None] * c_hat, jnp.exp(m)[..., None] * n_hat
    ys = []
    for t in range(x.shape[0]):
        s = start[t]
        c = jnp.where(s[:, None, None, None], 0.0, c)
        n = jnp.where(s[:, None, None], 0.0, n)
        f_sum = jnp.where(s[:, None], 0.0, f_sum)
        q, k, v = (_heads(u, heads) for u in jnp.split(x[t] @ p["qkv"]["kernel"], 3, axis=-1))
        k = k / jnp.sqrt(k.shape[-1])
        i_gate = jnp.exp(_dense(p["input_gate"], x[t]))
        f_gate = jax.nn.sigmoid(_dense(p["forget_gate"], x[t]))
        c = f_gate[..., None, None] * c + i_gate[..., None, None] * jnp.einsum(
            "bhv,bhk->bhvk", v, k
        )
        n = f_gate[..., None] * n + i_gate[..., None] * k
        f_sum = f_sum + jnp.log(f_gate)
        den = jnp.maximum(jnp.abs(jnp.einsum("bhk,bhk->bh", n, q)), 1.0)
        h_tilde = jnp.einsum("bhvk,bhk->bhv", c, q) / den[..., None]
        o = jax.nn.sigmoid(_dense(p["output_gate"], x[t]))
        ys.append(_dense(p["out"], o * h_tilde.reshape(o.shape)))
    return (c, n, f_sum), jnp.stack(ys)


def mlstm_true_state(carry):
    """The model's scaled carry ``((C^, n^, m, F),)`` as the true ``((C, n, F),)``."""
    c_hat, n_hat, m, f_sum = carry[0]
    return ((jnp.exp(m)[..., None, None] * c_hat, jnp.exp(m)[..., None] * n_hat, f_sum),)


def linear_attention_reference(p, carry, x, start):
    """Normalised linear attention (Katharopoulos et al. 2020) step by step:
    ``S_t = S_{t-1} + phi(k_t) v_t^T``, ``z_t = z_{t-1} + phi(k_t)``,
    ``o_t = phi(q_t)^T S_t / (phi(q_t)^T z_t + eps)``, ``phi = elu + 1``; reset at a start."""
    s_mat, z = carry
    heads, dk = z.shape[1], z.shape[2]

    def phi(u):
        return jax.nn.elu(u) + 1.0

    ys = []
    for t in range(x.shape[0]):
        s_mat = jnp.where(start[t][:, None, None, None], 0.0, s_mat)
        z = jnp.where(start[t][:, None, None], 0.0, z)
        q = phi(_dense(p["query"], x[t]).reshape(-1, heads, dk))
        k = phi(_dense(p["key"], x[t]).reshape(-1, heads, dk))
        v = _heads(_dense(p["value"], x[t]), heads)
        s_mat = s_mat + jnp.einsum("bhk,bhv->bhkv", k, v)
        z = z + k
        o = (
            jnp.einsum("bhk,bhkv->bhv", q, s_mat)
            / (jnp.einsum("bhk,bhk->bh", q, z) + 1e-6)[..., None]
        )
        ys.append(_dense(p["out"], o.reshape(o.shape[0], -1)))
    return (s_mat, z), jnp.stack(ys)


def deltanet_reference(p, s_mat, x, start):
    """Gated delta rule (Yang et al. 2025) with the explicit ``I - beta k k^T`` matrix."""
    heads = s_mat.shape[1]
    eye = jnp.eye(s_mat.shape[-1])
    ys = []
    for t in range(x.shape[0]):
        s_mat = jnp.where(start[t][:, None, None, None], 0.0, s_mat)
        q, k, v = (_heads(u, heads) for u in jnp.split(x[t] @ p["qkv"]["kernel"], 3, axis=-1))
        q = q / jnp.sqrt(jnp.sum(q * q, -1, keepdims=True) + 1e-6)
        k = k / jnp.sqrt(jnp.sum(k * k, -1, keepdims=True) + 1e-6)
        beta = jax.nn.sigmoid(_dense(p["beta"], x[t]))[..., None, None]
        alpha = jnp.exp(-jnp.exp(p["a_log"]) * jax.nn.softplus(_dense(p["alpha"], x[t])))
        kk = jnp.einsum("bhk,bhj->bhkj", k, k)
        s_mat = alpha[..., None, None] * s_mat @ (eye - beta * kk)
        s_mat = s_mat + beta * jnp.einsum("bhv,bhk->bhvk", v, k)
        o = jnp.einsum("bhvk,bhk->bhv", s_mat, q).reshape(x.shape[1], -1)
        ys.append(_dense(p["out"], o * jax.nn.silu(_dense(p["gate"], x[t]))))
    return s_mat, jnp.stack(ys)


# --- attention -----------------------------------------------------------------------------


def _layer_norm(p, x):
    mean = jnp.mean(x, -1, keepdims=True)
    var = jnp.mean((x - mean) ** 2, -1, keepdims=True)
    return (x - mean) / jnp.sqrt(var + 1e-6) * p["scale"] + p["bias"]


def _gru_gate(p, x, y):
    """GTrXL gate (Parisotto et al. 2020, eqs. in Section 3.2)."""
    w = y @ p["w"]["kernel"]
    u = x @ p["u"]["kernel"]
    wr, wz, wg = jnp.split(w, 3, axis=-1)
    ur, uz = jnp.split(u, 2, axis=-1)
    r = jax.nn.sigmoid(wr + ur)
    z = jax.nn.sigmoid(wz + uz - p["bias"])
    n = jnp.tanh(wg + (r * x) @ p["ug"]["kernel"])
    return (1 - z) * x + z * n


def attention_reference(gated):
    """Pre-norm windowed attention, one step at a time, with explicit per-layer lists of the
    last M (key, value, ok) entries (oldest first; a start marks them all not ok)."""

    def ref(p, carry, x, start):
        valid, caches = carry
        m = valid.shape[1]
        pasts = [[(k[:, i], v[:, i], valid[:, i]) for i in range(m)] for k, v in caches]
        ys = []
        for t in range(x.shape[0]):
            h = _dense(p["embed"], x[t])
            for layer, past in enumerate(pasts):
                lp = p[f"layer_{layer}"]
                heads = lp["rel_bias"].shape[0]
                past[:] = [(k, v, ok & ~start[t]) for k, v, ok in past]
                q, k, v = (
                    _heads(u, heads)
                    for u in jnp.split(
                        _dense(lp["qkv"], _layer_norm(lp["attn_norm"], h)), 3, axis=-1
                    )
                )
                entries = past + [(k, v, jnp.ones_like(start[t]))]
                scores = jnp.stack(
                    [
                        jnp.einsum("bhd,bhd->bh", q, ke) / jnp.sqrt(q.shape[-1])
                        + lp["rel_bias"][:, m - j]
                        for j, (ke, _, _) in enumerate(entries)
                    ],
                    axis=-1,
                )  # [B, h, M + 1]
                ok = jnp.stack([o for _, _, o in entries], axis=-1)[:, None, :]
                probs = jax.nn.softmax(jnp.where(ok, scores, -jnp.inf), axis=-1)
                o = sum(probs[..., j, None] * ve for j, (_, ve, _) in enumerate(entries))
                o = _dense(lp["attn_out"], o.reshape(h.shape))
                h = _gru_gate(lp["attn_gate"], h, jax.nn.relu(o)) if gated else h + o
                f = jax.nn.relu(_dense(lp["ff_in"], _layer_norm(lp["ff_norm"], h)))
                f = _dense(lp["ff_out"], f)
                h = _gru_gate(lp["ff_gate"], h, jax.nn.relu(f)) if gated else h + f
                past[:] = entries[1:]
            ys.append(_layer_norm(p["out_norm"], h))
        new_valid = jnp.stack([ok for _, _, ok in pasts[0]], axis=1)
        mask = new_valid[:, :, None, None]
        new_caches = tuple(
            (
                jnp.where(mask, jnp.stack([k for k, _, _ in past], 1), 0.0),
                jnp.where(mask, jnp.stack([v for _, v, _ in past], 1), 0.0),
            )
            for past in pasts
        )
        return (new_valid, new_caches), jnp.stack(ys)

    return ref


# --- POPGym's state space, fast weight and external memory baselines --------------------------


def s4d_reference(p, carry, x, start):
    """S4D (Gu et al. 2022), one layer, step by step: per channel h and mode m, ZOH
    ``A_bar = exp(dt_h A)``, ``B_bar = (A_bar - 1) / A B``, ``s = A_bar s + B_bar u_h``,
    ``z_h = 2 Re(sum_m C s) + D_h u_h``, ``y = GLU(W_o gelu(z))``. The carry is the flattened
    ``(prod A_bar since the episode start, s)`` pair of the diagonal recurrence."""
    acc, s = carry
    channels, modes = p["log_neg_real"].shape
    a = -jnp.exp(p["log_neg_real"]) + 1j * p["imag"]
    dt = jnp.exp(p["log_dt"])[:, None]
    a_bar = jnp.exp(a * dt)
    b_bar = (a_bar - 1.0) / a * (p["B"][0] + 1j * p["B"][1])
    c = p["C"][0] + 1j * p["C"][1]
    acc = acc.reshape(-1, channels, modes)
    s = s.reshape(-1, channels, modes)
    ys = []
    for t in range(x.shape[0]):
        new_episode = start[t][:, None, None]
        acc = jnp.where(new_episode, 1.0, acc) * a_bar
        u = _dense(p["map"], x[t])
        s = a_bar * jnp.where(new_episode, 0.0, s) + b_bar * u[:, :, None]
        z = 2.0 * jnp.real(jnp.sum(c * s, axis=-1)) + p["D"] * u
        gate_in, gate = jnp.split(_dense(p["out"], jax.nn.gelu(z)), 2, axis=-1)
        ys.append(gate_in * jax.nn.sigmoid(gate))
    flat = (acc.reshape(acc.shape[0], -1), s.reshape(s.shape[0], -1))
    return flat, jnp.stack(ys)


def fwp_reference(p, carry, x, start):
    """popgym's paper-era fast weight programmer, step by step: the episode step's sinusoidal
    encoding mixed into the input, layer norm, ReLU keys and queries divided by their sums,
    ``F += v k^T``, output ``W_o (F^T q) + b_o``."""
    fast, n = carry
    width = x.shape[-1]
    strength = jnp.clip(p["embedding_strength"], 0.0, 1.0)
    ys = []
    for t in range(x.shape[0]):
        fast = jnp.where(start[t][:, None, None], 0.0, fast)
        n = jnp.where(start[t], 0, n)
        i = np.arange(width) // 2
        angle = n[:, None].astype(jnp.float32) / 1024.0 ** (2 * i / width)
        pe = jnp.where(np.arange(width) % 2 == 0, jnp.sin(angle), jnp.cos(angle))
        e = (1.0 - strength) * x[t] + strength * pe
        mean = jnp.mean(e, -1, keepdims=True)
        var = jnp.mean((e - mean) ** 2, -1, keepdims=True)
        h = (e - mean) / jnp.sqrt(var + 1e-5) * p["norm"]["scale"] + p["norm"]["bias"]
        k = jax.nn.relu(h @ p["key"]["kernel"])
        q = jax.nn.relu(h @ p["query"]["kernel"])
        k = k / (1e-5 + jnp.sum(k, -1, keepdims=True))
        q = q / (1e-5 + jnp.sum(q, -1, keepdims=True))
        v = h @ p["value"]["kernel"]
        fast = fast + v[:, :, None] * k[:, None, :]
        ys.append(_dense(p["out"], jnp.einsum("bij,bi->bj", fast, q)))
        n = n + 1
    return (fast, n), jnp.stack(ys)


def _dnc_projection(carry):
    """The DNC's entering-carry projection (weightings: non-negative, sum at most 1; usage
    clipped to [0, 1]; link non-negative, rows and columns summing to at most 1)."""

    def weighting(w):
        w = jnp.maximum(w, 0.0)
        return w / jnp.maximum(1.0, jnp.sum(w, -1, keepdims=True))

    link = jnp.maximum(carry.link, 0.0)
    biggest = jnp.maximum(jnp.max(jnp.sum(link, -1), -1), jnp.max(jnp.sum(link, -2), -1))
    return carry._replace(
        link=link / jnp.maximum(1.0, biggest)[:, None, None],
        precedence=weighting(carry.precedence),
        read_weights=weighting(carry.read_weights),
        write_weights=weighting(carry.write_weights),
        usage=jnp.clip(carry.usage, 0.0, 1.0),
    )


def _cleared(a, start_t):
    """``a [B, ...]`` with the rows of new episodes zeroed."""
    return jnp.where(start_t.reshape(-1, *[1] * (a.ndim - 1)), 0.0, a)


def dnc_reference(p, carry, x, start):
    """DNC (Graves et al. 2016, Methods) step by step. Allocation without sorting: cell j's
    weight is ``(1 - u_j)`` times the product of the usages of the cells ahead of it in the
    free list (lower usage, or equal usage and lower index)."""
    from stoixlite.networks.memory.dnc import DNCState

    carry = _dnc_projection(carry)
    (c, h), reads, mem, link, prec, w_r, w_w, usage = carry
    batch, cells, width = mem.shape
    heads = w_r.shape[1]

    def content(m, key, strength):
        dots = jnp.sum(m * key[:, None, :], -1)
        norms = (
            jnp.sqrt(jnp.sum(m * m, -1) + 1e-6) * jnp.sqrt(jnp.sum(key * key, -1) + 1e-6)[:, None]
        )
        return jax.nn.softmax(strength[:, None] * dots / norms, axis=-1)

    def oneplus(u):
        return 1.0 + jax.nn.softplus(u)

    ys = []
    for t in range(x.shape[0]):
        c, h, reads, mem, link, prec, w_r, w_w, usage = (
            _cleared(a, start[t]) for a in (c, h, reads, mem, link, prec, w_r, w_w, usage)
        )
        gates = (
            x[t] @ p["input_kernel"]
            + reads.reshape(batch, -1) @ p["read_kernel"]
            + h @ p["recurrent_kernel"]
            + p["bias"]
        )
        i, f, g, o = jnp.split(gates, 4, axis=-1)
        c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
        h = jax.nn.sigmoid(o) * jnp.tanh(c)
        xi = h @ p["interface_kernel"] + p["interface_bias"]
        sizes = [heads * width, heads, width, 1, width, width, heads, 1, 1, 3 * heads]
        ends = np.cumsum(sizes)
        assert ends[-1] == xi.shape[-1]
        parts = [xi[:, end - size : end] for size, end in zip(sizes, ends, strict=True)]
        read_keys = parts[0].reshape(batch, heads, width)
        read_strengths = oneplus(parts[1])
        write_key = parts[2]
        write_strength = oneplus(parts[3])[:, 0]
        erase = jax.nn.sigmoid(parts[4])
        write_vector = parts[5]
        free = jax.nn.sigmoid(parts[6])
        alloc_gate = jax.nn.sigmoid(parts[7])
        write_gate = jax.nn.sigmoid(parts[8])
        modes = jax.nn.softmax(parts[9].reshape(batch, heads, 3), axis=-1)

        retention = jnp.ones((batch, cells))
        for r in range(heads):
            retention = retention * (1.0 - free[:, r : r + 1] * w_r[:, r])
        usage = (usage + w_w - usage * w_w) * retention
        u = 1e-6 + (1.0 - 1e-6) * usage
        # ahead[b, j, i]: cell i precedes cell j in the free list
        index = np.arange(cells)
        ahead = (u[:, None, :] < u[:, :, None]) | (
            (u[:, None, :] == u[:, :, None]) & (index[None, :] < index[:, None])
        )
        alloc = (1.0 - u) * jnp.prod(jnp.where(ahead, u[:, None, :], 1.0), axis=-1)
        w_w = write_gate * (
            alloc_gate * alloc + (1.0 - alloc_gate) * content(mem, write_key, write_strength)
        )
        mem = (
            mem * (1.0 - w_w[:, :, None] * erase[:, None, :])
            + w_w[:, :, None] * write_vector[:, None, :]
        )
        link = (1.0 - w_w[:, :, None] - w_w[:, None, :]) * link + w_w[:, :, None] * prec[:, None, :]
        link = link * (1.0 - np.eye(cells))
        prec = (1.0 - jnp.sum(w_w, -1, keepdims=True)) * prec + w_w
        new_w_r = []
        for r in range(heads):
            forward = jnp.einsum("bij,bj->bi", link, w_r[:, r])
            backward = jnp.einsum("bji,bj->bi", link, w_r[:, r])
            looked_up = content(mem, read_keys[:, r], read_strengths[:, r])
            pi = modes[:, r]
            new_w_r.append(pi[:, 0:1] * backward + pi[:, 1:2] * looked_up + pi[:, 2:3] * forward)
        w_r = jnp.stack(new_w_r, axis=1)
        reads = jnp.einsum("brn,bnw->brw", w_r, mem)
        ys.append(_dense(p["output"], jnp.concatenate([h, reads.reshape(batch, -1)], -1)))
    state = DNCState((c, h), reads, mem, link, prec, w_r, w_w, usage)
    return state, jnp.stack(ys)


# --- the parametrised comparison --------------------------------------------------------------

CASES = {
    "mamba-associative": (
        "mamba",
        {"state_size": 4, "scan": "associative"},
        layer0(mamba_reference),
    ),
    "mamba-sequential": ("mamba", {"state_size": 4, "scan": "sequential"}, layer0(mamba_reference)),
    "mamba-conv1": ("mamba", {"state_size": 4, "conv_size": 1}, layer0(mamba_reference)),
    "elman": ("elman", {}, elman_reference),
    "framestack": ("framestack", {"frames": 3}, framestack_reference),
    "framestack-1": ("framestack", {"frames": 1}, framestack_reference),
    "positional_mlp": ("positional_mlp", {}, positional_mlp_reference),
    "lmu": ("lmu", {"memory_size": 6, "theta": 4.0}, lmu_reference(4.0)),
    "lmu-long-window": ("lmu", {"memory_size": 3, "theta": 64.0}, lmu_reference(64.0)),
    "indrnn": ("indrnn", {}, indrnn_reference(1024)),
    "indrnn-3-layers": ("indrnn", {"num_layers": 3, "max_len": 4}, indrnn_reference(4)),
    "indrnn-zero-biases": ("indrnn", {"bias_max": 0.0}, indrnn_reference(1024)),
    "indrnn-long-init": ("indrnn", {"recurrent_init_min": 0.9}, indrnn_reference(1024)),
    "tcn": ("tcn", {"frames": 3}, tcn_reference),
    "tcn-1": ("tcn", {"frames": 1}, tcn_reference),
    "mlstm-associative": (
        "mlstm",
        {"num_heads": 2, "scan": "associative"},
        layer0(mlstm_reference),
    ),
    "mlstm-sequential": ("mlstm", {"num_heads": 2, "scan": "sequential"}, layer0(mlstm_reference)),
    # chunkwise form: chunks that do not divide T (padding), T itself, longer than T, one step
    **{
        f"mlstm-chunks-{size}": (
            "mlstm",
            {"num_heads": 2, "scan": "sequential", "chunk_size": size},
            layer0(mlstm_reference),
        )
        for size in (1, 3, 8, 16)
    },
    "linear_attention-associative": (
        "linear_attention",
        {"num_heads": 2, "key_size": 3, "scan": "associative"},
        layer0(linear_attention_reference),
    ),
    # chunkwise form (the sequential strategy): chunks that do not divide T, T, longer, one step
    **{
        f"linear_attention-chunks-{size}": (
            "linear_attention",
            {"num_heads": 2, "key_size": 3, "scan": "sequential", "chunk_size": size},
            layer0(linear_attention_reference),
        )
        for size in (1, 3, 8, 16)
    },
    "deltanet": ("deltanet", {"num_heads": 2}, layer0(deltanet_reference)),
    "deltanet-chunks-3": (
        "deltanet",
        {"num_heads": 2, "chunk_size": 3},
        layer0(deltanet_reference),
    ),
    **{
        f"s4d-{scan}": ("s4d", {"state_size": 4, "scan": scan}, layer0(s4d_reference))
        for scan in ("associative", "sequential")
    },
    **{
        f"fwp-{scan}": ("fwp", {"key_size": 3, "scan": scan}, fwp_reference)
        for scan in ("associative", "sequential")
    },
    "dnc": ("dnc", {"memory_cells": 5, "cell_size": 3, "read_heads": 2}, dnc_reference),
    "transformer": ("transformer", {"memory_length": 4}, attention_reference(False)),
    "gtrxl": ("gtrxl", {"memory_length": 4}, attention_reference(True)),
    "gtrxl-long-window": (
        "gtrxl",
        {"memory_length": 16, "num_layers": 1},
        attention_reference(True),
    ),
}
# How to compare a model's carry with its reference's (default: as is).
CARRY_VIEWS = {"mlstm": mlstm_true_state}


def _random_carry(carry, key):
    """Random carry: floats in [0.1, 1] (complex: both parts), bools (window validity) random,
    ints in [0, 50)."""
    leaves, treedef = jax.tree_util.tree_flatten(carry)
    out = []
    for leaf, k in zip(leaves, jax.random.split(key, len(leaves)), strict=True):
        if jnp.issubdtype(leaf.dtype, jnp.complexfloating):
            re, im = jax.random.uniform(k, (2, *leaf.shape), minval=0.1, maxval=1.0)
            out.append(jax.lax.complex(re, im).astype(leaf.dtype))
        elif leaf.dtype == jnp.bool_:
            out.append(jax.random.bernoulli(k, 0.7, leaf.shape))
        elif jnp.issubdtype(leaf.dtype, jnp.integer):
            out.append(jax.random.randint(k, leaf.shape, 0, 50).astype(leaf.dtype))
        else:
            out.append(jax.random.uniform(k, leaf.shape, leaf.dtype, 0.1, 1.0))
    return jax.tree_util.tree_unflatten(treedef, out)


# Cases under `pytest -m slow` (5-15 s of CPU each, the eager reference's gradient): the
# associative scans of the memoroids, whose outputs, final carry and gradients equal their
# sequential scans' in the default run (tests/test_memoroid_scan.py), which are compared with
# the reference here.
SLOW_CASES = frozenset({"mlstm-associative", "s4d-associative", "linear_attention-associative"})
# Also slow: further sizes of a model whose default-sized case runs by default (chunks of one
# step, of T and of 16, longer than T, beside 3, which does not divide T; a window longer than
# T; a third layer; a one-step convolution).
SLOW_CASES |= {
    "mlstm-chunks-1",
    "mlstm-chunks-8",
    "mlstm-chunks-16",
    "linear_attention-chunks-1",
    "linear_attention-chunks-8",
    "linear_attention-chunks-16",
    "gtrxl-long-window",
    "lmu-long-window",
    "indrnn-3-layers",
    "mamba-conv1",
}


@pytest.mark.parametrize(
    "case",
    [pytest.param(c, marks=pytest.mark.slow) if c in SLOW_CASES else c for c in sorted(CASES)],
)
def test_matches_sequential_reference(case):
    """Outputs, final carry and parameter gradients equal the per-step reference."""
    name, kwargs, reference = CASES[case]
    model = build_memory(name, hidden_size=H, **kwargs)
    x, start, w = _inputs(2)
    carry = _random_carry(model.initialize_carry(B), jax.random.key(3))
    params = jax.jit(model.init)(jax.random.key(1), carry, (x, start))  # one program

    def loss_model(params):
        c, y = model.apply(params, carry, (x, start))
        return jnp.sum(w * y), (c, y)

    def loss_ref(params):
        c, y = reference(params["params"], carry, x, start)
        return jnp.sum(w * y), (c, y)

    (_, (c_m, y_m)), g_m = jax.jit(jax.value_and_grad(loss_model, has_aux=True))(params)
    (_, (c_r, y_r)), g_r = jax.value_and_grad(loss_ref, has_aux=True)(params)
    assert y_m.shape == (T, B, H)
    _close(y_m, y_r, "outputs")
    _close(CARRY_VIEWS.get(name, lambda c: c)(c_m), c_r, "final carry")
    _close(g_m, g_r, "parameter gradients", atol=1e-4)


def test_mamba_selective_scan_gradient_equals_autodiff_of_the_recurrence():
    """The hand-written reverse loop of mamba's sequential path equals JAX's autodiff of the
    plain per-step recurrence, for every input (A, the carry, Delta, Delta u, B, C), with resets
    mid-sequence and a loss on the outputs *and* the final carry."""
    from stoixlite.networks.memory.mamba import selective_scan
    from stoixlite.networks.memory.scan import linear_recurrence_combine, resettable_scan

    t, b, e, n = 9, 3, 5, 4
    ks = jax.random.split(jax.random.key(7), 8)
    a = -jnp.exp(jax.random.normal(ks[0], (e, n)))
    state = (jax.random.uniform(ks[1], (b, e, n)), jax.random.normal(ks[2], (b, e, n)))
    dt = jax.nn.softplus(jax.random.normal(ks[3], (t, b, e)))
    du = jax.random.normal(ks[4], (t, b, e))
    bb = jax.random.normal(ks[5], (t, b, n))
    cc = jax.random.normal(ks[6], (t, b, n))
    start = jnp.zeros((t, b), bool).at[4, 0].set(True).at[0, 2].set(True)
    w = jax.random.normal(ks[7], (t, b, e))

    def reference(a, state, dt, du, bb, cc):
        elems = (jnp.exp(dt[..., None] * a), du[..., None] * bb[..., None, :])
        states, final = resettable_scan(
            linear_recurrence_combine, state, elems, start, "sequential"
        )
        return final, jnp.einsum("tben,tbn->tbe", states[1], cc)

    def loss(fn):
        def f(*args):
            (prod, h), y = fn(*args)
            return jnp.sum(w * y) + jnp.sum(jnp.sin(h)) + jnp.sum(prod**2)

        return jax.value_and_grad(f, argnums=(0, 1, 2, 3, 4, 5))

    args = (a, state, dt, du, bb, cc)
    v_ref, g_ref = loss(reference)(*args)
    v_new, g_new = jax.jit(loss(lambda *x: selective_scan(*x, start)))(*args)
    np.testing.assert_allclose(v_new, v_ref, rtol=1e-5)
    _close(g_new, g_ref, "selective scan gradients", atol=1e-5)


@pytest.mark.parametrize("chunk_size", [1, 3, 7, 16])
def test_delta_rule_chunks_equal_the_per_step_recurrence(chunk_size):
    """DeltaNet's chunkwise form (chunks that do not divide T, exactly T, longer than T, one
    step) equals the per-step delta rule, values and JAX gradients for every input (the carry,
    q, k, v, alpha, beta), with resets mid-chunk, at a chunk's first step and at step 0, and a
    loss on the outputs *and* the final state."""
    from stoixlite.networks.memory.deltanet import delta_rule_chunks, delta_rule_step, l2norm

    t, b, h, d = 7, 4, 2, 4
    ks = jax.random.split(jax.random.key(11), 8)
    q = l2norm(jax.random.normal(ks[0], (t, b, h, d)))
    k = l2norm(jax.random.normal(ks[1], (t, b, h, d)))
    v = jax.random.normal(ks[2], (t, b, h, d))
    alpha = jax.nn.sigmoid(jax.random.normal(ks[3], (t, b, h)) + 2.0)
    beta = jax.nn.sigmoid(jax.random.normal(ks[4], (t, b, h)))
    s0 = jax.random.normal(ks[5], (b, h, d, d))
    start = jnp.zeros((t, b), bool).at[3, 1].set(True).at[0, 2].set(True)
    start = start.at[1, 3].set(True).at[5, 3].set(True)
    w = jax.random.normal(ks[6], (t, b, h, d))

    def reference(s0, q, k, v, alpha, beta):
        def step(s, inp):
            st, q_t, k_t, v_t, a_t, b_t = inp
            s = delta_rule_step(jnp.where(st[:, None, None, None], 0.0, s), k_t, v_t, a_t, b_t)
            return s, jnp.einsum("bhvk,bhk->bhv", s, q_t)

        return jax.lax.scan(step, s0, (start, q, k, v, alpha, beta))

    def chunks(s0, q, k, v, alpha, beta):
        return delta_rule_chunks(s0, q, k, v, jnp.log(alpha), beta, start, chunk_size)

    def loss(fn):
        def f(*args):
            s, o = fn(*args)
            return jnp.sum(w * o) + jnp.sum(jnp.sin(s))

        return jax.value_and_grad(f, argnums=(0, 1, 2, 3, 4, 5))

    args = (s0, q, k, v, alpha, beta)
    v_ref, g_ref = loss(reference)(*args)
    v_new, g_new = jax.jit(loss(chunks))(*args)
    np.testing.assert_allclose(v_new, v_ref, rtol=1e-5)
    _close(g_new, g_ref, "delta rule gradients", atol=1e-5)


@pytest.mark.parametrize("bias_max", [1.0, 0.25, 0.0])
def test_indrnn_initial_biases_are_uniform_up_to_bias_max(bias_max):
    """``b ~ U(0, bias_max)`` per layer (POPGym's U(0, 1) by default; ``bias_max`` 0: Li et al.'s
    zeros); the recurrent weights stay ``U(0, 1)`` whatever ``bias_max``."""
    hidden = 512
    kwargs = {} if bias_max == 1.0 else {"bias_max": bias_max}
    model = build_memory("indrnn", hidden_size=hidden, **kwargs)
    x, start, _ = _inputs(0)
    params = model.init(jax.random.key(4), model.initialize_carry(B), (x, start))["params"]
    for layer in range(model.num_layers):
        b, u = np.asarray(params[f"bias_{layer}"]), np.asarray(params[f"recurrent_{layer}"])
        assert b.shape == (hidden,)
        if bias_max == 0.0:
            np.testing.assert_array_equal(b, 0.0)
        else:
            assert b.min() >= 0.0 and b.max() <= bias_max
            assert abs(b.mean() - bias_max / 2) < 0.1 * bias_max  # uniform, not a constant
            assert b.max() - b.min() > 0.8 * bias_max
        assert u.min() >= 0.0 and u.max() <= 1.0 and abs(u.mean() - 0.5) < 0.1


@pytest.mark.parametrize("low", [0.0, 0.5, 0.99])
def test_indrnn_recurrent_weights_start_uniform_from_recurrent_init_min(low):
    """``u ~ U(recurrent_init_min, 1)`` per layer, the biases untouched; ``0`` (the default) draws
    exactly what POPGym's ``U(0, 1)`` draws, so the default model is unchanged bit for bit."""
    hidden = 512
    x, start, _ = _inputs(0)
    model = build_memory("indrnn", hidden_size=hidden, recurrent_init_min=low)
    params = model.init(jax.random.key(4), model.initialize_carry(B), (x, start))["params"]
    default = build_memory("indrnn", hidden_size=hidden)
    base = default.init(jax.random.key(4), default.initialize_carry(B), (x, start))["params"]
    for layer in range(model.num_layers):
        u = np.asarray(params[f"recurrent_{layer}"])
        assert u.min() >= low and u.max() <= 1.0
        assert abs(u.mean() - (1 + low) / 2) < 0.1 * (1 - low)  # uniform over the whole range
        assert u.max() - u.min() > 0.8 * (1 - low)
        np.testing.assert_array_equal(params[f"bias_{layer}"], base[f"bias_{layer}"])
        if low == 0.0:
            np.testing.assert_array_equal(u, base[f"recurrent_{layer}"])
    if low == 0.0:  # the initialiser before recurrent_init_min existed: flax's uniform(1.0)
        for seed in range(3):
            key = jax.random.key(seed)
            np.testing.assert_array_equal(
                recurrent_init(0.0)(key, (hidden,)), nn.initializers.uniform(1.0)(key, (hidden,))
            )


def test_indrnn_recurrent_weights_are_kept_inside_the_bound():
    """Recurrent weights beyond POPGym's bound ``c = 2^(1 / max_len)`` act as ``+-c`` (the
    reference clamps them), and their gradient is the gradient at the clamped weight where it
    is inside or a descent step moves it back inside, zero where it would push it further out."""
    max_len = 4
    model = build_memory("indrnn", hidden_size=H, max_len=max_len)
    x, start, w = _inputs(5)
    carry = _random_carry(model.initialize_carry(B), jax.random.key(6))
    params = model.init(jax.random.key(1), carry, (x, start))
    p = dict(params["params"])
    p["recurrent_0"] = jnp.linspace(-3.0, 3.0, H)
    p["recurrent_1"] = jnp.linspace(2.0, -2.0, H)
    bound = 2.0 ** (1.0 / max_len)

    def loss_model(p):
        return jnp.sum(w * model.apply({"params": p}, carry, (x, start))[1])

    def loss_ref(p, max_len=max_len):
        return jnp.sum(w * indrnn_reference(max_len)(p, carry, x, start)[1])

    np.testing.assert_allclose(loss_model(p), loss_ref(p), rtol=1e-5)
    assert not np.isclose(loss_model(p), loss_ref(p, max_len=0.01)), "no clamp: differs"

    clamped = {**p, **{k: jnp.clip(p[k], -bound, bound) for k in ("recurrent_0", "recurrent_1")}}
    g_at_clamped = jax.grad(loss_ref)(clamped, max_len=0.01)  # no clamp (clip's tie gradient)
    g_model = jax.jit(jax.grad(loss_model))(p)
    passed = zeroed = 0
    for key in ("recurrent_0", "recurrent_1"):
        u, g = np.asarray(p[key]), np.asarray(g_at_clamped[key])
        inward = ((u > bound) & (g > 0)) | ((u < -bound) & (g < 0))
        keep = (np.abs(u) <= bound) | inward
        np.testing.assert_allclose(g_model[key], np.where(keep, g, 0.0), rtol=1e-5, atol=1e-6)
        passed += int((inward & (g != 0)).sum())
        zeroed += int((~keep & (g != 0)).sum())
    assert passed and zeroed, "both kinds of out-of-bound weight must occur (test sanity)"
    # the other parameters: plain gradients
    for key in ("bias_0", "bias_1"):
        np.testing.assert_allclose(g_model[key], g_at_clamped[key], rtol=1e-4, atol=1e-5)
