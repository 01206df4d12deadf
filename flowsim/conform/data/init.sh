#!/bin/sh
# flowsim conformance guest: /init of the qemu guest (busybox ash).
#
# Rendered by flowsim/conform/guest.py: the two placeholders at the end become
# one shell function per topology and the calls.  Every name and value from the
# topology arrives quoted (shlex.quote) or as a positional parameter, never as code.  Results go to the second serial port
# (/dev/ttyS1) as sections "@@ SCENARIO KIND NETNS PHASE" ... "@@end"; the
# console (ttyS0) only carries the kernel log and diagnostics.  Real tools are
# called by full path: busybox ash would run its own applet of the same name.
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
mount -t tmpfs tmp /tmp
mount -t tmpfs run /run
mkdir -p /run/netns
stty -F /dev/ttyS1 raw -echo 2>/dev/null
exec 3>/dev/ttyS1

IP=/usr/sbin/ip
NFT=/usr/sbin/nft
CT=/usr/sbin/conntrack
SS=/usr/bin/ss

up() { cut -d' ' -f1 /proc/uptime; }
say() { echo "$*" >&3; }
section() { say "@@ $1 $2 $3 $4"; cat >&3; say "@@end"; }   # scenario kind netns phase <stdin
note() { echo "$* (uptime $(up))" | section "${S:--}" note - -; }
NS() { ns=$1; shift; $IP netns exec "$ns" "$@"; }

# run LOCATION COMMAND...: run one set-up line; on failure report it and fail.
run() {
  loc=$1; shift
  out=$("$@" 2>&1) && return 0
  rc=$?
  printf '%s\n%s\n%s\n' "$loc" "$*" "$out" | section "$S" error - -
  return $rc
}

begin() { S=$1; echo "$2" | section "$S" begin - "$(up)"; }

# Harness settings that change no forwarding decision: conntrack accounting on,
# and no TSO/GSO/GRO so the kernel handles wire-sized packets like the simulator.
harness_settings() {
  NS "$1" sh -c 'echo 1 > /proc/sys/net/netfilter/nf_conntrack_acct
    for d in /sys/class/net/*; do
      for f in tso gso gro; do /usr/sbin/ethtool -K "${d##*/}" $f off >/dev/null 2>&1; done
    done
    true'
}

# warm_neigh NS DEV:ADDR...: resolve the neighbours the simulator pre-resolves.
warm_neigh() {
  ns=$1; shift
  for x in "$@"; do
    dev=${x%%:*}; addr=${x#*:}
    case $addr in *:*) fam=-6;; *) fam=-4;; esac
    NS "$ns" ping $fam -c1 -W1 -I "$dev" "$addr" >/dev/null 2>&1 &
  done
  wait
}

# pin_neigh NS...: every resolved neighbour entry becomes permanent, as the simulator's pre-resolved ones
# are: no entry goes stale and is probed again (neigh_timer_handler: NUD_DELAY -> NUD_PROBE, a unicast
# ARP request or NS) in a long scenario, which a rule counting the router's input would see.
pin_neigh() {
  for ns in "$@"; do
    for fam in -4 -6; do
      $IP -n "$ns" $fam neigh show nud reachable nud stale nud delay nud probe 2>/dev/null |
      while read -r addr _ dev _ lladdr _; do
        [ -n "$lladdr" ] && $IP -n "$ns" neigh replace "$addr" lladdr "$lladdr" dev "$dev" nud permanent
      done
    done
  done
}

# wait_listen NS PORT PROTO: until a socket listens on PORT (TCP state 0A, or any UDP; raw: PORT is the protocol).
wait_listen() {
  hex=$(printf ':%04X ' "$2"); n=0
  while [ $n -lt 100 ]; do
    if [ "$3" = tcp ]; then
      NS "$1" cat /proc/net/tcp /proc/net/tcp6 2>/dev/null | grep -i "$hex" | grep -q ' 0A ' && return 0
    elif [ "$3" = raw ]; then  # a raw socket: its protocol where the port would be
      NS "$1" cat /proc/net/raw /proc/net/raw6 2>/dev/null | grep -qi "$hex" && return 0
    else
      NS "$1" cat /proc/net/udp /proc/net/udp6 2>/dev/null | grep -qi "$hex" && return 0
    fi
    usleep 20000; n=$((n+1))
  done
  note "wait_listen $*: timeout"
}

