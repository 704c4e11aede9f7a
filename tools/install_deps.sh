#!/usr/bin/env bash
# Installs the Debian packages meshflow needs to build, test and train, and
# oneMKL from PyPI (x86-64 only), skipping what is already present. Run as
# root on Debian 12.
set -euo pipefail

packages=(
  cmake ninja-build g++ pkg-config
  libopenblas-dev libopenblas0-openmp libdnnl-dev
  libgtest-dev zlib1g-dev openmpi-bin libopenmpi-dev procps
  pybind11-dev python3-dev python3-numpy python3-pytest python3-torch
  python3-tqdm python3-matplotlib python3-venv python3-sklearn python3-pip
  dataset-fashion-mnist fortunes
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install_deps: all ${#packages[@]} packages present"
else
  echo "install_deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# oneMKL, which Debian does not ship: meshflow loads it at run time for the
# GEMMs where it measures fastest (Note [oneMKL at run time] in
# src/backend/cpu/kernels/mkl.cpp). The pinned wheel is checked by its hash,
# and only the libraries a CBLAS call on the GNU OpenMP layer loads are
# unpacked, into a new folder that replaces the old one in one rename.
deps_dir="${MESHFLOW_DEPS_DIR:-/opt/meshflow}"
mkl_version=2026.2.0
mkl_wheel="mkl-$mkl_version-py2.py3-none-manylinux_2_28_x86_64.whl"
mkl_sha256=eaab1875ce9f47ab3c66d5632cef06baf768c05781f2f28847bdbc4343500ed7
if [ "$(uname -m)" != x86_64 ]; then
  echo "install_deps: oneMKL skipped (not x86-64)"
elif [ "$(cat "$deps_dir/mkl/VERSION" 2>/dev/null)" = "$mkl_version" ]; then
  echo "install_deps: oneMKL $mkl_version present"
else
  echo "install_deps: installing oneMKL $mkl_version into $deps_dir/mkl"
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  /usr/bin/python3 -m pip download --quiet --no-deps --only-binary=:all: --dest "$tmp" "mkl==$mkl_version"
  echo "$mkl_sha256  $tmp/$mkl_wheel" | sha256sum --check --quiet
  mkdir -p "$deps_dir"
  rm -rf "$deps_dir/mkl.new"
  /usr/bin/python3 - "$tmp/$mkl_wheel" "$deps_dir/mkl.new" "$mkl_version" <<'PY'
import os, sys, zipfile
wheel, dest, version = sys.argv[1:]
keep = {"libmkl_rt.so.3", "libmkl_core.so.3", "libmkl_gnu_thread.so.3", "libmkl_sequential.so.3",
        "libmkl_intel_lp64.so.3", "libmkl_def.so.3", "libmkl_mc3.so.3", "libmkl_avx2.so.3",
        "libmkl_avx512.so.3", "libmkl_avx10.so.3"}
os.makedirs(os.path.join(dest, "lib"))
with zipfile.ZipFile(wheel) as z:
    for info in z.infolist():
        name = os.path.basename(info.filename)
        if name in keep and "/data/lib/" in info.filename:
            target = os.path.join(dest, "lib", name)
        elif name.upper().startswith("LICENSE") or name.startswith("third-party-programs"):
            target = os.path.join(dest, name)
        else:
            continue
        with z.open(info) as src, open(target, "wb") as out:
            out.write(src.read())
        keep.discard(name)
missing = sorted(n for n in keep if n.startswith("libmkl"))
if missing:
    sys.exit(f"install_deps: the wheel lacks {missing}")
with open(os.path.join(dest, "VERSION"), "w") as f:
    f.write(version + "\n")
PY
  rm -rf "$deps_dir/mkl.old"
  [ -e "$deps_dir/mkl" ] && mv "$deps_dir/mkl" "$deps_dir/mkl.old"
  mv "$deps_dir/mkl.new" "$deps_dir/mkl"
  rm -rf "$deps_dir/mkl.old"
fi
