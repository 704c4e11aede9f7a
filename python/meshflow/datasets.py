"""meshflow.datasets: datasets read by the C++ core (like torchvision.datasets).

Both are meshflow.utils.data datasets; a DataLoader over them (without a
transform or collate_fn) builds batches in C++.
"""
import os

from meshflow._C import data as _data
from meshflow.utils.data import Dataset

__all__ = ["FashionMNIST", "TextDataset"]


class FashionMNIST(Dataset):
    """Fashion-MNIST: 28x28 grey images of clothes in 10 classes.

    root is the folder holding {train,t10k}-{images-idx3,labels-idx1}-ubyte
    (.gz or not); Debian's package dataset-fashion-mnist installs them in the
    default root. Example i is (image, label): image a float32 tensor
    (1, 28, 28) in [0, 1] (what torchvision's ToTensor() gives), label an
    int. transform and target_transform, when given, are applied to them.
    """

    classes = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag",
               "Ankle boot"]

    def __init__(self, root=_data.FashionMNIST.default_root, train=True, transform=None, target_transform=None):
        self.root = os.fspath(root)
        self.train = train
        self.transform = transform
        self.target_transform = target_transform
        self._cpp = _data.FashionMNIST(self.root, train)

    @property
    def data(self):
        """All images, float32 (N, 1, 28, 28) in [0, 1]."""
        return self._cpp.images

    @property
    def targets(self):
        """All labels, int64 (N)."""
        return self._cpp.labels

    def __len__(self):
        return len(self._cpp)

    def __getitem__(self, index):
        image = self._cpp.images[index]
        label = int(self._cpp.labels[index])
        if self.transform is not None:
            image = self.transform(image)
        if self.target_transform is not None:
            label = self.target_transform(label)
        return image, label

    def _cpp_dataset(self):
        plain = self.transform is None and self.target_transform is None
        return self._cpp if plain and type(self).__getitem__ is FashionMNIST.__getitem__ else None


class TextDataset(Dataset):
    """Next-token examples of a text: (tokens[i:i+block_size], tokens[i+1:i+block_size+1]).

    path is a file, or a folder whose text files are read in name order
    (e.g. /usr/share/games/fortunes). mode="char" numbers the distinct
    characters in code point order; mode="byte" uses the 256 byte values.
    """

    def __init__(self, path, block_size, mode="char"):
        self._cpp = _data.TextDataset(os.fspath(path), block_size, mode)

    @property
    def vocab_size(self):
        return self._cpp.vocab_size

    @property
    def block_size(self):
        return self._cpp.block_size

    @property
    def mode(self):
        return self._cpp.mode

    @property
    def tokens(self):
        """The whole text as int64 token ids."""
        return self._cpp.tokens

    def encode(self, text):
        """Token ids (int64, 1-d) of a str (or, in byte mode, bytes)."""
        return self._cpp.encode(text)

    def decode(self, ids):
        """The str (byte mode: bytes) of token ids."""
        return self._cpp.decode(ids)

    def __len__(self):
        return len(self._cpp)

    def __getitem__(self, index):
        if index < 0:
            index += len(self)
        x, y = self._cpp.get(index)
        return x, y

    def _cpp_dataset(self):
        return self._cpp if type(self).__getitem__ is TextDataset.__getitem__ else None
