"""The PEP 517 build backend of meshflow (pyproject.toml): `pip install .`
and `pip wheel .` drive the project's own CMake build.

build_wheel configures a build directory (unless it is configured already,
with the same Python), builds the library and the extension, installs the
CMake "python" component (Note [Packages] in CMakeLists.txt: the package's
Python files, meshflow/_C and libmeshflow beside it, found through RPATH
$ORIGIN) into a staging directory and zips it as a wheel. It needs nothing
from PyPI: `requires = []`.

    pip wheel . --config-settings build-dir=DIR   # default: <source>/build
    CMAKE_ARGS="-DMESHFLOW_NATIVE=OFF" pip wheel .

The build directory defaults to the one tools/build.sh uses, so after that
build a wheel takes the time of its install and its zip. A directory
configured for another Python is refused (name another one). CMAKE_ARGS
(split like a shell line) is passed to the configure step, which then runs
again. The version is the CMake project version (the one place it is set).
"""
import base64
import hashlib
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NAME = "meshflow"


def _version():
    with open(os.path.join(ROOT, "CMakeLists.txt")) as f:
        found = re.search(r"project\(meshflow VERSION ([0-9]+\.[0-9]+\.[0-9]+)", f.read())
    if not found:
        raise RuntimeError("meshflow_build: no `project(meshflow VERSION x.y.z` in CMakeLists.txt")
    return found.group(1)


def _project():
    import tomllib
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)["project"]


def _tag():
    impl = f"cp{sys.version_info.major}{sys.version_info.minor}"
    platform = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    return f"{impl}-{impl}-{platform}"


def _setting(config_settings, key):
    return (config_settings or {}).get(key)


def _cached(build_dir, name):
    try:
        with open(os.path.join(build_dir, "CMakeCache.txt")) as f:
            for line in f:
                if line.startswith(name + ":"):
                    return line.split("=", 1)[1].strip()
    except OSError:
        pass
    return None


def _python():
    """The interpreter the extension is built for (a venv's base interpreter)."""
    return os.path.realpath(getattr(sys, "_base_executable", sys.executable))


def _run(cmd):
    print("meshflow_build:", " ".join(shlex.quote(c) for c in cmd), flush=True)
    subprocess.run(cmd, check=True, stdout=sys.stderr)


def _build(build_dir):
    extra = shlex.split(os.environ.get("CMAKE_ARGS", ""))
    configured = _cached(build_dir, "CMAKE_HOME_DIRECTORY")
    if configured is not None:
        cached = _cached(build_dir, "Python_EXECUTABLE")
        if cached and os.path.realpath(cached) != _python():
            raise RuntimeError(f"meshflow_build: {build_dir} is configured for Python {cached}, not {_python()}; "
                               "pass --config-settings build-dir=<another directory>")
    if configured is None or extra:
        generator = ["-G", "Ninja"] if shutil.which("ninja") else []
        _run(["cmake", "-S", ROOT, "-B", build_dir, *generator, f"-DPython_EXECUTABLE={_python()}",
              *([] if configured else ["-DCMAKE_BUILD_TYPE=Release"]), *extra])
    _run(["cmake", "--build", build_dir, "--target", "meshflow", "meshflow_python", "--parallel",
          str(os.cpu_count() or 1)])


def _record_line(path, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{path},sha256={digest},{len(data)}"


def _metadata(version):
    project = _project()
    lines = ["Metadata-Version: 2.1", f"Name: {NAME}", f"Version: {version}",
             f"Summary: {project.get('description', '')}", f"Requires-Python: {project.get('requires-python', '')}"]
    lines += [f"Requires-Dist: {d}" for d in project.get("dependencies", [])]
    if "license" in project and "text" in project["license"]:
        lines.append(f"License: {project['license']['text']}")
    readme = os.path.join(ROOT, "README.md")
    text = open(readme).read() if os.path.exists(readme) else ""
    lines.append("Description-Content-Type: text/markdown")
    return "\n".join(lines) + "\n\n" + text


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    version = _version()
    build_dir = os.path.abspath(_setting(config_settings, "build-dir") or os.path.join(ROOT, "build"))
    _build(build_dir)
    with tempfile.TemporaryDirectory() as staging:
        _run(["cmake", "--install", build_dir, "--component", "python", "--prefix", staging])
        dist_info = f"{NAME}-{version}.dist-info"
        files = []
        for base, dirs, names in os.walk(staging):
            dirs.sort()
            for name in sorted(names):
                full = os.path.join(base, name)
                files.append((os.path.relpath(full, staging), full))
        wheel_name = f"{NAME}-{version}-{_tag()}.whl"
        path = os.path.join(wheel_directory, wheel_name)
        record = []
        with zipfile.ZipFile(path + ".part", "w", zipfile.ZIP_DEFLATED) as whl:
            def add(arcname, data, mode=0o644):
                info = zipfile.ZipInfo(arcname, date_time=(2026, 1, 1, 0, 0, 0))
                info.external_attr = (0o100000 | mode) << 16
                info.compress_type = zipfile.ZIP_DEFLATED
                whl.writestr(info, data)
                record.append(_record_line(arcname, data))

            for arcname, full in files:
                with open(full, "rb") as f:
                    add(arcname, f.read(), 0o755 if arcname.endswith(".so") else 0o644)
            add(f"{dist_info}/METADATA", _metadata(version).encode())
            add(f"{dist_info}/WHEEL", (f"Wheel-Version: 1.0\nGenerator: meshflow_build\nRoot-Is-Purelib: false\n"
                                       f"Tag: {_tag()}\n").encode())
            record.append(f"{dist_info}/RECORD,,")
            whl.writestr(zipfile.ZipInfo(f"{dist_info}/RECORD", date_time=(2026, 1, 1, 0, 0, 0)),
                         "\n".join(record) + "\n")
        os.replace(path + ".part", path)  # no half-written wheel under the final name
    return wheel_name


def build_sdist(sdist_directory, config_settings=None):
    """The files git tracks (the whole source tree otherwise, less build
    outputs), under meshflow-<version>/."""
    version = _version()
    try:
        listed = subprocess.run(["git", "-C", ROOT, "ls-files", "-z"], check=True, capture_output=True).stdout
        names = [n for n in listed.decode().split("\0") if n]
    except (OSError, subprocess.CalledProcessError):
        names = []
        for base, dirs, files in os.walk(ROOT):
            dirs[:] = [d for d in dirs if d not in (".git", "build", "__pycache__") and not d.startswith("build")]
            names += [os.path.relpath(os.path.join(base, f), ROOT) for f in files if not f.endswith(".so")]
    prefix = f"{NAME}-{version}"
    name = f"{prefix}.tar.gz"
    path = os.path.join(sdist_directory, name)
    with tarfile.open(path + ".part", "w:gz") as tar:
        for n in sorted(names):
            tar.add(os.path.join(ROOT, n), arcname=f"{prefix}/{n}", recursive=False)
        info = tarfile.TarInfo(f"{prefix}/PKG-INFO")
        data = _metadata(version).encode()
        info.size = len(data)
        import io
        tar.addfile(info, io.BytesIO(data))
    os.replace(path + ".part", path)
    return name


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []
