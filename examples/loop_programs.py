"""Ten loop-heavy scientific JAX programs that are not in the zoo, to check the tuner
on programs it never trained on.

``costmodel tune examples/loop_programs.py:NAME --budget 8`` tunes one; ``NAMES``
lists them. Each function returns ``(fn, args)`` like ``fleet_programs.py``, and
takes size parameters whose defaults are the measured sizes (a few to a few tens of
milliseconds on one core); tests pass smaller ones. Inputs are random from fixed
seeds, nothing is downloaded, and every output is a small pytree.

Written in plain ``jax.numpy`` with ``lax.scan``/``fori_loop``/``while_loop``: ODE
solvers (adaptive Dormand-Prince, implicit Euler with Newton), SDE and MCMC samplers,
a particle filter, molecular dynamics, an optimizer loop, an epidemic model, a Kalman
filter and a cellular automaton. Most carry a few KB of loop state and no matmul in
the loop body (the loops XLA:CPU's ``xla_cpu_small_while_loop_byte_threshold``
decides about); ``adam_logreg`` and ``kalman_tracks`` hold a dot in theirs.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

Built = tuple[Any, tuple[Any, ...]]

# Dormand-Prince 5(4): stage coefficients, 5th-order weights, error weights (5th - 4th)
_DP_A = (
    (),
    (1 / 5,),
    (3 / 40, 9 / 40),
    (44 / 45, -56 / 15, 32 / 9),
    (19372 / 6561, -25360 / 2187, 64448 / 6561, -212 / 729),
    (9017 / 3168, -355 / 33, 46732 / 5247, 49 / 176, -5103 / 18656),
)
_DP_B = (35 / 384, 0.0, 500 / 1113, 125 / 192, -2187 / 6784, 11 / 84)
_DP_E = (71 / 57600, 0.0, -71 / 16695, 71 / 1920, -17253 / 339200, 22 / 525, -1 / 40)


def _normal(seed: int, shape: tuple[int, ...]) -> Any:
    return jnp.asarray(np.random.default_rng(seed).standard_normal(shape), jnp.float32)


def _dopri_step(f: Any, y: Any, k1: Any, h: Any) -> tuple[Any, Any, Any]:
    """One Dormand-Prince step from ``y`` (``k1 = f(y)``): new y, its f, error."""
    ks = [k1]
    for a in _DP_A[1:]:
        ks.append(f(y + h * sum(c * k for c, k in zip(a, ks, strict=False))))
    y5 = y + h * sum(b * k for b, k in zip(_DP_B, ks, strict=True))
    k7 = f(y5)
    err = h * sum(e * k for e, k in zip(_DP_E, [*ks, k7], strict=True))
    return y5, k7, err


def dopri_vdp(members: int = 128, t_end: float = 200.0, tol: float = 1e-6) -> Built:
    """An ensemble of Van der Pol oscillators (mu 0.5-2.5), adaptive Dormand-Prince
    5(4) with one step size for all, ``while_loop`` with step rejection."""

    def solve(y0: Any, mu: Any) -> Any:
        def f(y: Any) -> Any:
            return jnp.stack([y[1], mu * (1 - y[0] ** 2) * y[1] - y[0]])

        def body(s: Any) -> Any:
            t, h, y, k1, acc, rej = s
            h = jnp.minimum(h, t_end - t)
            y5, k7, err = _dopri_step(f, y, k1, h)
            scale = tol + tol * jnp.maximum(jnp.abs(y), jnp.abs(y5))
            ratio = jnp.sqrt(jnp.mean((err / scale) ** 2))
            ok = ratio <= 1.0
            grow = jnp.clip(0.9 * jnp.maximum(ratio, 1e-10) ** -0.2, 0.2, 5.0)
            y, k1 = jnp.where(ok, y5, y), jnp.where(ok, k7, k1)
            return t + jnp.where(ok, h, 0.0), h * grow, y, k1, acc + ok, rej + ~ok

        init = (0.0, 1e-3, y0, f(y0), 0, 0)
        done = jax.lax.while_loop(
            lambda s: (s[0] < t_end) & (s[4] + s[5] < 100_000), body, init
        )
        return {"y": done[2], "accepted": done[4], "rejected": done[5]}

    mu = 1.5 + jnp.tanh(_normal(11, (members,)))
    return solve, (2.0 * _normal(12, (2, members)), mu)


def _robertson_newton_step(y: Any, h: Any, k: Any) -> tuple[Any, Any]:
    """Implicit Euler for Robertson's kinetics: Newton on z = y + h f(z), the 3x3
    systems solved in closed form per member; returns z and the iterations."""
    k1, k2, k3 = k

    def body(s: Any) -> Any:
        z, _, it = s
        a, b, c = z
        f = jnp.stack(
            [-k1 * a + k3 * b * c, k1 * a - k3 * b * c - k2 * b * b, k2 * b * b]
        )
        g = z - y - h * f
        # Rows of I - h df/dz; the third, (0, -q, 1), gives dz[2] = g[2] + q dz[1]
        q = 2 * h * k2 * b
        m00, m01, m02 = 1 + h * k1, -h * k3 * c, -h * k3 * b
        m10, m11, m12 = -h * k1, 1 + h * (k3 * c + 2 * k2 * b), h * k3 * b
        a01, a11 = m01 + m02 * q, m11 + m12 * q
        r0, r1 = g[0] - m02 * g[2], g[1] - m12 * g[2]
        det = m00 * a11 - a01 * m10
        d0, d1 = (r0 * a11 - a01 * r1) / det, (m00 * r1 - r0 * m10) / det
        dz = jnp.stack([d0, d1, g[2] + q * d1])
        size = jnp.max(jnp.abs(dz) / (1e-12 + jnp.abs(z)))
        return z - dz, size, it + 1

    def cond(s: Any) -> Any:
        return (s[1] > 1e-5) & (s[2] < 10)

    z, _, iters = jax.lax.while_loop(cond, body, (y, jnp.float32(1.0), 0))
    return z, iters


def implicit_robertson(members: int = 128, steps: int = 500) -> Built:
    """Robertson's stiff chemical kinetics for an ensemble of rate constants,
    implicit Euler on geometrically growing steps (to t ~ 8e4 in 500) under
    ``lax.scan``, a Newton ``while_loop`` in each step."""

    def solve(y0: Any, k: Any, hs: Any) -> Any:
        y, iters = jax.lax.scan(lambda y, h: _robertson_newton_step(y, h, k), y0, hs)
        return {"y": y, "newton_iterations": jnp.sum(iters)}

    base = jnp.array([0.04, 3e7, 1e4], jnp.float32)[:, None]
    k = base * jnp.exp(0.2 * jnp.tanh(_normal(21, (3, members))))
    y0 = jnp.zeros((3, members), jnp.float32).at[0].set(1.0)
    hs = jnp.asarray(1e-5 * 1.04 ** np.arange(steps), jnp.float32)
    return solve, (y0, k, hs)


# Muller-Brown potential: four Gaussian wells A exp(a dx^2 + b dx dy + c dy^2)
_MB = np.array(
    [
        [-200, -1, 0, -10, 1, 0],
        [-100, -1, 0, -10, 0, 0.5],
        [-170, -6.5, 11, -6.5, -0.5, 1.5],
        [15, 0.7, 0.6, 0.7, -1, 1],
    ],
    np.float32,
)


def _muller_brown(x: Any) -> Any:
    dx, dy = x[:, :1] - _MB[:, 4], x[:, 1:] - _MB[:, 5]
    e = _MB[:, 0] * jnp.exp(
        _MB[:, 1] * dx * dx + _MB[:, 2] * dx * dy + _MB[:, 3] * dy * dy
    )
    return jnp.sum(e, -1)


def langevin_mb(particles: int = 256, steps: int = 1000, dt: float = 1e-3) -> Built:
    """Underdamped Langevin dynamics on the Muller-Brown potential, semi-implicit
    Euler-Maruyama under ``fori_loop``, noise drawn in the loop."""
    gamma, kt = 5.0, 15.0
    force = jax.grad(lambda x: -jnp.sum(_muller_brown(x)))

    def simulate(x0: Any, key: Any) -> Any:
        def step(i: Any, s: Any) -> Any:
            x, v, energy = s
            dw = jax.random.normal(jax.random.fold_in(key, i), x.shape)
            v = v + (force(x) - gamma * v) * dt + (2 * gamma * kt * dt) ** 0.5 * dw
            x = x + v * dt
            return x, v, energy + jnp.mean(_muller_brown(x))

        x, _, energy = jax.lax.fori_loop(0, steps, step, (x0, jnp.zeros_like(x0), 0.0))
        return {"mean_x": jnp.mean(x, 0), "mean_energy": energy / steps}

    x0 = jnp.array([-0.55, 1.45]) + 0.05 * _normal(31, (particles, 2))
    return simulate, (x0, jax.random.key(32))


def ising_gibbs(n: int = 64, sweeps: int = 100, beta: float = 0.44) -> Built:
    """Heat-bath Gibbs sampling of a periodic ``n`` x ``n`` Ising model (int8 spins),
    checkerboard half-sweeps under ``lax.scan``; the magnetisation per sweep."""

    def sample(spins0: Any, key: Any) -> Any:
        # P(up | neighbour sum h), h in -4..4 step 2: a table, so no exp in the loop
        p_up = jax.nn.sigmoid(2 * beta * jnp.arange(-4, 5, 2, dtype=jnp.float32))
        colour = (jnp.arange(n)[:, None] + jnp.arange(n)[None, :]) % 2

        def half(s: Any, c: int, k: Any) -> Any:
            h = sum(jnp.roll(s, d, a) for d in (1, -1) for a in (0, 1))
            up = jax.random.uniform(k, s.shape) < p_up[(h + 4) // 2]
            return jnp.where(colour == c, jnp.where(up, 1, -1).astype(jnp.int8), s)

        def sweep(s: Any, i: Any) -> Any:
            k0, k1 = jax.random.split(jax.random.fold_in(key, i))
            s = half(half(s, 0, k0), 1, k1)
            return s, jnp.mean(s.astype(jnp.float32))

        spins, m = jax.lax.scan(sweep, spins0, jnp.arange(sweeps))
        return {"magnetisation": m, "final": jnp.sum(spins.astype(jnp.int32))}

    spins0 = jnp.where(_normal(41, (n, n)) > 0, 1, -1).astype(jnp.int8)
    return sample, (spins0, jax.random.key(42))


def _ungm(x: Any, t: Any) -> Any:
    """The univariate nonstationary growth model's transition mean."""
    return 0.5 * x + 25 * x / (1 + x * x) + 8 * jnp.cos(1.2 * t)


