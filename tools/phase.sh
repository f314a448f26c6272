#!/usr/bin/env bash
# tools/phase.sh FILE NAME [--last|--part] CMD...: run CMD as the phase NAME of `make test`, append
# how long it took to FILE, and print every phase's time so far once CMD failed or with --last
# (issue 54: where a run's minutes go, on every machine, without reading the log). --part: NAME is
# one of the jobs that run side by side in the phase after it; its time is listed, not summed.
set -u
file=$1 name=$2
shift 2
last= part=
if [ "${1:-}" = --last ]; then last=1; shift; fi
if [ "${1:-}" = --part ]; then part=1; shift; fi
start=$(date +%s)
"$@"
rc=$?
took=$(( $(date +%s) - start ))
status=""
[ "$rc" = 0 ] || status="  FAILED (exit $rc)"
if [ -n "$part" ]; then  # no time in the first field: the sum below counts phases, not parts
  printf '\t    %-22s %3dm %02ds%s\n' "$name" $((took / 60)) $((took % 60)) "$status" >> "$file"
  exit "$rc"
fi
printf '%d\t  %-24s %3dm %02ds%s\n' "$took" "$name" $((took / 60)) $((took % 60)) "$status" >> "$file"
if [ "$rc" != 0 ] || [ -n "$last" ]; then
  total=$(awk -F '\t' '{t += $1} END {print t + 0}' "$file")
  echo "make test: time per phase"
  cut -f2- "$file"
  printf '  %-24s %3dm %02ds\n' "all" $((total / 60)) $((total % 60))
fi
exit "$rc"
