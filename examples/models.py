"""The models of the examples, tests and benchmarks, written once for any
library with torch's API: pass `meshflow` or `torch` as `lib`.

    import meshflow as mf, torch
    a, b = models.build("lenet", mf), models.build("lenet", torch)

Each builder returns a fresh module with the library's default
initialisation. The state-dict keys are the same for both libraries, so
weights copy across (see copy_state).
"""
import importlib
import math


def mlp(lib, in_features=784, hidden=1024, classes=10):
    """784-1024-1024-10 with ReLU (input (N, 784) or (N, 1, 28, 28))."""
    nn = lib.nn
    return nn.Sequential(
        nn.Flatten(), nn.Linear(in_features, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
        nn.Linear(hidden, classes))


def lenet(lib, channels=3, classes=10):
    """LeNet-5 on (N, channels, 32, 32)."""
    nn = lib.nn
    return nn.Sequential(
        nn.Conv2d(channels, 6, 5), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(16 * 5 * 5, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU(), nn.Linear(84, classes))


def fashion_cnn(lib, classes=10):
    """The Fashion-MNIST example's CNN on (N, 1, 28, 28)."""
    nn = lib.nn
    return nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Dropout(0.25), nn.Linear(128, classes))


def resnet18(lib, classes=10):
    """ResNet-18, CIFAR variant (3x3 stem, no max-pool), on (N, 3, 32, 32)."""
    nn, F = lib.nn, lib.nn.functional

    class BasicBlock(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, stride=1, padding=1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.shortcut = nn.Sequential()
            if stride != 1 or cin != cout:
                self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout))

        def forward(self, x):
            out = F.relu(self.bn1(self.conv1(x)))
            out = self.bn2(self.conv2(out))
            return F.relu(out + self.shortcut(x))

    class ResNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(3, 64, 3, stride=1, padding=1, bias=False)
            self.bn1 = nn.BatchNorm2d(64)
            layers, cin = [], 64
            for i, (cout, stride) in enumerate([(64, 1), (128, 2), (256, 2), (512, 2)]):
                layers.append(nn.Sequential(BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)))
                cin = cout
            self.layer1, self.layer2, self.layer3, self.layer4 = layers
            self.pool = nn.AdaptiveAvgPool2d(1)
            self.fc = nn.Linear(512, classes)

        def forward(self, x):
            x = F.relu(self.bn1(self.conv1(x)))
            x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
            return self.fc(lib.flatten(self.pool(x), 1))

    return ResNet()


def gpt(lib, vocab=1024, d_model=256, heads=4, layers=4, seq=128, checkpoint=False):
    """A decoder-only transformer: token + position embeddings, pre-norm
    blocks with causal self-attention and a GELU MLP, a final LayerNorm and
    a linear head. forward(idx (N, T) int64) -> logits (N, T, vocab).
    checkpoint=True recomputes each block in backward instead of keeping
    its activations (utils.checkpoint)."""
    nn = lib.nn
    if checkpoint:
        importlib.import_module(lib.__name__ + ".utils.checkpoint")  # torch does not import it itself

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.seq = seq
            self.tok = nn.Embedding(vocab, d_model)
            self.pos = nn.Embedding(seq, d_model)
            self.blocks = nn.ModuleList([
                nn.TransformerEncoderLayer(d_model, heads, 4 * d_model, dropout=0.0, activation="gelu",
                                           batch_first=True, norm_first=True) for _ in range(layers)])
            self.ln = nn.LayerNorm(d_model)
            self.head = nn.Linear(d_model, vocab, bias=False)
            self.register_buffer("causal", lib.triu(lib.full((seq, seq), -math.inf), 1), persistent=False)

        def forward(self, idx):
            t = idx.shape[1]
            x = self.tok(idx) + self.pos(lib.arange(t, device=idx.device))
            mask = self.causal[:t, :t]
            for block in self.blocks:
                if checkpoint and lib.is_grad_enabled():
                    x = lib.utils.checkpoint.checkpoint(block, x, mask, use_reentrant=False)
                else:
                    x = block(x, src_mask=mask)
            return self.head(self.ln(x))

    return GPT()


