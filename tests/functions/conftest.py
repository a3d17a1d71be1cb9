"""Fixtures shared by the functions' tests (plain helpers they share: fn_helpers.py)."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture
def broken_torch_compile(monkeypatch: pytest.MonkeyPatch) -> None:
    """``torch.compile`` as on a machine without a C++ compiler: the compiled function
    raises when first called, as inductor does."""

    def broken_compile(fn):
        def call(*args, **kwargs):
            raise RuntimeError("InductorError: no working C++ compiler found")
        return call

    monkeypatch.setattr(torch, "compile", broken_compile)