def particle_filter(particles: int = 512, steps: int = 200) -> Built:
    """A bootstrap particle filter on the nonstationary growth model, systematic
    resampling (cumsum + searchsorted) every step, ``lax.scan`` over observations."""

    def run(ys: Any, key: Any) -> Any:
        def step(s: Any, ty: Any) -> Any:
            x, loglik = s
            t, y = ty
            k0, k1 = jax.random.split(jax.random.fold_in(key, t))
            x = _ungm(x, t.astype(jnp.float32)) + 10**0.5 * jax.random.normal(
                k0, x.shape
            )
            logw = -0.5 * (y - x * x / 20) ** 2
            norm = jax.nn.logsumexp(logw)
            w = jnp.exp(logw - norm)
            u = (jnp.arange(particles) + jax.random.uniform(k1)) / particles
            idx = jnp.searchsorted(jnp.cumsum(w), u)
            x_new = x[jnp.minimum(idx, particles - 1)]
            return (x_new, loglik + norm - jnp.log(particles)), jnp.sum(w * x)

        ts = jnp.arange(1, steps + 1)  # fold_in takes integers; t=0 drew x0
        x0 = jax.random.normal(jax.random.fold_in(key, 0), (particles,))
        (_, loglik), means = jax.lax.scan(step, (x0, 0.0), (ts, ys))
        return {"loglik": loglik, "means": means}

    rng = np.random.default_rng(51)
    x, ys = 0.1, []
    for t in range(1, steps + 1):
        x = float(_ungm(np.float32(x), np.float32(t))) + 10**0.5 * rng.standard_normal()
        ys.append(x * x / 20 + rng.standard_normal())
    return run, (jnp.asarray(ys, jnp.float32), jax.random.key(52))