def gpt_sequential(lib, vocab=1024, d_model=256, heads=4, layers=4, seq=128):
    """gpt()'s model as a Sequential whose children run one after another
    (embed, block0 .. block{layers-1}, final), so that
    meshflow.distributed.pipelining.pipeline can cut it between blocks."""
    nn = lib.nn

    class Embed(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok = nn.Embedding(vocab, d_model)
            self.pos = nn.Embedding(seq, d_model)

        def forward(self, idx):
            return self.tok(idx) + self.pos(lib.arange(idx.shape[1], device=idx.device))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.layer = nn.TransformerEncoderLayer(d_model, heads, 4 * d_model, dropout=0.0, activation="gelu",
                                                    batch_first=True, norm_first=True)
            self.register_buffer("causal", lib.triu(lib.full((seq, seq), -math.inf), 1), persistent=False)

        def forward(self, x):
            t = x.shape[1]
            return self.layer(x, src_mask=self.causal[:t, :t])

    class Final(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln = nn.LayerNorm(d_model)
            self.head = nn.Linear(d_model, vocab, bias=False)

        def forward(self, x):
            return self.head(self.ln(x))

    model = nn.Sequential()
    model.add_module("embed", Embed())
    for k in range(layers):
        model.add_module(f"block{k}", Block())
    model.add_module("final", Final())
    return model


def vit_tiny(lib, image=32, patch=4, dim=192, depth=12, heads=12, mlp=768, classes=10):
    """A ViT-Tiny-sized vision transformer on (N, 3, image, image): a
    patch-embedding convolution, a class token and learned positions,
    pre-norm encoder layers (GELU MLP) and a linear head on the class
    token."""
    nn = lib.nn
    tokens = (image // patch) ** 2

    class ViT(nn.Module):
        def __init__(self):
            super().__init__()
            self.patch = nn.Conv2d(3, dim, patch, stride=patch)
            self.cls = nn.Parameter(lib.zeros(1, 1, dim))
            self.pos = nn.Parameter(lib.zeros(1, tokens + 1, dim))
            nn.init.trunc_normal_(self.pos, std=0.02)
            nn.init.trunc_normal_(self.cls, std=0.02)
            self.blocks = nn.ModuleList([
                nn.TransformerEncoderLayer(dim, heads, mlp, dropout=0.0, activation="gelu", batch_first=True,
                                           norm_first=True) for _ in range(depth)])
            self.ln = nn.LayerNorm(dim)
            self.head = nn.Linear(dim, classes)

        def forward(self, x):
            x = self.patch(x).flatten(2).transpose(1, 2)  # (N, tokens, dim)
            x = lib.cat([self.cls.expand(x.shape[0], -1, -1), x], 1) + self.pos
            for block in self.blocks:
                x = block(x)
            return self.head(self.ln(x[:, 0]))

    return ViT()


def bert(lib, vocab=1024, dim=256, heads=4, layers=4, mlp=1024, seq=128):
    """A BERT-style encoder for masked-language modelling: token and
    position embeddings with a LayerNorm, post-norm encoder layers (GELU)
    that ignore padding (src_key_padding_mask from token 0), and an MLM head
    (dense, GELU, LayerNorm, vocabulary projection). forward(tokens (N, T)
    int64) -> logits (N, T, vocab); see random_batch for the data."""
    nn = lib.nn
    F = lib.nn.functional

    class Bert(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok = nn.Embedding(vocab, dim)
            self.pos = nn.Embedding(seq, dim)
            self.ln_embed = nn.LayerNorm(dim)
            self.layers = nn.ModuleList([
                nn.TransformerEncoderLayer(dim, heads, mlp, dropout=0.0, activation="gelu", batch_first=True)
                for _ in range(layers)])
            self.dense = nn.Linear(dim, dim)
            self.ln_head = nn.LayerNorm(dim)
            self.decoder = nn.Linear(dim, vocab)

        def forward(self, tokens):
            padding = tokens == BERT_PAD
            x = self.ln_embed(self.tok(tokens) + self.pos(lib.arange(tokens.shape[1], device=tokens.device)))
            for layer in self.layers:
                x = layer(x, src_key_padding_mask=padding)
            return self.decoder(self.ln_head(F.gelu(self.dense(x))))

    return Bert()


def convnext(lib, dims=(48, 96, 192, 384), depths=(2, 2, 4, 2), classes=10):
    """A ConvNeXt-style CNN on (N, 3, 32, 32): a 2x2 patchify stem, stages
    of blocks (depthwise 7x7 convolution, LayerNorm over channels in
    channels-last layout, a GELU MLP, layer scale, residual) joined by
    LayerNorm + 2x2 stride-2 downsampling, global average pooling and a
    linear head."""
    nn = lib.nn
    F = lib.nn.functional

    class ChannelsFirstNorm(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.norm = nn.LayerNorm(d, eps=1e-6)

        def forward(self, x):
            return self.norm(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)

    class Block(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.dwconv = nn.Conv2d(d, d, 7, padding=3, groups=d)
            self.norm = nn.LayerNorm(d, eps=1e-6)
            self.pw1 = nn.Linear(d, 4 * d)
            self.pw2 = nn.Linear(4 * d, d)
            self.gamma = nn.Parameter(lib.full((d,), 1e-6))

        def forward(self, x):
            y = self.dwconv(x).permute(0, 2, 3, 1)  # channels last
            y = self.pw2(F.gelu(self.pw1(self.norm(y)))) * self.gamma
            return x + y.permute(0, 3, 1, 2)

    class ConvNeXt(nn.Module):
        def __init__(self):
            super().__init__()
            stages = []
            for i, (d, n) in enumerate(zip(dims, depths)):
                down = (nn.Sequential(nn.Conv2d(3, d, 2, stride=2), ChannelsFirstNorm(d)) if i == 0 else
                        nn.Sequential(ChannelsFirstNorm(dims[i - 1]), nn.Conv2d(dims[i - 1], d, 2, stride=2)))
                stages.append(nn.Sequential(down, *[Block(d) for _ in range(n)]))
            self.stages = nn.Sequential(*stages)
            self.norm = nn.LayerNorm(dims[-1], eps=1e-6)
            self.head = nn.Linear(dims[-1], classes)

        def forward(self, x):
            x = self.stages(x)
            return self.head(self.norm(x.mean((2, 3))))

    return ConvNeXt()


def dlrm(lib, dense=13, tables=26, rows=1000, dim=32, bottom=(64,), top=(64,)):
    """DLRM with plain embedding tables (one nn.EmbeddingBag per categorical
    feature, sum of one id per sample; examples/dlrm.py trains the sharded
    OneEmbedding form): a bottom MLP over the dense features, the pairwise
    dot products of the dense vector and the embeddings (the strict upper
    triangle), and a top MLP to one logit. forward(x (N, dense + tables)
    float: the dense features, then the ids as floats) -> (N,) logits."""
    nn = lib.nn
    F = lib.nn.functional
    vectors = tables + 1
    upper = [i * vectors + j for i in range(vectors) for j in range(i + 1, vectors)]

    def mlp_layers(sizes):
        layers = []
        for a, b in zip(sizes[:-1], sizes[1:]):
            layers += [nn.Linear(a, b), nn.ReLU()]
        return layers

    class DLRM(nn.Module):
        def __init__(self):
            super().__init__()
            self.bottom = nn.Sequential(*mlp_layers((dense, *bottom, dim)))
            self.embeddings = nn.ModuleList([nn.EmbeddingBag(rows, dim, mode="sum") for _ in range(tables)])
            self.top = nn.Sequential(*mlp_layers((dim + len(upper), *top)), nn.Linear(top[-1], 1))
            self.register_buffer("upper", lib.tensor(upper), persistent=False)

        def forward(self, x):
            ids = x[:, dense:].long()
            d = self.bottom(x[:, :dense])
            vecs = [d] + [emb(ids[:, k:k + 1]) for k, emb in enumerate(self.embeddings)]
            t = lib.stack(vecs, 1)  # (N, tables + 1, dim)
            z = lib.bmm(t, t.transpose(1, 2)).flatten(1)  # all pairwise dot products
            return self.top(lib.cat([d, z.index_select(1, self.upper)], 1)).squeeze(1)

    return DLRM()


BERT_PAD, BERT_MASK = 0, 1  # token ids: padding, [MASK]


BUILDERS = {"mlp": mlp, "lenet": lenet, "fashion_cnn": fashion_cnn, "resnet18": resnet18, "gpt": gpt,
            "vit_tiny": vit_tiny, "bert": bert, "convnext": convnext, "dlrm": dlrm}


def build(name, lib, **kwargs):
    return BUILDERS[name](lib, **kwargs)


def copy_state(src, dst, lib):
    """Loads src's state dict (any library) into dst (a module of lib)
    through numpy, keeping dtypes."""
    state = {k: lib.tensor(v.detach().cpu().numpy()) for k, v in src.state_dict().items()}
    dst.load_state_dict(state)


def random_batch(name, batch, rng, vocab=1024, seq=128):
    """(input, target) of a model as numpy arrays (float32 / int64) drawn
    from a numpy Generator."""
    import numpy as np
    if name == "gpt":
        tokens = rng.integers(0, vocab, size=(batch, seq + 1))
        return tokens[:, :-1].copy(), tokens[:, 1:].copy()
    if name == "bert":
        # sentences of seq/2..seq tokens (ids 2..vocab-1) padded with BERT_PAD;
        # 15% of the real tokens become BERT_MASK, and only those are
        # predicted (the other targets are cross_entropy's ignore_index -100)
        tokens = rng.integers(2, vocab, size=(batch, seq))
        lengths = rng.integers(seq // 2, seq + 1, size=batch)
        real = np.arange(seq)[None, :] < lengths[:, None]
        tokens = np.where(real, tokens, BERT_PAD)
        masked = real & (rng.random((batch, seq)) < 0.15)
        masked[:, 0] = True  # at least one prediction per sentence
        return np.where(masked, BERT_MASK, tokens), np.where(masked, tokens, -100)
    if name == "dlrm":
        # log-normal dense features, Zipf-like ids (below 1000, the default
        # table size), labels from a hidden rule
        dense = rng.lognormal(0.0, 1.0, size=(batch, 13))
        ids = np.minimum(rng.zipf(1.3, size=(batch, 26)) - 1, 999)
        y = (np.log1p(dense[:, 0]) + (ids[:, 0] % 2) > 1.0).astype(np.float32)
        return np.concatenate([dense, ids], 1).astype(np.float32), y
    shape = {"mlp": (batch, 784), "lenet": (batch, 3, 32, 32), "fashion_cnn": (batch, 1, 28, 28),
             "resnet18": (batch, 3, 32, 32), "vit_tiny": (batch, 3, 32, 32),
             "convnext": (batch, 3, 32, 32)}[name]
    x = rng.standard_normal(shape).astype(np.float32)
    y = rng.integers(0, 10, size=(batch,))
    return x, y


def loss_fn(name, lib, output, target):
    F = lib.nn.functional
    if name in ("gpt", "bert"):  # bert's unmasked positions are ignore_index (-100)
        return F.cross_entropy(output.reshape(-1, output.shape[-1]), target.reshape(-1))
    if name == "dlrm":
        return F.binary_cross_entropy_with_logits(output, target)
    return F.cross_entropy(output, target)
