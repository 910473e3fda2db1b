"""A tiny dense autoencoder for 6-channel sensor readings; weights ship as JSON."""
import json

import torch
from torch import nn

FEATURES = ["temp", "pressure", "flow", "vibration", "current", "rpm"]


class SensorAutoencoder(nn.Module):
    def __init__(self, n_features=len(FEATURES), bottleneck=2):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(n_features, 4), nn.Tanh(), nn.Linear(4, bottleneck))
        self.decoder = nn.Sequential(nn.Linear(bottleneck, 4), nn.Tanh(), nn.Linear(4, n_features))

    def forward(self, x):
        return self.decoder(self.encoder(x))


def load_json_weights(model, path):
    """Weights exported as {"param.name": nested lists} (no pickle involved)."""
    with open(path) as f:
        raw = json.load(f)
    state = {name: torch.tensor(values, dtype=torch.float32) for name, values in raw.items()}
    model.load_state_dict(state)
    return model
