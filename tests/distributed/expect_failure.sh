#!/bin/sh
# expect_failure.sh TEXT COUNT COMMAND...: runs COMMAND (an MPI job) with a
# 60 s limit and passes when it ends by itself with a non-zero status and its
# output holds TEXT at least COUNT times.
text=$1
count=$2
shift 2
start=$(date +%s)
output=$(timeout 60 "$@" 2>&1)
status=$?
elapsed=$(($(date +%s) - start))
printf '%s\n' "$output"
echo "expect_failure: status $status after ${elapsed} s"
if [ "$status" -eq 124 ] || [ "$status" -eq 137 ]; then
  echo "expect_failure: the job did not end within 60 s"
  exit 1
fi
if [ "$status" -eq 0 ]; then
  echo "expect_failure: the job succeeded; expected a failure status"
  exit 1
fi
found=$(printf '%s\n' "$output" | grep -c "$text")
if [ "$found" -lt "$count" ]; then
  echo "expect_failure: expected '$text' at least $count times, found $found"
  exit 1
fi
echo "expect_failure: ok"
