"""meshflow.nn.modules, as torch.nn.modules: the layers (the same classes as meshflow.nn's) and
meshflow.nn.modules.module, which holds Module and the global module hooks."""
from meshflow.nn.modules import module  # noqa: F401
from meshflow.nn.modules.module import Module  # noqa: F401


def __getattr__(name):
    import meshflow.nn as nn
    try:
        return getattr(nn, name)
    except AttributeError:
        raise AttributeError(f"module 'meshflow.nn.modules' has no attribute '{name}'") from None
