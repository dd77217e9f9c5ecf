"""A tiny torch model for the torch_module tests (imported by name, as a user's module would be).

``build`` returns ``(module, example_input)``: an embedding, two MLP blocks and a head over a batch
of 4 sequences of 8 tokens. torch is imported inside, so collecting this file needs no torch.
"""

from __future__ import annotations

from typing import Any

VOCAB, HIDDEN, SEQ, BATCH = 100, 32, 8, 4


def build() -> tuple[Any, Any]:
    """The model (embedding -> block0 -> block1 -> head) and an example batch of token ids."""
    import torch
    from torch import nn

    class Block(nn.Module):  # type: ignore[misc]
        """A pre-norm MLP block with a residual (two linears of 4x)."""

        def __init__(self) -> None:
            super().__init__()
            self.norm = nn.LayerNorm(HIDDEN)
            self.up = nn.Linear(HIDDEN, 4 * HIDDEN)
            self.down = nn.Linear(4 * HIDDEN, HIDDEN)

        def forward(self, x: Any) -> Any:
            return x + self.down(torch.relu(self.up(self.norm(x))))

    class Tiny(nn.Module):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.embedding = nn.Embedding(VOCAB, HIDDEN)
            self.block0 = Block()
            self.block1 = Block()
            self.head = nn.Linear(HIDDEN, VOCAB, bias=False)

        def forward(self, tokens: Any) -> Any:
            return self.head(self.block1(self.block0(self.embedding(tokens))))

    return Tiny(), torch.zeros(BATCH, SEQ, dtype=torch.long)


def broken() -> int:
    """Not a (module, input) pair."""
    return 3


def build_with_keywords() -> tuple[Any, Any]:
    """The same model with its input as keyword arguments (``tokens=``), as HF models take them."""
    model, tokens = build()
    return model, {"tokens": tokens}
