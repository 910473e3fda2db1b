from .model import Captioner

__all__ = ["Captioner"]