size() { [ -e "$1" ] && wc -c < "$1" || echo 0; }

# wait_bytes FILE1 N1 FILE2 N2: until both files hold at least N bytes; gives up after 3 s
# without progress (a lost packet never arrives) or 30 s in all.
wait_bytes() {
  n=0; still=0; last=
  while [ $n -lt 600 ] && [ $still -lt 60 ]; do
    a=$(size "$1"); b=$(size "$3")
    [ "$a" -ge "$2" ] && [ "$b" -ge "$4" ] && return 0
    if [ "$a.$b" = "$last" ]; then still=$((still+1)); else still=0; last="$a.$b"; fi
    usleep 50000; n=$((n+1))
  done
  note "wait_bytes $*: timeout at $(size "$1") and $(size "$3") bytes"
}

# wait_gone PID...: until the processes exited (15 s at most).
wait_gone() {
  n=0
  while [ $n -lt 300 ]; do
    alive=0
    for p in "$@"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ $alive = 0 ] && return 0
    usleep 50000; n=$((n+1))
  done
  note "wait_gone $*: timeout"
}

# snapshot SCENARIO PHASE NS...: conntrack, nft (JSON), links (JSON) of each namespace.
snapshot() {
  s=$1; phase=$2; shift 2
  echo "$(up)" | section "$s" uptime - "$phase"
  for ns in "$@"; do
    NS "$ns" $CT -L 2>/dev/null | section "$s" conntrack "$ns" "$phase"
    NS "$ns" cat /proc/net/nf_conntrack 2>/dev/null | section "$s" proc_conntrack "$ns" "$phase"
    NS "$ns" $NFT -j list ruleset 2>&1 | section "$s" nft "$ns" "$phase"
    NS "$ns" $IP -s -j link show 2>&1 | section "$s" links "$ns" "$phase"
    # every byte delivered, no socket closed yet: each sender's retransmissions (tcp_info)
    if [ "$phase" = mid ]; then NS "$ns" $SS -tinH 2>&1 | section "$s" sockets "$ns" "$phase"; fi
    # the ICMP errors the namespace's rate limits refused (the Icmp: lines of snmp, Icmp6OutRateLimitHost)
    if [ "$phase" = end ]; then
      NS "$ns" cat /proc/net/snmp /proc/net/snmp6 2>/dev/null | grep -E '^Icmp: |^Icmp6OutRateLimitHost' |
        section "$s" snmp "$ns" "$phase"
    fi
  done
}

# files SCENARIO FILE...: byte counts of the traffic's receive files, and socat's complaints.
files() {
  s=$1; shift
  for f in "$@"; do case $f in *.err) ;; *) echo "${f##*/} $(size "$f")";; esac; done | section "$s" bytes - -
  for f in "$@"; do case $f in *.err) [ -s "$f" ] && section "$s" stderr "${f##*/}" - < "$f";; esac; done
  true
}

cleanup() {
  touch /tmp/stop; usleep 100000     # ends the writers still waiting to close
  [ -n "$PIDS" ] && kill -9 $PIDS 2>/dev/null
  PIDS=
  [ -s /tmp/pppoe.pids ] && kill $(cat /tmp/pppoe.pids) 2>/dev/null   # PPPoE sessions (flowsim/conform/pppoe.py)
  rm -rf /tmp/pppoe /tmp/pppoe.pids
  $IP -all netns delete 2>/dev/null
  rm -f /tmp/t* /tmp/stop
  echo "$(up)" | section "$1" finish - -
  S=
}

echo "$(uname -r)" | section - kernel - -
/sbin/modprobe -a veth nf_tables nf_conntrack nf_flow_table nf_flow_table_inet nft_flow_offload nft_ct \
  nf_conntrack_netlink nf_nat nft_chain_nat nft_masq nft_nat 8021q bridge ipip ip6_tunnel tcp_diag 2>&1 | section - modprobe - -
echo "$(up)" | section - ready - -

@SCENARIOS@
@RUN@
echo "$(up)" | section - done - -
poweroff -f
