"""The XLA:CPU autotuner (``tune``) and the drop-in ``jit`` that applies what the
fleet decided; jax is imported when they run, never here.

    from xla_costmodel.clients.xla import jit
"""

from xla_costmodel.clients.xla.dropin import jit

__all__ = ["jit"]
