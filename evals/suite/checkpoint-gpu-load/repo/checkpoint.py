import os

import torch


def save_checkpoint(path, model, optimizer, step, **extra):
    state = {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "step": step,
        **extra,
    }
    # write to a temp file and rename, so a preemption mid-save never leaves a torn checkpoint
    tmp = path + ".tmp"
    torch.save(state, tmp)
    os.replace(tmp, path)


def load_checkpoint(path, model, optimizer):
    # our jobs always train on a single GPU, so put everything straight back on cuda:0
    ckpt = torch.load(path, map_location="cuda:0")
    model.load_state_dict(ckpt["model"])
    optimizer.load_state_dict(ckpt["optimizer"])
    return ckpt["step"], ckpt
