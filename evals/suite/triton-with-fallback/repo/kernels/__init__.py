from .softmax import HAS_TRITON, softmax

__all__ = ["HAS_TRITON", "softmax"]
