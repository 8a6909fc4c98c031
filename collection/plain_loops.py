"""Loop-heavy plain-JAX programs of the zoo (family ``loops``): integrators, samplers,
rollouts, optimizer loops and small-state recurrences written with ``lax.scan``,
``fori_loop`` and ``while_loop``.

These are the programs where XLA:CPU's default leaves the most: a loop whose state
is small runs thunk by thunk unless ``xla_cpu_small_while_loop_byte_threshold``
(``xla_cpu/2``) lets it run as one compiled call, which it refuses for a loop body
holding a dot, convolution, custom call or scatter. So the bodies here are mostly
elementwise and reductions (a recurrence's input projection is one matmul before the
loop), with 1-64 KB of loop state. Same conventions as ``plain``: builders import
jax when called, return ``(fn, args)`` with parameters among ``args``, random init,
nothing downloaded.
"""

from __future__ import annotations

from typing import Any

from xla_costmodel.collection.plain import Builder, Built, example


def _key(seed: int) -> Any:
    import jax

    return jax.random.key(seed)


def rk4_kuramoto(oscillators: int, steps: int, dt: float = 0.01) -> Builder:
    """Kuramoto oscillators with mean-field coupling, fixed-step RK4 under
    ``lax.scan`` (coupled strongly enough to synchronise: not chaotic, so a
    compile's rounding differences stay small)."""

    def build() -> Built:
        import jax
        import jax.numpy as jnp

        def field(theta: Any, omega: Any) -> Any:
            s, c = jnp.mean(jnp.sin(theta)), jnp.mean(jnp.cos(theta))
            return omega + 2.0 * (s * jnp.cos(theta) - c * jnp.sin(theta))

        def solve(theta0: Any, omega: Any) -> Any:
            def step(theta: Any, _: Any) -> Any:
                k1 = field(theta, omega)
                k2 = field(theta + 0.5 * dt * k1, omega)
                k3 = field(theta + 0.5 * dt * k2, omega)
                k4 = field(theta + dt * k3, omega)
                return theta + dt / 6 * (k1 + 2 * k2 + 2 * k3 + k4), None

            return jax.lax.scan(step, theta0, None, length=steps)[0]

        return solve, (example((oscillators,)), 0.5 * example((oscillators,)))

    return build


def sde_ou(paths: int, steps: int, dt: float = 0.01) -> Builder:
    """Euler-Maruyama on ``paths`` Ornstein-Uhlenbeck paths; noise drawn in the loop."""

    def build() -> Built:
        import jax
        import jax.numpy as jnp

        def solve(x0: Any, theta: Any, sigma: Any, key: Any) -> Any:
            def step(x: Any, k: Any) -> Any:
                dw = jax.random.normal(k, x.shape) * dt**0.5
                return x - theta * x * dt + sigma * dw, None

            return jax.lax.scan(step, x0, jax.random.split(key, steps))[0]

        theta = jnp.abs(example((paths,))) + 0.5
        return solve, (example((paths,)), theta, jnp.float32(0.3), _key(2))

    return build


def rw_metropolis(chains: int, dim: int, steps: int) -> Builder:
    """Random-walk Metropolis on a banana-shaped density, ``fori_loop`` over steps."""

    def build() -> Built:
        import jax
        import jax.numpy as jnp

        def logp(x: Any, scale: Any) -> Any:
            a, b = x[..., ::2], x[..., 1::2]
            return -0.5 * jnp.sum(a * a + scale * (b - a * a) ** 2, -1)

        def sample(x0: Any, scale: Any, key: Any) -> Any:
            def step(i: Any, state: Any) -> Any:
                x, lp, acc = state
                k1, k2 = jax.random.split(jax.random.fold_in(key, i))
                prop = x + 0.3 * jax.random.normal(k1, x.shape)
                lp_prop = logp(prop, scale)
                take = jnp.log(jax.random.uniform(k2, lp.shape)) < lp_prop - lp
                x = jnp.where(take[:, None], prop, x)
                return x, jnp.where(take, lp_prop, lp), acc + take

            init = (x0, logp(x0, scale), jnp.zeros(x0.shape[0], jnp.int32))
            return jax.lax.fori_loop(0, steps, step, init)

        return sample, (example((chains, dim)), jnp.float32(2.0), _key(3))

    return build


def hmc(chains: int, dim: int, steps: int, leapfrogs: int) -> Builder:
    """Hamiltonian Monte Carlo, ``chains`` independent chains on a quartic density:
    ``fori_loop`` over steps around a ``fori_loop`` over leapfrog steps."""

    def build() -> Built:
        import jax
        import jax.numpy as jnp

        def logp(x: Any, w: Any) -> Any:  # one value per chain
            return -0.5 * jnp.sum(w * x * x + 0.1 * x**4, -1)

        grad = jax.grad(lambda x, w: jnp.sum(logp(x, w)))

        def sample(x0: Any, w: Any, key: Any) -> Any:
            eps = 0.05

            def leapfrog(_: Any, qp: Any) -> Any:
                q, p = qp
                p = p + 0.5 * eps * grad(q, w)
                q = q + eps * p
                return q, p + 0.5 * eps * grad(q, w)

            def step(i: Any, x: Any) -> Any:
                k1, k2 = jax.random.split(jax.random.fold_in(key, i))
                p0 = jax.random.normal(k1, x.shape)
                q, p = jax.lax.fori_loop(0, leapfrogs, leapfrog, (x, p0))
                h0 = -logp(x, w) + 0.5 * jnp.sum(p0 * p0, -1)
                h1 = -logp(q, w) + 0.5 * jnp.sum(p * p, -1)
                take = jnp.log(jax.random.uniform(k2, h0.shape)) < h0 - h1
                return jnp.where(take[:, None], q, x)

            return jax.lax.fori_loop(0, steps, step, x0)

        w = jnp.abs(example((chains, dim))) + 0.5
        return sample, (example((chains, dim)), w, _key(4))

    return build


