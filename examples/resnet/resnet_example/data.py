"""A map-style dataset for `data=dataset data._target_=resnet_example.data.make`: (image, label)
pairs, as torchvision's CIFAR10 returns them (the launcher keys a pair by the model's inputs,
then `target`). Stand-in data made on the fly, learnable: each class tints the image its own way.
"""

from __future__ import annotations

import torch
from torch.utils.data import Dataset


class TintedImages(Dataset):
    """`size` images of shape [3, image_size, image_size]; item i is the same on every call and rank."""

    def __init__(self, size: int, num_classes: int, image_size: int, seed: int):
        self.size, self.num_classes, self.image_size, self.seed = size, num_classes, image_size, seed
        self.tints = torch.randn(num_classes, 3, 1, 1, generator=torch.Generator().manual_seed(seed))

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        if not 0 <= i < self.size:
            raise IndexError(f"item {i} is outside 0..{self.size - 1}")
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + i)
        label = int(torch.randint(self.num_classes, (), generator=g))
        image = torch.randn(3, self.image_size, self.image_size, generator=g) + self.tints[label]
        return image, torch.tensor(label)


def make(size: int = 1024, num_classes: int = 10, image_size: int = 32, seed: int = 0) -> Dataset:
    """The dataset the recipe's `data._target_` names; these keyword arguments go beside it."""
    return TintedImages(size, num_classes, image_size, seed)
