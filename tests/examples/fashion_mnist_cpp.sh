#!/usr/bin/env bash
# Runs the C++ Fashion-MNIST example (examples/cpp/fashion_mnist.cpp) on a small subset and checks that it
# learns: test accuracy after 2 short epochs must exceed 70%.
set -euo pipefail
exe="$1"
out="$("$exe" --epochs 2 --train-limit 4000 --test-limit 1000 --batch-size 64 --lr 0.05)"
echo "$out"
acc="$(echo "$out" | awk '/test accuracy/ {gsub("%", "", $7); a = $7} END {print a}')"
[ -n "$acc" ] || { echo "no accuracy printed"; exit 1; }
awk -v a="$acc" 'BEGIN { exit !(a > 70.0) }' || { echo "accuracy $acc% is not above 70%"; exit 1; }
