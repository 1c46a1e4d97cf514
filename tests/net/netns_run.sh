#!/usr/bin/env bash
# Run a command inside a fresh network namespace whose loopback is shaped, for
# stoker's network benchmarks:
#
#   tests/net/netns_run.sh [--rate 1gbit] [--delay-ms 10] [--burst SIZE] -- COMMAND [ARGS...]
#
# The namespace has only `lo` (up). Its root qdisc is tbf at --rate ("none": no
# rate limit; burst by default max(128kb, rate/250 s)) with a netem child adding
# --delay-ms to every packet. Both directions cross lo, so the round trip is
# 2 x delay-ms. Kernels without sch_netem refuse netem ("Specified qdisc kind is
# unknown"): then only the rate is applied, and the command should emulate the
# RTT with the fault proxy (tests/net/fault_proxy.py --latency-ms). What was
# applied is printed on stderr and given to the command in the environment:
#   STOKER_NETNS              the namespace's name
#   STOKER_NETNS_RATE         the tbf rate, or "none"
#   STOKER_NETNS_DELAY_MS     the netem delay applied (one way), 0 when none
#   STOKER_NETNS_LATENCY_MS   the RTT still to emulate (2 x delay-ms when netem was
#                             refused, else 0): pass it to fault_proxy.py --latency-ms
# Servers and clients the command starts run in the namespace (start them from
# COMMAND, e.g. a bash -c script). The namespace, and anything still running in
# it, is removed on exit. The exit status is COMMAND's. Needs root (CAP_SYS_ADMIN
# and CAP_NET_ADMIN).
set -euo pipefail
rate=1gbit delay_ms=10 burst=""
while (($#)); do
  case "$1" in
    --rate) rate=$2; shift 2 ;;
    --delay-ms) delay_ms=$2; shift 2 ;;
    --burst) burst=$2; shift 2 ;;
    --) shift; break ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "netns_run.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
if (($# == 0)); then echo "netns_run.sh: no command given (see --help)" >&2; exit 2; fi
export PATH=$PATH:/usr/sbin:/sbin

ns=stk-run-$$
cleanup() {
  for pid in $(ip netns pids "$ns" 2> /dev/null); do kill -9 "$pid" 2> /dev/null || true; done
  ip netns del "$ns" 2> /dev/null || true
}
if ! err=$(ip netns add "$ns" 2>&1); then
  echo "netns_run.sh: kernel refuses: ip netns add: $err" >&2
  exit 77
fi
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
ip -n "$ns" link set lo up

applied=()
parent=(root)
if [ "$rate" != none ]; then
  if [ -z "$burst" ]; then
    burst=$(/usr/bin/python3 -c "
import re, sys
m = re.fullmatch(r'(\d+(?:\.\d+)?)([kmg]?)(bit|bps)', sys.argv[1].lower())
if not m: sys.exit('netns_run.sh: --rate %s: use tc units (1gbit, 500mbit, 100mbps)' % sys.argv[1])
v = float(m[1]) * {'': 1, 'k': 1e3, 'm': 1e6, 'g': 1e9}[m[2]] / (8 if m[3] == 'bit' else 1)
print('%dkb' % max(128, int(v / 250 / 1024)))" "$rate")
  fi
  if ! err=$(tc -n "$ns" qdisc add dev lo root handle 1: tbf rate "$rate" burst "$burst" latency 50ms 2>&1); then
    echo "netns_run.sh: kernel refuses: tc qdisc add ... tbf: $err" >&2
    exit 77
  fi
  applied+=("tbf rate $rate burst $burst")
  parent=(parent 1:1 handle 10:)
fi
applied_delay=0 latency=0
if [ "$delay_ms" != 0 ]; then
  if err=$(tc -n "$ns" qdisc add dev lo "${parent[@]}" netem delay "${delay_ms}ms" limit 100000 2>&1); then
    applied_delay=$delay_ms
    applied+=("netem delay ${delay_ms}ms (RTT $((2 * delay_ms)) ms)")
  else
    latency=$((2 * delay_ms))
    applied+=("netem refused by the kernel ($err): no delay; emulate the $latency ms RTT with fault_proxy.py --latency-ms $latency")
  fi
fi
msg=""
for a in "${applied[@]}"; do msg+="${msg:+; }$a"; done
echo "netns_run.sh: namespace $ns: ${msg:-no shaping}" >&2

status=0
STOKER_NETNS=$ns STOKER_NETNS_RATE=$rate STOKER_NETNS_DELAY_MS=$applied_delay \
  STOKER_NETNS_LATENCY_MS=$latency ip netns exec "$ns" "$@" || status=$?
exit "$status"
