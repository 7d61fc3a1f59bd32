"""A ResNet for `launcher`, in plain PyTorch: `_target_: resnet_example.build` in a recipe.

Nothing here knows about `launcher`: any callable that returns an `nn.Module` will do. The
recipe's `inputs` name the forward's arguments (the batch reaches the model as `model(**batch)`),
so `images` is the key the synthetic batch (or your dataset's samples) carry the pixels under.

The layout is torchvision's (`conv1`, `layer1`…`layer4` of `BasicBlock`s, `fc`) with a CIFAR
stem (one 3×3 convolution, no max-pool) and a `width` knob, so a 32×32 step is CPU-sized. It is
not torchvision itself because the torchvision wheel on PyPI is built against the CUDA torch and
does not import beside the CPU build this project's tests install; where your torchvision does
import, `torchvision.models.resnet18(num_classes=10)` drops in the same way (see README).
"""

from __future__ import annotations

import torch
from torch import nn

BLOCKS = {10: [1, 1, 1, 1], 18: [2, 2, 2, 2], 34: [3, 4, 6, 3]}


class BasicBlock(nn.Module):
    """Two 3×3 convolutions and a residual; the unit FSDP shards (`parallel.fsdp_units=[BasicBlock]`)."""

    def __init__(self, c_in: int, c_out: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)
        self.relu = nn.ReLU()
        self.downsample = None
        if stride != 1 or c_in != c_out:
            self.downsample = nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride, bias=False), nn.BatchNorm2d(c_out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        skip = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        return self.relu(self.bn2(self.conv2(out)) + skip)


class ResNet(nn.Module):
    """Stem, four stages of `BasicBlock`s (widths w, 2w, 4w, 8w; stride 2 from the second), a
    global average pool and a linear classifier returning logits."""

    def __init__(self, blocks: list[int], num_classes: int, width: int):
        super().__init__()
        self.conv1 = nn.Conv2d(3, width, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU()
        stages, c_in = [], width
        for i, n in enumerate(blocks):
            c_out = width * 2**i
            stages.append(
                nn.Sequential(
                    *[BasicBlock(c_in if j == 0 else c_out, c_out, 2 if i and not j else 1) for j in range(n)]
                )
            )
            c_in = c_out
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(c_in, num_classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = self.relu(self.bn1(self.conv1(images)))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.pool(x), 1))


def build(depth: int = 18, num_classes: int = 10, width: int = 16) -> nn.Module:
    """ResNet-<depth> (10, 18 or 34) of base width `width` (64 is the ImageNet models' width),
    randomly initialised."""
    if depth not in BLOCKS:
        raise ValueError(f"depth={depth} is not a BasicBlock ResNet here; use one of {sorted(BLOCKS)}")
    if width < 1:
        raise ValueError(f"width={width} must be a positive integer; e.g. width=16")
    return ResNet(BLOCKS[depth], num_classes, width)
