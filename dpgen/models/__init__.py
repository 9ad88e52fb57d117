"""Networks only: generators, feature maps, autoencoders, classifiers."""
from .autoencoder import DCGANAutoencoder, LatentMLPGen, LiutkusAutoencoder
from .classifiers import ConvClassifier, cifar_convnet, mnist_convnet
from .features import DCGANFeatureMap
from .generators import ConvCondGen, DCGANDecoder, MLPGen
from .sinkhorn_generators import BigGANCondGenerator, DCGANCondGenerator

__all__ = ["BigGANCondGenerator", "ConvClassifier", "ConvCondGen", "DCGANAutoencoder", "DCGANCondGenerator",
           "DCGANDecoder", "DCGANFeatureMap", "LatentMLPGen", "LiutkusAutoencoder", "MLPGen", "cifar_convnet",
           "mnist_convnet"]
