"""Sub-commands of ``flowsim``: one module each, exposing ``register(subparsers)``."""
