from torch import nn


def mlp(in_dim, hidden, out_dim, dropout=0.0):
    layers, width = [], in_dim
    for h in hidden:
        layers += [nn.Linear(width, h), nn.Tanh(), nn.Dropout(dropout)]
        width = h
    layers.append(nn.Linear(width, out_dim))
    return nn.Sequential(*layers)
