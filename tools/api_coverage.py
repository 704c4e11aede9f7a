#!/usr/bin/env python3
"""Writes docs/api_coverage.md: which public names of PyTorch's training
namespaces meshflow has, per namespace, and whether the core list (the names
meshflow promises, see CORE) is complete.

    PYTHONPATH=python /usr/bin/python3 tools/api_coverage.py          # rewrite the page
    PYTHONPATH=python /usr/bin/python3 tools/api_coverage.py --check  # exit 1 if it is stale

The reference is the torch that /usr/bin/python3 imports (Debian's 1.13).
A name counts as present when the meshflow namespace has an attribute of
that name; what it does is checked by the tests, not here.
"""
import importlib
import pathlib
import sys
import types
import typing

ROOT = pathlib.Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "api_coverage.md"

NAMESPACES = [
    ("torch", "meshflow"),
    ("torch.Tensor", "meshflow.Tensor"),
    ("torch.nn", "meshflow.nn"),
    ("torch.nn.functional", "meshflow.nn.functional"),
    ("torch.nn.init", "meshflow.nn.init"),
    ("torch.optim", "meshflow.optim"),
    ("torch.optim.lr_scheduler", "meshflow.optim.lr_scheduler"),
    ("torch.utils.data", "meshflow.utils.data"),
    ("torch.autograd", "meshflow.autograd"),
    ("torch.linalg", "meshflow.linalg"),
    ("torch.distributions", "meshflow.distributions"),
    ("torch.profiler", "meshflow.profiler"),
]

# Names that are not part of a device-independent training API: backend
# libraries, quantisation, sparse and nested layouts, other devices, and the
# legacy typed tensor and storage classes.
EXCLUDED_PARTS = ("cudnn", "miopen", "mkldnn", "fbgemm", "quantiz", "sparse", "nested", "vulkan", "mps", "xpu",
                  "fake_quant", "_nnpack", "nnpack")


def excluded(name, value):
    lowered = name.lower()
    if any(part in lowered for part in EXCLUDED_PARTS) or lowered.startswith(("q_", "quant")):
        return True
    if name != "Tensor" and isinstance(value, type) and name.endswith(("Storage", "Tensor")):
        return True
    return getattr(value, "__module__", None) == "typing" or isinstance(value, typing.TypeVar)


def resolve(path):
    """The object at a dotted path (a module, or a class inside one), or None."""
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr, None)
            if obj is None:
                return None
        return obj
    return None


def public_names(obj):
    names = []
    for name in dir(obj):
        if name.startswith("_"):
            continue
        value = getattr(obj, name, None)
        if isinstance(value, types.ModuleType) or excluded(name, value):
            continue
        names.append(name)
    return sorted(names)


# The core list: everything the porting issue's table names, and what
# PyTorch's own tutorials use (the 60-minute blitz, "Learn the basics",
# "What is torch.nn really?", transfer learning, DCGAN, the word-level
# language model and the transformer / seq2seq tutorials).
CORE = {
    "torch": """
        tensor as_tensor from_numpy zeros ones full empty zeros_like ones_like full_like empty_like rand randn
        randint randperm rand_like randn_like arange linspace logspace eye manual_seed seed initial_seed
        Generator cat concat stack split chunk unbind reshape flatten squeeze unsqueeze permute transpose t
        where take gather scatter scatter_add scatter_reduce index_select masked_select nonzero argwhere
        matmul mm bmm einsum dot outer addmm baddbmm sum mean std var prod cumsum cumprod max min amax amin
        argmax argmin median sort argsort topk unique abs abs_ neg exp log log1p sqrt rsqrt sigmoid tanh relu
        softmax log_softmax clamp clamp_min clamp_max clip round floor ceil sign pow square isnan isinf
        isfinite isclose allclose equal eq ne lt le gt ge logical_and logical_or logical_not multinomial
        bernoulli normal no_grad enable_grad inference_mode set_grad_enabled is_grad_enabled save load
        finfo iinfo float32 float64 float16 bfloat16 int64 int32 int8 uint8 bool long float double
        get_default_dtype set_default_dtype device dtype Size Tensor set_num_threads get_num_threads
        numel is_tensor is_floating_point broadcast_tensors tril triu diag flip roll repeat_interleave
    """,
    "torch.Tensor": """
        backward grad requires_grad requires_grad_ detach detach_ item tolist numpy to float double half
        bfloat16 long int bool clone contiguous view reshape view_as expand expand_as repeat permute
        transpose t squeeze unsqueeze flatten size shape dim ndim numel dtype device is_leaf grad_fn
        data zero_ fill_ copy_ add_ sub_ mul_ div_ clamp_ scatter_ scatter_add_ index_add_ index_fill_
        masked_fill masked_fill_ normal_ uniform_ sum mean std var max min argmax argmin softmax
        log_softmax exp log sqrt abs pow matmul mm bmm type_as new_zeros new_ones new_full new_tensor
        register_hook retain_grad cpu cuda is_cuda chunk split unbind gather scatter index_select eq ne
        lt gt le ge all any sort topk cumsum cumprod
    """,
    "torch.nn": """
        Module Parameter Sequential ModuleList ModuleDict ParameterList ParameterDict Linear Bilinear
        Identity Flatten Unflatten Conv1d Conv2d Conv3d ConvTranspose1d ConvTranspose2d ConvTranspose3d
        MaxPool1d MaxPool2d AvgPool1d AvgPool2d AdaptiveAvgPool1d AdaptiveAvgPool2d AdaptiveMaxPool2d
        BatchNorm1d BatchNorm2d LayerNorm GroupNorm InstanceNorm1d InstanceNorm2d SyncBatchNorm Dropout
        Dropout2d Embedding EmbeddingBag RNN LSTM GRU RNNCell LSTMCell GRUCell MultiheadAttention
        Transformer TransformerEncoder TransformerEncoderLayer TransformerDecoder TransformerDecoderLayer
        ReLU ReLU6 LeakyReLU PReLU ELU GELU SiLU Mish Sigmoid Tanh Hardtanh GLU Softmax LogSoftmax
        Softplus Upsample PixelShuffle CosineSimilarity CrossEntropyLoss NLLLoss MSELoss L1Loss
        SmoothL1Loss HuberLoss BCELoss BCEWithLogitsLoss KLDivLoss
    """,
    "torch.nn.functional": """
        linear conv1d conv2d conv_transpose2d max_pool2d avg_pool2d adaptive_avg_pool2d relu relu6 gelu
        silu leaky_relu elu sigmoid tanh softmax log_softmax dropout embedding layer_norm batch_norm
        group_norm normalize pad interpolate one_hot cross_entropy nll_loss mse_loss l1_loss
        smooth_l1_loss huber_loss binary_cross_entropy binary_cross_entropy_with_logits kl_div
        cosine_similarity glu hardtanh softplus
    """,
    "torch.nn.init": """
        uniform_ normal_ constant_ ones_ zeros_ xavier_uniform_ xavier_normal_ kaiming_uniform_
        kaiming_normal_ trunc_normal_ orthogonal_ calculate_gain
    """,
    "torch.optim": "Optimizer SGD Adam AdamW RMSprop Adagrad",
    "torch.optim.lr_scheduler": """
        LambdaLR StepLR MultiStepLR ExponentialLR CosineAnnealingLR OneCycleLR LinearLR ReduceLROnPlateau
        CosineAnnealingWarmRestarts CyclicLR SequentialLR ChainedScheduler
    """,
    "torch.utils.data": """
        Dataset IterableDataset TensorDataset DataLoader Subset random_split ConcatDataset Sampler
        SequentialSampler RandomSampler BatchSampler WeightedRandomSampler SubsetRandomSampler
        DistributedSampler default_collate get_worker_info
    """,
    "torch.autograd": "Function grad backward functional no_grad enable_grad set_grad_enabled inference_mode",
    "torch.linalg": "norm vector_norm matrix_norm solve inv cholesky qr svd eigh det",
    "torch.distributions": """
        Normal Categorical Bernoulli Uniform Beta Gamma Dirichlet MultivariateNormal Independent
        kl_divergence Distribution
    """,
}


