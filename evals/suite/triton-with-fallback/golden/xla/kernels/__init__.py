from .softmax import softmax

__all__ = ["softmax"]
