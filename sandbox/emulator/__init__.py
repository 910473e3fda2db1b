"""The Python emulator of a TorchTPU (``tpu``) or TorchNeuron (``neuron``) device, and
what both emulators share: the device's state, its counters, its matmul arithmetic,
autocast, attention, its generator and serialization. The native emulator (sandbox/native)
uses these parts; sandbox/emulated.py chooses between the two and activates one.
"""
