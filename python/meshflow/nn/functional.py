"""meshflow.nn.functional: torch.nn.functional's ops with its signatures."""
import warnings

from meshflow._C import _nn

__all__ = [
    "relu", "relu_", "gelu", "silu", "leaky_relu", "elu", "softplus", "sigmoid", "tanh",
    "softmax", "log_softmax", "layer_norm", "batch_norm", "group_norm", "embedding", "embedding_bag", "bilinear", "dropout",
    "cross_entropy", "nll_loss", "mse_loss", "binary_cross_entropy_with_logits",
    "scaled_dot_product_attention", "conv2d", "max_pool2d", "max_pool2d_with_indices", "avg_pool2d",
    "adaptive_avg_pool2d", "linear", "pad", "one_hot", "l1_loss", "smooth_l1_loss", "huber_loss", "hardtanh",
    "relu6", "normalize", "cosine_similarity", "glu", "binary_cross_entropy", "kl_div",
    "conv1d", "max_pool1d", "avg_pool1d", "adaptive_avg_pool1d", "pixel_shuffle", "pixel_unshuffle", "mish",
    "prelu", "dropout1d", "dropout2d", "dropout3d", "instance_norm", "hardsigmoid", "hardswish", "selu", "celu",
    "threshold", "softsign", "tanhshrink", "logsigmoid", "softshrink", "hardshrink", "softmin",
    "interpolate",
    "conv3d", "conv_transpose1d", "conv_transpose2d",
    "conv_transpose3d", "adaptive_max_pool1d", "adaptive_max_pool2d", "adaptive_max_pool1d_with_indices",
    "adaptive_max_pool2d_with_indices", "max_pool3d", "max_pool3d_with_indices", "avg_pool3d", "adaptive_avg_pool3d",
]

for _name in __all__:
    globals()[_name] = getattr(_nn, _name)
del _name


# torch's deprecated spellings of interpolate, warning as torch's do.
def upsample(input, size=None, scale_factor=None, mode="nearest", align_corners=None):
    warnings.warn("nn.functional.upsample is deprecated. Use nn.functional.interpolate instead.")
    return interpolate(input, size, scale_factor, mode, align_corners)  # noqa: F821 (set above)


def upsample_nearest(input, size=None, scale_factor=None):
    warnings.warn("nn.functional.upsample_nearest is deprecated. Use nn.functional.interpolate instead.")
    return interpolate(input, size, scale_factor, mode="nearest")  # noqa: F821


def upsample_bilinear(input, size=None, scale_factor=None):
    warnings.warn("nn.functional.upsample_bilinear is deprecated. Use nn.functional.interpolate instead.")
    return interpolate(input, size, scale_factor, mode="bilinear", align_corners=True)  # noqa: F821


__all__ += ["upsample", "upsample_nearest", "upsample_bilinear"]
