import os

import torch
import torch_xla.core.xla_model as xm


def save_checkpoint(path, model, optimizer, step, **extra):
    state = {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "step": step,
        **extra,
    }
    # write to a temp file and rename, so a preemption mid-save never leaves a torn checkpoint
    tmp = path + ".tmp"
    xm.save(state, tmp)  # moves the XLA tensors to the CPU before writing
    os.replace(tmp, path)


def load_checkpoint(path, model, optimizer):
    # load on the CPU; load_state_dict copies onto the model's (and optimizer's) XLA device
    ckpt = torch.load(path, map_location="cpu")
    model.load_state_dict(ckpt["model"])
    optimizer.load_state_dict(ckpt["optimizer"])
    return ckpt["step"], ckpt
