"""The model of the stage-search tests (test_auto_parallel.py and
auto_pipeline.py): one heavy layer among light ones, so that a balanced
cut isolates it."""
import numpy as np

import meshflow as mf
import meshflow.nn as nn


def build():
    mf.manual_seed(7)
    return nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 32), nn.Linear(32, 384), nn.Tanh(),
                         nn.Linear(384, 384), nn.Tanh(), nn.Linear(384, 4)).double()


def batch(rows=16):
    rng = np.random.default_rng(3)
    return (mf.tensor(rng.standard_normal((rows, 8))), mf.tensor(rng.standard_normal((rows, 4))))