def _lj(x: Any, box: float) -> tuple[Any, Any]:
    """Lennard-Jones forces and energy, minimum image, cut at 2.5 sigma."""
    d = x[:, None, :] - x[None, :, :]
    d = d - box * jnp.round(d / box)
    r2 = jnp.sum(d * d, -1) + jnp.eye(x.shape[0])
    inside = (r2 < 6.25) & (jnp.eye(x.shape[0]) == 0)
    inv6 = jnp.where(inside, r2**-3, 0.0)
    f = jnp.sum((24 * (2 * inv6 * inv6 - inv6) / r2)[..., None] * d, 1)
    return f, 2 * jnp.sum(inv6 * inv6 - inv6)


def lj_verlet(cells: int = 4, steps: int = 500, dt: float = 0.004) -> Built:
    """Velocity-Verlet molecular dynamics of ``cells**3`` Lennard-Jones particles
    (density 0.8, periodic box) under ``fori_loop``; energies, not positions, out
    (the dynamics is chaotic; averages are what it is run for)."""
    box = (cells**3 / 0.8) ** (1 / 3)

    def simulate(x0: Any, v0: Any) -> Any:
        def step(_: Any, s: Any) -> Any:
            x, v, f, pe_sum = s
            v = v + 0.5 * dt * f
            x = x + dt * v
            f, pe = _lj(x, box)
            return x, v + 0.5 * dt * f, f, pe_sum + pe

        f0, _ = _lj(x0, box)
        x, v, _, pe_sum = jax.lax.fori_loop(0, steps, step, (x0, v0, f0, 0.0))
        n = x.shape[0]
        return {"mean_pe": pe_sum / (steps * n), "ke": 0.5 * jnp.sum(v * v) / n}

    grid = np.stack(np.meshgrid(*[np.arange(cells)] * 3, indexing="ij"), -1)
    x0 = (grid.reshape(-1, 3) + 0.5) * (box / cells) + 0.05 * _normal(61, (cells**3, 3))
    v0 = _normal(62, (cells**3, 3))
    return simulate, (x0, v0 - jnp.mean(v0, 0))


