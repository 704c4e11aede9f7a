"""meshflow.distributed.device_mesh: DeviceMesh and init_device_mesh, as
torch.distributed.device_mesh. A DeviceMesh names a grid of ranks; in
meshflow it is a placement (`mesh.placement`), which the global view and
fully_shard take."""
import math

import meshflow as _mf

__all__ = ["DeviceMesh", "init_device_mesh"]


class DeviceMesh:
    def __init__(self, device_type, mesh, *, mesh_dim_names=None):
        ranks = mesh.tolist() if isinstance(mesh, _mf.Tensor) else mesh
        self.device_type = str(device_type)
        if self.device_type not in ("cpu", "cuda"):
            raise ValueError(f"DeviceMesh: device_type must be 'cpu' or 'cuda', got {device_type!r}")
        self.placement = _mf.placement(self.device_type, ranks)
        self.mesh = _mf.tensor(ranks, dtype=_mf.int64)
        shape = tuple(self.placement.hierarchy)
        if mesh_dim_names is not None:
            mesh_dim_names = tuple(mesh_dim_names)
            if len(mesh_dim_names) != len(shape) or not all(isinstance(n, str) for n in mesh_dim_names):
                raise ValueError(f"DeviceMesh: mesh_dim_names must be {len(shape)} strings, got {mesh_dim_names!r}")
            if len(set(mesh_dim_names)) != len(mesh_dim_names):
                raise ValueError(f"DeviceMesh: mesh_dim_names must be unique, got {mesh_dim_names!r}")
        self.mesh_dim_names = mesh_dim_names
        self.shape = shape

    @property
    def ndim(self):
        return len(self.shape)

    def size(self, mesh_dim=None):
        return math.prod(self.shape) if mesh_dim is None else self.shape[mesh_dim]

    def get_rank(self):
        return _mf.env.get_rank()

    def get_local_rank(self, mesh_dim=None):
        """This rank's coordinate along mesh_dim (required on a mesh of more than one dim)."""
        if mesh_dim is None:
            if self.ndim != 1:
                raise ValueError("DeviceMesh.get_local_rank: pass mesh_dim on a mesh of more than one dim")
            mesh_dim = 0
        if isinstance(mesh_dim, str):
            if not self.mesh_dim_names or mesh_dim not in self.mesh_dim_names:
                raise KeyError(f"DeviceMesh: no mesh dim named {mesh_dim!r}")
            mesh_dim = self.mesh_dim_names.index(mesh_dim)
        flat = self.mesh.reshape(-1).tolist()
        me = _mf.env.get_rank()
        if me not in flat:
            raise ValueError(f"DeviceMesh.get_local_rank: rank {me} is not in the mesh")
        index, coords = flat.index(me), []
        for n in reversed(self.shape):
            coords.append(index % n)
            index //= n
        return list(reversed(coords))[mesh_dim]

    def __repr__(self):
        names = f", mesh_dim_names={self.mesh_dim_names}" if self.mesh_dim_names else ""
        return f"DeviceMesh('{self.device_type}', {self.mesh.tolist()}{names})"

    def __eq__(self, other):
        return isinstance(other, DeviceMesh) and self.placement == other.placement

    def __hash__(self):
        return hash((self.device_type, str(self.mesh.tolist())))


def init_device_mesh(device_type, mesh_shape, *, mesh_dim_names=None):
    """The mesh of all ranks in row-major order, shaped mesh_shape."""
    shape = tuple(int(n) for n in mesh_shape)
    world = _mf.env.get_world_size()
    if not shape or any(n <= 0 for n in shape) or math.prod(shape) != world:
        raise ValueError(f"init_device_mesh: mesh_shape {tuple(mesh_shape)} must be positive sizes whose product "
                         f"is the world size {world}")
    ranks = list(range(world))
    for n in reversed(shape[1:]):
        ranks = [ranks[i:i + n] for i in range(0, len(ranks), n)]
    return DeviceMesh(device_type, ranks, mesh_dim_names=mesh_dim_names)
