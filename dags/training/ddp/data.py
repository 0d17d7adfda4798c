"""A small classification set made from a seed, the same in every container and run (no download, no HDFS).

``FEATURES``-dimensional points around ``CLASSES`` fixed centres; the training and test splits are drawn with
different seeds. Used by train_ddp.py and evaluate.py.
"""

import torch

FEATURES, CLASSES = 20, 4
TRAIN_SEED, TEST_SEED = 0, 1


def make(n: int, seed: int):
    """``(x, y)``: ``n`` points (float32, ``n x FEATURES``) and their classes (int64)."""
    centres = torch.randn(CLASSES, FEATURES, generator=torch.Generator().manual_seed(1234)) * 1.5
    gen = torch.Generator().manual_seed(seed)
    y = torch.randint(0, CLASSES, (n,), generator=gen)
    x = centres[y] + torch.randn(n, FEATURES, generator=gen)
    return x, y


def build_model() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(FEATURES, 32), torch.nn.ReLU(), torch.nn.Linear(32, CLASSES))