def adam_logreg(samples: int = 1024, features: int = 64, steps: int = 400) -> Built:
    """Adam on L2-regularised logistic regression, full batch, ``fori_loop``; the
    loop body holds the two matrix-vector products of the gradient."""

    def loss(w: Any, x: Any, y: Any) -> Any:
        return jnp.mean(jax.nn.softplus(-y * (x @ w))) + 5e-4 * jnp.sum(w * w)

    def fit(x: Any, y: Any) -> Any:
        def step(i: Any, s: Any) -> Any:
            w, m, v = s
            g = jax.grad(loss)(w, x, y)
            m, v = 0.9 * m + 0.1 * g, 0.999 * v + 0.001 * g * g
            t = (i + 1).astype(jnp.float32)
            mhat, vhat = m / (1 - 0.9**t), v / (1 - 0.999**t)
            return w - 0.05 * mhat / (jnp.sqrt(vhat) + 1e-8), m, v

        zeros = jnp.zeros((features,))
        w, _, _ = jax.lax.fori_loop(0, steps, step, (zeros, zeros, zeros))
        return {"w": w, "loss": loss(w, x, y)}

    x = _normal(71, (samples, features))
    logits = x @ _normal(72, (features,)) + 0.5 * _normal(73, (samples,))
    return fit, (x, jnp.where(logits > 0, 1.0, -1.0))


