"""``python -m torch.tpu.distributed``: print TorchTPU's launch step as shell assignments."""

from torchport.sandbox.emulator.tpu_distributed import print_launch_env

print_launch_env()
