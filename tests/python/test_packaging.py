"""Installing meshflow as a user would (README, "Install"): a wheel built by
`pip wheel .` into a fresh venv outside the source tree, and the C++
package (`cmake --install`) used by a project of its own through
find_package(meshflow) and through pkg-config."""
import os
import shutil
import subprocess
import sys
import zipfile

import pytest

import meshflow as mf

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("MESHFLOW_BUILD_DIR", os.path.join(ROOT, "build"))

pytestmark = [
    pytest.mark.skipif(not os.path.exists(os.path.join(BUILD, "CMakeCache.txt")),
                       reason=f"no configured build directory at {BUILD}"),
    pytest.mark.skipif("asan" in os.environ.get("LD_PRELOAD", ""),
                       reason="the sanitizer run's extension is not the one the packages install"),
]


def clean_env(**extra):
    """The environment without the source tree on the module path."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "LD_PRELOAD")}
    env.update(extra)
    return env


def run(cmd, **kwargs):
    out = subprocess.run(cmd, capture_output=True, text=True, **kwargs)
    assert out.returncode == 0, f"{cmd}\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    return out.stdout


TRAIN = """
import meshflow as mf
import meshflow.nn.functional as F
mf.manual_seed(0)
model = mf.nn.Sequential(mf.nn.Linear(8, 16), mf.nn.ReLU(), mf.nn.Linear(16, 3))
opt = mf.optim.SGD(model.parameters(), lr=0.1)
x, y = mf.randn(32, 8), mf.randint(0, 3, (32,))
losses = []
for _ in range(20):
    opt.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    losses.append(loss.item())
assert losses[-1] < losses[0], losses
print("trained", mf.__version__, mf.__file__)
"""


@pytest.mark.skipif(shutil.which("cmake") is None, reason="cmake is not installed")
def test_wheel_installs_and_trains_outside_the_source_tree(tmp_path):
    venv = tmp_path / "venv"
    run(["/usr/bin/python3", "-m", "venv", "--system-site-packages", str(venv)])
    python = str(venv / "bin" / "python")
    dist = tmp_path / "dist"
    run([python, "-m", "pip", "wheel", ROOT, "-w", str(dist), "--no-deps", "--no-index",
         "--config-settings", f"build-dir={BUILD}"], env=clean_env(), cwd=tmp_path)
    wheels = list(dist.glob("meshflow-*.whl"))
    assert len(wheels) == 1, wheels
    names = zipfile.ZipFile(wheels[0]).namelist()
    assert "meshflow/libmeshflow.so" in names and "meshflow/__init__.py" in names
    assert any(n.startswith("meshflow/_C.") for n in names)
    assert wheels[0].name.startswith(f"meshflow-{mf._C._version}-")
    run([python, "-m", "pip", "install", "--no-deps", "--no-index", str(wheels[0])], env=clean_env(), cwd=tmp_path)
    out = run([python, "-c", TRAIN], env=clean_env(), cwd=tmp_path)
    assert "trained" in out and str(venv) in out, out  # the installed package, not the source tree
    assert mf.__version__ in out
    report = run([python, "-m", "meshflow.utils.collect_env"], env=clean_env(), cwd=tmp_path)
    for field in ("meshflow:", "OpenBLAS:", "oneDNN:", "MPI:", "CPU features:", "threads:", "devices seen:"):
        assert field in report, report


@pytest.mark.skipif(shutil.which("cmake") is None or shutil.which("ninja") is None,
                    reason="cmake and ninja are needed")
def test_cpp_package_builds_the_example_with_find_package(tmp_path):
    prefix = tmp_path / "prefix"
    run(["cmake", "--install", BUILD, "--prefix", str(prefix)])
    assert (prefix / "lib" / "cmake" / "meshflow" / "meshflowConfig.cmake").exists()
    assert (prefix / "include" / "meshflow" / "tensor.h").exists()
    example = tmp_path / "example"
    run(["cmake", "-S", os.path.join(ROOT, "examples", "cpp"), "-B", str(example), "-G", "Ninja",
         f"-DCMAKE_PREFIX_PATH={prefix}", "-DCMAKE_BUILD_TYPE=Release"])
    run(["cmake", "--build", str(example)])
    out = run(["bash", os.path.join(ROOT, "tests", "examples", "fashion_mnist_cpp.sh"),
               str(example / "fashion_mnist")])
    assert "test accuracy" in out

    # pkg-config, for projects without CMake.
    if shutil.which("pkg-config") is None:
        return
    source = tmp_path / "use.cpp"
    source.write_text('#include <cstdio>\n#include "meshflow/ops/creation.h"\n#include "meshflow/ops/reduce.h"\n'
                      '#include "meshflow/version.h"\nint main() {\n'
                      '  std::printf("%s %g\\n", mf::version(), mf::sum(mf::ones({3, 4})).item<double>());\n}\n')
    env = dict(os.environ, PKG_CONFIG_PATH=str(prefix / "lib" / "pkgconfig"))
    flags = run(["pkg-config", "--cflags", "--libs", "meshflow"], env=env).split()
    run(["g++", "-std=c++20", str(source), "-o", str(tmp_path / "use"), *flags])
    out = run([str(tmp_path / "use")], env=dict(os.environ, LD_LIBRARY_PATH=str(prefix / "lib")))
    assert out.split() == [mf._C._version, "12"], out
