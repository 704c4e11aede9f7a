#!/usr/bin/env bash
# Installs the Debian packages meshflow needs to build, test and train,
# skipping those already present. Run as root on Debian 12.
set -euo pipefail

packages=(
  cmake ninja-build g++ pkg-config
  libopenblas-dev libopenblas0-openmp libdnnl-dev
  libgtest-dev zlib1g-dev openmpi-bin libopenmpi-dev procps
  pybind11-dev python3-dev python3-numpy python3-pytest python3-torch
  python3-tqdm python3-matplotlib python3-venv python3-sklearn
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
  exit 0
fi
echo "install_deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}"
