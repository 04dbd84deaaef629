#!/usr/bin/env bash
# expect_abort.sh <max_seconds> <regex> <command...>: passes when the command exits non-zero
# within max_seconds and its output (stdout + stderr) matches regex.
set -u
max=$1; pattern=$2; shift 2
start=$(date +%s)
out=$(timeout "$((max + 10))" "$@" 2>&1)
rc=$?
elapsed=$(( $(date +%s) - start ))
echo "$out"
echo "-- exit code $rc after ${elapsed}s"
if [ "$rc" -eq 0 ]; then echo "FAIL: the command succeeded; expected every rank to exit non-zero"; exit 1; fi
if [ "$rc" -eq 124 ] && [ "$elapsed" -ge "$max" ]; then echo "FAIL: the command hung (killed by timeout)"; exit 1; fi
if [ "$elapsed" -gt "$max" ]; then echo "FAIL: took ${elapsed}s, more than ${max}s"; exit 1; fi
if ! echo "$out" | grep -Eq "$pattern"; then echo "FAIL: output does not match: $pattern"; exit 1; fi
echo "PASS"
