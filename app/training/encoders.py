"""Observation encoders: camera images and grids through a CNN, the rest as they are.

An observation arrives flat (a dict observation's keys one after the other, see
app/spaces/models.py). `ObservationEncoder` cuts it into its parts, runs each uint8 image
[C, H, W] through its own CNN (values scaled from 0..255 to 0..1 first) and each float
grid [H, W, C] through its own (as it is, channels moved first), and concatenates their
features with the other parts' values: the actor's and the critic's MLPs take that.

An image's CNN is the Nature DQN's (Mnih et al. 2015), as CleanRL's ppo_atari.py uses it,
for images of 36 pixels a side or more; smaller images, whose sides the Nature CNN's 8x8
stride-4 kernels would swallow, get two 3x3 convolutions. A grid's (a board: a cell's
place is the move) keeps every cell: two 3x3 stride-1 convolutions, as ML-Agents' match3
encoder reads small boards, then one linear layer. Each pattern a convolution learns it
finds anywhere on the board (four in a row in any column), where an MLP learns each place
apart.
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
GRID_CONVS = ((16, 3, 1, 1), (16, 3, 1, 1))
GRID_FEATURES = 64


def conv_init(layer: nn.Conv2d | nn.Linear) -> nn.Conv2d | nn.Linear:
    """Orthogonal weights (gain sqrt 2, for ReLU) and zero bias, as CleanRL's ppo_atari.py."""
    nn.init.orthogonal_(layer.weight, np.sqrt(2))
    nn.init.constant_(layer.bias, 0.0)
    return layer


class ConvEncoder(nn.Module):
    """Conv-ReLU layers (`layout`: out_channels, kernel, stride, padding each), then a linear
    layer of `features_dim` with ReLU, for inputs [batch, C, H, W] of `shape` [C, H, W]."""

    def __init__(self, shape: tuple[int, int, int], layout: tuple[tuple[int, int, int, int], ...], features_dim: int) -> None:
        super().__init__()
        channels = shape[0]
        self.features_dim = features_dim
        convs: list[nn.Module] = []
        for out_channels, kernel, stride, padding in layout:
            convs += [conv_init(nn.Conv2d(channels, out_channels, kernel, stride, padding)), nn.ReLU()]
            channels = out_channels
        self.convs = nn.Sequential(*convs, nn.Flatten())
        with torch.no_grad():
            flat = self.convs(torch.zeros(1, *shape)).shape[1]
        self.linear = conv_init(nn.Linear(flat, features_dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.linear(self.convs(x)))


class ImageEncoder(ConvEncoder):
    """The CNN of one image [C, H, W], its values scaled from 0..255 to 0..1."""

    def __init__(self, shape: tuple[int, int, int]) -> None:
        large = min(shape[1:]) >= NATURE_MIN_SIDE
        super().__init__(shape, *((NATURE_CONVS, NATURE_FEATURES) if large else (SMALL_CONVS, SMALL_FEATURES)))

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return super().forward(images / IMAGE_MAX)


class GridEncoder(ConvEncoder):
    """The CNN of one grid [H, W, C] (channels last), its values as they are."""

    def __init__(self, shape: tuple[int, int, int]) -> None:
        height, width, channels = shape
        super().__init__((channels, height, width), GRID_CONVS, GRID_FEATURES)

    def forward(self, grids: torch.Tensor) -> torch.Tensor:
        return super().forward(grids.permute(0, 3, 1, 2))


class ObservationEncoder(nn.Module):
    """Flat observations [batch, flat_dim] to features [batch, features_dim]: each image or
    grid part through its CNN, every other part unchanged, concatenated in order."""

    def __init__(self, space: BoxSpace | DictSpace) -> None:
        super().__init__()
        self.parts: list[ObservationPart] = observation_parts(space)
        # The CNNs by part index, grids' too (`images`: checkpoints made before grids name their weights so).
        self.images = nn.ModuleDict(
            {
                str(i): (ImageEncoder if part.space.is_image else GridEncoder)(part.space.shape)
                for i, part in enumerate(self.parts)
                if part.space.is_image or part.space.is_grid
            }
        )
        self.features_dim = sum(
            self.images[str(i)].features_dim if str(i) in self.images else part.space.flat_dim for i, part in enumerate(self.parts)
        )

    def forward(self, flat: torch.Tensor) -> torch.Tensor:
        features = []
        for i, part in enumerate(self.parts):
            values = flat[:, part.offset : part.end]
            if str(i) in self.images:
                values = self.images[str(i)](values.reshape(-1, *part.space.shape))
            features.append(values)
        return features[0] if len(features) == 1 else torch.cat(features, dim=1)