def seir(members: int = 256, days: int = 730, substeps: int = 16) -> Built:
    """An ensemble of SEIR epidemics with seasonal transmission and a distancing rule
    (transmission cut while prevalence is high): ``lax.scan`` over days, forward
    Euler substeps in a ``fori_loop`` each day; daily mean incidence out."""
    dt = 1.0 / substeps

    def run(params: Any) -> Any:
        beta0, sigma, gamma = params

        def day(s: Any, t: Any) -> Any:
            beta = beta0 * (1 + 0.25 * jnp.cos(2 * jnp.pi * t / 365))

            def sub(_: Any, c: Any) -> Any:  # c: S, E, I, R rows
                b = jnp.where(c[2] > 0.02, 0.6 * beta, beta)
                e, i, r = b * c[0] * c[2], sigma * c[1], gamma * c[2]
                return c + dt * jnp.stack([-e, e - i, i - r, r])

            after = jax.lax.fori_loop(0, substeps, sub, s)
            return after, jnp.mean(s[0] + s[1] - after[0] - after[1])

        init = jnp.array([0.999, 0, 1e-3, 0])[:, None] * jnp.ones_like(beta0)
        final, incidence = jax.lax.scan(day, init, jnp.arange(days, dtype=jnp.float32))
        return {"attack_rate": final[3] + final[2], "incidence": incidence}

    u = jax.nn.sigmoid(_normal(81, (3, members)))
    return run, (jnp.stack([0.2 + 0.3 * u[0], 1 / (2 + 4 * u[1]), 1 / (4 + 6 * u[2])]),)


def kalman_tracks(tracks: int = 16, steps: int = 400, dt: float = 0.1) -> Built:
    """Kalman filters for ``tracks`` 3-D constant-velocity targets under ``lax.scan``:
    the prediction's batched 6x6 matrix products in the loop body, then three scalar
    measurement updates (no matrix inverse); the log-likelihood per track."""
    f = np.eye(6, dtype=np.float32) + dt * np.eye(6, k=3, dtype=np.float32)
    q1 = np.array([[dt**3 / 3, dt**2 / 2], [dt**2 / 2, dt]], np.float32)
    q = np.kron(q1, np.eye(3, dtype=np.float32))
    r2 = 0.25

    def run(ys: Any) -> Any:
        def step(s: Any, y: Any) -> Any:
            m, p, ll = s
            m = m @ f.T
            p = jnp.einsum("ij,bjk,lk->bil", f, p, f) + q
            for j in range(3):  # sequential scalar updates (diagonal noise)
                var = p[:, j, j] + r2
                gain = p[:, :, j] / var[:, None]
                resid = y[:, j] - m[:, j]
                m = m + gain * resid[:, None]
                p = p - gain[:, :, None] * gain[:, None, :] * var[:, None, None]
                ll = ll - 0.5 * (resid**2 / var + jnp.log(2 * jnp.pi * var))
            return (m, p, ll), None

        p0 = jnp.broadcast_to(jnp.eye(6), (tracks, 6, 6))
        init = (jnp.zeros((tracks, 6)), p0, jnp.zeros((tracks,)))
        (m, _, ll), _ = jax.lax.scan(step, init, ys)
        return {"state": m, "loglik": ll}

    rng = np.random.default_rng(91)
    chol = np.linalg.cholesky(q + 1e-9 * np.eye(6))
    x, ys = rng.standard_normal((tracks, 6)), []
    for _ in range(steps):
        x = x @ f.T + rng.standard_normal((tracks, 6)) @ chol.T
        ys.append(x[:, :3] + r2**0.5 * rng.standard_normal((tracks, 3)))
    return run, (jnp.asarray(np.stack(ys), jnp.float32),)


def game_of_life(n: int = 64, generations: int = 500) -> Built:
    """Conway's Game of Life on an ``n`` x ``n`` torus (uint8 cells), ``lax.scan``
    over generations; the population per generation and the final board."""

    def run(board0: Any) -> Any:
        def gen(b: Any, _: Any) -> Any:
            nb = sum(
                jnp.roll(jnp.roll(b, dy, 0), dx, 1)
                for dy in (-1, 0, 1)
                for dx in (-1, 0, 1)
                if dy or dx
            )
            b = ((nb == 3) | ((b == 1) & (nb == 2))).astype(jnp.uint8)
            return b, jnp.sum(b, dtype=jnp.int32)

        board, population = jax.lax.scan(gen, board0, None, length=generations)
        return {"population": population, "board": board}

    return run, ((_normal(101, (n, n)) > 0.4).astype(jnp.uint8),)


NAMES = (
    "dopri_vdp",
    "implicit_robertson",
    "langevin_mb",
    "ising_gibbs",
    "particle_filter",
    "lj_verlet",
    "adam_logreg",
    "seir",
    "kalman_tracks",
    "game_of_life",
)
