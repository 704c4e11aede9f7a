"""meshflow.amp: automatic mixed precision with torch.amp's semantics.

    with mf.autocast("cpu", dtype=mf.bfloat16):    # or @mf.autocast("cpu")
        loss = loss_fn(model(x), y)                  # matmul/conv in bfloat16
    scaler = mf.amp.GradScaler()
    scaler.scale(loss).backward()
    scaler.step(opt)                                 # skipped on inf/NaN grads
    scaler.update()

The casts happen in the autocast layer of the C++ dispatcher (Note [Autocast]
in include/meshflow/autocast.h); the op lists are in docs/amp.md.
"""
from meshflow.amp.autocast_mode import autocast
from meshflow.amp.grad_scaler import GradScaler

__all__ = ["autocast", "GradScaler"]
