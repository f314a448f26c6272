#!/usr/bin/env bash
# tools/phase.sh FILE NAME [--last] CMD...: run CMD as the phase NAME of `make test`, append how
# long it took to FILE, and print every phase's time so far once CMD failed or with --last (issue
# 54: where a run's minutes go, on every machine, without reading the log).
set -u
file=$1 name=$2
shift 2
last=
if [ "${1:-}" = --last ]; then last=1; shift; fi
start=$(date +%s)
"$@"
rc=$?
took=$(( $(date +%s) - start ))
status=""
[ "$rc" = 0 ] || status="  FAILED (exit $rc)"
printf '%d\t  %-24s %3dm %02ds%s\n' "$took" "$name" $((took / 60)) $((took % 60)) "$status" >> "$file"
if [ "$rc" != 0 ] || [ -n "$last" ]; then
  total=$(awk -F '\t' '{t += $1} END {print t + 0}' "$file")
  echo "make test: time per phase"
  cut -f2- "$file"
  printf '  %-24s %3dm %02ds\n' "all" $((total / 60)) $((total % 60))
fi
exit "$rc"
