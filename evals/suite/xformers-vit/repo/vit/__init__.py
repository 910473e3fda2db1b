from .model import VisionTransformer

__all__ = ["VisionTransformer"]
