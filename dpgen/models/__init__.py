"""Networks only: generators, feature maps, classifiers."""
from .features import DCGANFeatureMap
from .generators import ConvCondGen, DCGANDecoder, MLPGen
from .sinkhorn_generators import BigGANCondGenerator, DCGANCondGenerator

__all__ = ["ConvCondGen", "DCGANDecoder", "DCGANFeatureMap", "MLPGen"]
from .autoencoder import DCGANAutoencoder, LatentMLPGen, LiutkusAutoencoder  # noqa: E402  (issue 4)

__all__ += ["DCGANAutoencoder", "LatentMLPGen", "LiutkusAutoencoder"]

__all__ += ["BigGANCondGenerator", "DCGANCondGenerator"]
from .classifiers import ConvClassifier, cifar_convnet, mnist_convnet  # noqa: E402

__all__ += ["ConvClassifier", "cifar_convnet", "mnist_convnet"]
