"""The stateless RL functions (Lambda handlers) and the pure maths they share.

Handlers, each exposing ``handler(event, context)``: :mod:`functions.actor`,
:mod:`functions.learner`, :mod:`functions.evaluator`.

- What crosses a boundary: :mod:`functions.events` (the handlers' events),
  :mod:`functions.hyper` (hyper-parameters, the policy's spec), :mod:`functions.wire`
  (trajectories and gradients as blobs).
- The maths (no I/O): :mod:`functions.ppo`, :mod:`functions.policy`,
  :mod:`functions.normalizer`, :mod:`functions.adam`.
- The learner's parts: :mod:`functions.batch` (trajectories to one flat batch),
  :mod:`functions.epochs` (the update's loop), :mod:`functions.step` (one minibatch step:
  :mod:`functions.compiled`, :mod:`functions.fused`, :mod:`functions.graphed`),
  :mod:`functions.gradient_mode` with :mod:`functions.gradient_writer`,
  :mod:`functions.lookahead` and :mod:`functions.other_policies`, and
  :mod:`functions.update_mode`.
"""
