"""meshflow.nn: modules and layers (C++ mf::nn), Parameter, init, functional
and utils, with torch.nn's names and signatures."""
from meshflow._C import _modules
from meshflow.nn import backward_hooks, functional, init, modules, parallel, utils  # noqa: F401 (backward_hooks: Module's)
from meshflow.nn.graph import Graph
from meshflow.nn.containers import ParameterDict, ParameterList
from meshflow.nn.parameter import Parameter

_LAYERS = [
    "Module", "Sequential", "ModuleList", "ModuleDict",
    "Linear", "Conv2d", "BatchNorm1d", "BatchNorm2d", "LayerNorm", "GroupNorm", "Embedding", "Dropout",
    "ReLU", "GELU", "SiLU", "Tanh", "Sigmoid", "LeakyReLU", "Softmax", "LogSoftmax", "Flatten", "Identity",
    "MaxPool2d", "AvgPool2d", "AdaptiveAvgPool2d", "MultiheadAttention", "TransformerEncoderLayer",
    "CrossEntropyLoss", "NLLLoss", "MSELoss", "BCEWithLogitsLoss", "L1Loss", "SmoothL1Loss", "HuberLoss", "BCELoss", "KLDivLoss",
    "CosineSimilarity", "Hardtanh", "ReLU6", "GLU", "Mish", "ELU", "Softplus", "Unflatten", "PixelShuffle",
    "PixelUnshuffle", "Conv1d", "MaxPool1d", "AvgPool1d", "AdaptiveAvgPool1d", "PReLU", "Dropout1d", "Dropout2d",
    "Dropout3d", "InstanceNorm1d", "InstanceNorm2d",
    "RNNBase", "RNN", "LSTM", "GRU", "RNNCellBase", "RNNCell", "LSTMCell", "GRUCell", "TransformerDecoderLayer",
    "TransformerEncoder", "TransformerDecoder", "Transformer", "EmbeddingBag", "Bilinear", "SyncBatchNorm",
    "Hardswish", "Hardsigmoid", "SELU", "CELU", "Softsign", "Tanhshrink", "LogSigmoid", "Threshold", "Softshrink",
    "Hardshrink", "Softmin", "Softmax2d",
    "Upsample", "UpsamplingNearest2d", "UpsamplingBilinear2d",
    "ReflectionPad1d", "ReflectionPad2d", "ReflectionPad3d", "ReplicationPad1d", "ReplicationPad2d",
    "ReplicationPad3d", "ZeroPad2d", "ConstantPad1d", "ConstantPad2d", "ConstantPad3d",
    "Conv3d", "ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d",
    "AdaptiveMaxPool1d", "AdaptiveMaxPool2d", "MaxPool3d", "AvgPool3d", "AdaptiveAvgPool3d",
]
for _name in _LAYERS:
    _cls = getattr(_modules, _name)
    _cls.__module__ = "meshflow.nn"
    globals()[_name] = _cls
del _name, _cls



def _embedding_from_pretrained(cls, embeddings, freeze=True, padding_idx=None, max_norm=None, norm_type=2.0,
                               scale_grad_by_freq=False, sparse=False):
    """Embedding.from_pretrained: an Embedding whose weight is a copy of the
    2-d `embeddings`, frozen (requires_grad False) unless freeze=False."""
    from meshflow import no_grad
    if not hasattr(embeddings, "dim") or embeddings.dim() != 2:
        raise ValueError("Embeddings parameter is expected to be 2-dimensional")
    if max_norm is not None or scale_grad_by_freq or sparse:
        raise ValueError("Embedding.from_pretrained: max_norm, scale_grad_by_freq and sparse gradients are not "
                         "supported")
    rows, cols = embeddings.shape
    layer = cls(rows, cols, padding_idx=padding_idx, dtype=embeddings.dtype)
    with no_grad():
        layer.weight.copy_(embeddings)
    layer.weight.requires_grad_(not freeze)
    return layer


_modules.Embedding.from_pretrained = classmethod(_embedding_from_pretrained)


def _embedding_bag_from_pretrained(cls, embeddings, freeze=True, max_norm=None, norm_type=2.0,
                                   scale_grad_by_freq=False, mode="mean", sparse=False, include_last_offset=False,
                                   padding_idx=None):
    """EmbeddingBag.from_pretrained: an EmbeddingBag over a copy of the 2-d `embeddings`, frozen unless
    freeze=False."""
    from meshflow import no_grad
    if not hasattr(embeddings, "dim") or embeddings.dim() != 2:
        raise ValueError("Embeddings parameter is expected to be 2-dimensional")
    rows, cols = embeddings.shape
    layer = cls(rows, cols, max_norm=max_norm, norm_type=norm_type, scale_grad_by_freq=scale_grad_by_freq, mode=mode,
                sparse=sparse, include_last_offset=include_last_offset, padding_idx=padding_idx,
                dtype=embeddings.dtype)
    with no_grad():
        layer.weight.copy_(embeddings)
    layer.weight.requires_grad_(not freeze)
    return layer


_modules.EmbeddingBag.from_pretrained = classmethod(_embedding_bag_from_pretrained)


def _convert_sync_batchnorm(cls, module, process_group=None):
    """Every BatchNorm1d/2d in module (module itself too) replaced by a SyncBatchNorm holding the same
    parameters, buffers and training flag, as torch.nn.SyncBatchNorm.convert_sync_batchnorm."""
    output = module
    if isinstance(module, (_modules.BatchNorm1d, _modules.BatchNorm2d)):
        output = cls(module.num_features, module.eps, module.momentum, module.affine, module.track_running_stats,
                     process_group)
        if module.affine:
            output.weight = module.weight
            output.bias = module.bias
        output.running_mean = module.running_mean
        output.running_var = module.running_var
        output.num_batches_tracked = module.num_batches_tracked
        output.training = module.training
    for name, child in module.named_children():
        output.add_module(name, _convert_sync_batchnorm(cls, child, process_group))
    return output


_modules.SyncBatchNorm.convert_sync_batchnorm = classmethod(_convert_sync_batchnorm)

__all__ = ["functional", "init", "parallel", "utils", "Graph", "Parameter", "ParameterList", "ParameterDict"] + _LAYERS
