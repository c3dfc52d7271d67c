# shellcheck shell=bash
# Detached processes with a pid file and a log, shared by hack/cluster.sh and
# hack/node.sh. The sourcing script sets $run (pid files) and $logs (logs) and defines
# log and die. MATCH is a word of the process's command line: a pid file whose pid was
# recycled by another process is not taken for the one started.

# proc_running NAME MATCH: true when NAME's pid file names a live process whose command
# line contains MATCH.
proc_running() {
  local pidfile=$run/$1.pid pid
  [ -f "$pidfile" ] || return 1
  pid=$(cat "$pidfile")
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 1
  grep -qa -- "$2" "/proc/$pid/cmdline" 2>/dev/null
}

# proc_start NAME MATCH CMD...: runs CMD detached (its own session), logging to
# $logs/NAME.log, unless NAME already runs.
proc_start() {
  local name=$1 match=$2; shift 2
  if proc_running "$name" "$match"; then
    log "$name already running (pid $(cat "$run/$name.pid"))"
    return 0
  fi
  setsid "$@" >>"$logs/$name.log" 2>&1 </dev/null &
  local pid=$! i
  echo "$pid" >"$run/$name.pid"
  # Until the forked shell has exec'd the command, /proc/PID/cmdline is the shell's and
  # proc_running would take the process for dead: wait for the exec (or the exit).
  for i in $(seq 100); do
    grep -qa -- "$match" "/proc/$pid/cmdline" 2>/dev/null && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.02
  done
  log "started $name (pid $pid, log $logs/$name.log)"
}

# proc_wait NAME MATCH SECONDS CMD...: polls CMD until it succeeds, failing fast with the
# end of NAME's log if NAME died or SECONDS passed.
proc_wait() {
  local name=$1 match=$2 timeout=$3; shift 3
  local deadline=$((SECONDS + timeout))
  until "$@" >/dev/null 2>&1; do
    proc_running "$name" "$match" || { tail -n 30 "$logs/$name.log" >&2; die "$name exited; its log is $logs/$name.log"; }
    [ $SECONDS -lt $deadline ] || { tail -n 30 "$logs/$name.log" >&2; die "$name not ready after ${timeout}s; its log is $logs/$name.log"; }
    sleep 0.3
  done
}

# proc_stop NAME MATCH SECONDS: SIGTERM, then SIGKILL after SECONDS, to the process's
# whole group (proc_start's setsid made it the leader): a forking server's children
# (socat's per-connection processes) go with it.
proc_stop() {
  local name=$1 match=$2 grace=$3 pid
  if proc_running "$name" "$match"; then
    pid=$(cat "$run/$name.pid")
    kill -- -"$pid" 2>/dev/null || kill "$pid" 2>/dev/null || true
    for _ in $(seq $((grace * 10))); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 -- -"$pid" 2>/dev/null || kill -9 "$pid" 2>/dev/null || true
    log "stopped $name (pid $pid)"
  fi
  rm -f "$run/$name.pid"
}
