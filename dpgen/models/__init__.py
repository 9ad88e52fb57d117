"""Networks only: generators, feature maps, classifiers."""
from .features import DCGANFeatureMap
from .generators import ConvCondGen, DCGANDecoder, MLPGen

__all__ = ["ConvCondGen", "DCGANDecoder", "DCGANFeatureMap", "MLPGen"]
from .classifiers import ConvClassifier, cifar_convnet, mnist_convnet  # noqa: E402

__all__ += ["ConvClassifier", "cifar_convnet", "mnist_convnet"]
