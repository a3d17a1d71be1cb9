"""The stateless RL functions (Lambda handlers) and the pure maths they share.

Handlers: :mod:`functions.actor`, :mod:`functions.learner`, :mod:`functions.evaluator`, each
exposing ``handler(event, context)``. Maths (no I/O): :mod:`functions.ppo`,
:mod:`functions.policy`, :mod:`functions.normalizer`. Messages: :mod:`functions.messages`.
"""
