"""Networks only: generators, feature maps, classifiers."""
from .features import DCGANFeatureMap
from .generators import ConvCondGen, DCGANDecoder, MLPGen

__all__ = ["ConvCondGen", "DCGANDecoder", "DCGANFeatureMap", "MLPGen"]