def measure():
    rows = []
    for torch_path, mf_path in NAMESPACES:
        reference = resolve(torch_path)
        ours = resolve(mf_path)
        names = public_names(reference)
        core = CORE.get(torch_path, "").split()
        missing_core = [n for n in core if ours is None or not hasattr(ours, n)]
        have = [n for n in names if ours is not None and hasattr(ours, n)]
        rows.append({"torch": torch_path, "ours": mf_path, "names": names, "have": have,
                     "missing": [n for n in names if n not in have], "core": core, "missing_core": missing_core})
    return rows


def percent(part, whole):
    return f"{100.0 * part / whole:.1f}%" if whole else "-"


def render():
    import torch
    rows = measure()
    out = ["# PyTorch API coverage", "",
           f"Generated by `tools/api_coverage.py` against torch {torch.__version__.split('+')[0]}; a test fails "
           "when this page is stale. A name counts as present when the meshflow namespace has it; what it "
           "does is checked by the tests (docs/ops.md lists the ops checked against PyTorch).", "",
           "Public names are those of `dir()` without a leading underscore, less submodules and names of "
           "backend libraries, quantisation, sparse and nested layouts, other devices and the legacy typed "
           "tensor and storage classes (EXCLUDED_PARTS in the tool).", "",
           "The **core list** is what meshflow promises: the names that real training code uses (those "
           "of the porting issue) and those that PyTorch's own tutorials use. It is `CORE` in the tool.", "",
           "| namespace | public names | present | coverage | core list | core present |",
           "|---|---:|---:|---:|---:|---:|"]
    total_names = total_have = total_core = total_core_have = 0
    for r in rows:
        core_have = len(r["core"]) - len(r["missing_core"])
        out.append(f"| `{r['torch']}` | {len(r['names'])} | {len(r['have'])} | "
                   f"{percent(len(r['have']), len(r['names']))} | {len(r['core'])} | "
                   f"{percent(core_have, len(r['core']))} |")
        total_names += len(r["names"])
        total_have += len(r["have"])
        total_core += len(r["core"])
        total_core_have += core_have
    out.append(f"| all | {total_names} | {total_have} | {percent(total_have, total_names)} | {total_core} | "
               f"{percent(total_core_have, total_core)} |")
    out += ["", "## Missing from the core list", ""]
    for r in rows:
        if r["missing_core"]:
            out.append(f"- `{r['torch']}`: " + ", ".join(f"`{n}`" for n in r["missing_core"]))
    if total_core_have == total_core:
        out.append("None: the core list is complete.")
    out += ["", "## Missing, per namespace", ""]
    for r in rows:
        out.append(f"### `{r['torch']}` ({len(r['missing'])} missing)")
        out.append("")
        out.append(", ".join(f"`{n}`" for n in r["missing"]) if r["missing"] else "Nothing.")
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def main(argv):
    text = render()
    if "--check" in argv:
        if not PAGE.exists() or PAGE.read_text() != text:
            print("docs/api_coverage.md is stale: run tools/api_coverage.py", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
