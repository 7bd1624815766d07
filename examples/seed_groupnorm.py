"""The forum report's GroupNorm.

python -m tools.fusion_report examples/seed_groupnorm.py --seed-config
"""

import torch

fn = torch.nn.GroupNorm(2, 16).eval()
inputs = (torch.randn(2, 16, 32, 32),)
