"""Observation encoders: camera images through a CNN, the rest as they are.

An observation arrives flat (a dict observation's keys one after the other, see
app/spaces/models.py). `ObservationEncoder` cuts it into its parts, runs each uint8 image
[C, H, W] through its own CNN (values scaled from 0..255 to 0..1 first) and
concatenates the image features with the other parts' values: the actor's and the
critic's MLPs take that. The CNN is the Nature DQN's (Mnih et al. 2015), as CleanRL's
ppo_atari.py uses it, for images of 36 pixels a side or more; smaller images, whose
sides the Nature CNN's 8x8 stride-4 kernels would swallow, get two 3x3 convolutions.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from app.spaces.models import IMAGE_MAX, BoxSpace, DictSpace, ObservationPart, observation_parts

NATURE_MIN_SIDE = 36  # the Nature CNN's three convolutions leave a 1x1 map at 36 pixels

# (out_channels, kernel, stride, padding) per convolution, and the width of the linear layer after them.
NATURE_CONVS = ((32, 8, 4, 0), (64, 4, 2, 0), (64, 3, 1, 0))
NATURE_FEATURES = 512
SMALL_CONVS = ((16, 3, 1, 1), (32, 3, 2, 1))
SMALL_FEATURES = 256


def conv_init(layer: nn.Conv2d | nn.Linear) -> nn.Conv2d | nn.Linear:
    """Orthogonal weights (gain sqrt 2, for ReLU) and zero bias, as CleanRL's ppo_atari.py."""
    nn.init.orthogonal_(layer.weight, np.sqrt(2))
    nn.init.constant_(layer.bias, 0.0)
    return layer


class ImageEncoder(nn.Module):
    """Conv-ReLU layers, then a linear layer with ReLU, for one image [C, H, W] scaled to 0..1."""

    def __init__(self, shape: tuple[int, int, int]) -> None:
        super().__init__()
        channels, height, width = shape
        self.shape = shape
        layout, self.features_dim = (
            (NATURE_CONVS, NATURE_FEATURES) if min(height, width) >= NATURE_MIN_SIDE else (SMALL_CONVS, SMALL_FEATURES)
        )
        convs: list[nn.Module] = []
        for out_channels, kernel, stride, padding in layout:
            convs += [conv_init(nn.Conv2d(channels, out_channels, kernel, stride, padding)), nn.ReLU()]
            channels = out_channels
        self.convs = nn.Sequential(*convs, nn.Flatten())
        with torch.no_grad():
            flat = self.convs(torch.zeros(1, *shape)).shape[1]
        self.linear = conv_init(nn.Linear(flat, self.features_dim))

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.linear(self.convs(images / IMAGE_MAX)))


class ObservationEncoder(nn.Module):
    """Flat observations [batch, flat_dim] to features [batch, features_dim]: each image
    part through its CNN, every other part unchanged, concatenated in order."""

    def __init__(self, space: BoxSpace | DictSpace) -> None:
        super().__init__()
        self.parts: list[ObservationPart] = observation_parts(space)
        self.images = nn.ModuleDict(
            {str(i): ImageEncoder(part.space.shape) for i, part in enumerate(self.parts) if part.space.is_image}
        )
        self.features_dim = sum(
            self.images[str(i)].features_dim if part.space.is_image else part.space.flat_dim for i, part in enumerate(self.parts)
        )

    def forward(self, flat: torch.Tensor) -> torch.Tensor:
        features = []
        for i, part in enumerate(self.parts):
            values = flat[:, part.offset : part.end]
            if part.space.is_image:
                values = self.images[str(i)](values.reshape(-1, *part.space.shape))
            features.append(values)
        return features[0] if len(features) == 1 else torch.cat(features, dim=1)