def nbody(particles: int, steps: int, dt: float = 1e-3) -> Builder:
    """Leapfrog (kick-drift-kick) N-body rollout with softened pairwise gravity."""

    def build() -> Built:
        import jax
        import jax.numpy as jnp

        def accel(pos: Any, mass: Any) -> Any:
            d = pos[None, :, :] - pos[:, None, :]
            inv = (jnp.sum(d * d, -1) + 1e-2) ** -1.5
            return jnp.sum(d * (mass[None, :] * inv)[..., None], 1)

        def rollout(pos: Any, vel: Any, mass: Any) -> Any:
            def step(_: Any, state: Any) -> Any:
                x, v = state
                v = v + 0.5 * dt * accel(x, mass)
                x = x + dt * v
                return x, v + 0.5 * dt * accel(x, mass)

            return jax.lax.fori_loop(0, steps, step, (pos, vel))

        mass = jnp.abs(example((particles,))) + 0.1
        return rollout, (example((particles, 3)), 0.1 * example((particles, 3)), mass)

    return build


def gd_rosenbrock(dim: int, max_steps: int, tol: float = 1e-3) -> Builder:
    """Gradient descent with momentum on Rosenbrock, ``while_loop`` until the gradient
    norm is under ``tol`` (or ``max_steps``)."""

    def build() -> Built:
        import jax
        import jax.numpy as jnp

        def loss(x: Any) -> Any:
            return jnp.sum(100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2)

        def minimize(x0: Any, lr: Any) -> Any:
            def cond(state: Any) -> Any:
                i, _, _, g = state
                return (i < max_steps) & (jnp.sqrt(jnp.sum(g * g)) > tol)

            def body(state: Any) -> Any:
                i, x, m, _ = state
                g = jax.grad(loss)(x)
                m = 0.9 * m + g
                return i + 1, x - lr * m, m, g

            init = (0, x0, jnp.zeros_like(x0), jnp.ones_like(x0))
            return jax.lax.while_loop(cond, body, init)[1]

        return minimize, (1.0 + 0.1 * example((dim,)), jnp.float32(1e-4))

    return build


def indrnn(batch: int, steps: int, d_in: int, hidden: int) -> Builder:
    """An LSTM-like cell with elementwise (IndRNN) recurrence under ``lax.scan``; the
    input projection is one matmul before the loop, so the loop body has no dot."""

    def build() -> Built:
        import jax
        import jax.numpy as jnp

        def forward(w: Any, u: Any, b: Any, xs: Any) -> Any:
            z = xs @ w + b  # [steps, batch, 4 * hidden]

            def step(carry: Any, zt: Any) -> Any:
                h, c = carry
                i, f, g, o = jnp.split(zt + jnp.tile(h, 4) * u, 4, -1)
                c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
                h = jax.nn.sigmoid(o) * jnp.tanh(c)
                return (h, c), None

            zeros = jnp.zeros((batch, hidden))
            return jax.lax.scan(step, (zeros, zeros), z)[0][0]

        params = (
            example((d_in, 4 * hidden)) / d_in**0.5,
            0.5 * example((4 * hidden,)),
            jnp.zeros((4 * hidden,)),
        )
        return forward, (*params, example((steps, batch, d_in)))

    return build


def lotka_volterra(members: int, steps: int, dt: float = 0.002) -> Builder:
    """An ensemble of predator-prey (Lotka-Volterra) systems with per-member rates,
    fixed-step RK4 under ``fori_loop`` (periodic orbits, not chaotic)."""

    def build() -> Built:
        import jax
        import jax.numpy as jnp

        def field(s: Any, r: Any) -> Any:
            prey, pred = s[0], s[1]
            return jnp.stack(
                [
                    prey * (r[0] - r[1] * pred),
                    pred * (r[2] * prey - r[3]),
                ]
            )

        def solve(s0: Any, r: Any) -> Any:
            def step(_: Any, s: Any) -> Any:
                k1 = field(s, r)
                k2 = field(s + 0.5 * dt * k1, r)
                k3 = field(s + 0.5 * dt * k2, r)
                k4 = field(s + dt * k3, r)
                return s + dt / 6 * (k1 + 2 * k2 + 2 * k3 + k4)

            return jax.lax.fori_loop(0, steps, step, s0)

        rates = jnp.array([1.0, 0.5, 0.4, 0.8])[:, None]
        r = rates * (1 + 0.1 * jnp.tanh(example((4, members))))
        s0 = 1.0 + 0.5 * jax.nn.sigmoid(example((2, members)))
        return solve, (s0, r)

    return build


def heat2d(n: int, steps: int, alpha: float = 0.2) -> Builder:
    """Explicit 2-D heat equation on an ``n`` x ``n`` grid (5-point stencil, fixed
    boundary), ``fori_loop`` over time steps."""

    def build() -> Built:
        import jax
        import jax.numpy as jnp

        def solve(u0: Any, k: Any) -> Any:
            def step(_: Any, u: Any) -> Any:
                p = jnp.pad(u, 1)
                lap = p[:-2, 1:-1] + p[2:, 1:-1] + p[1:-1, :-2] + p[1:-1, 2:] - 4 * u
                return u + alpha * k * lap

            return jax.lax.fori_loop(0, steps, step, u0)

        k = jax.nn.sigmoid(example((n, n)))
        return solve, (jnp.abs(example((n, n))), k)

    return build
