#!/usr/bin/env bash
# An emulated aarch64 board on an x86_64 Linux host (needs root): a Debian bookworm
# arm64 root run by qemu-user through binfmt_misc, with the agent installed by
# device_agents/install.sh (the script a real board runs, unchanged) and Debian's Arm NN
# (CpuAcc and CpuRef backends). The chroot shares the host's network namespace, so the
# board joins a head on this machine over loopback. docs/how-to/emulated-board.md explains why each
# step is there; every latency measured on this board is emulated (labelled so).
#
#   arm_sim.sh build                 build the root once (cached outside the checkout) and
#                                    (re)install the agent from this checkout
#   arm_sim.sh start [HEAD:PORT]     build if needed, then join the head (default 127.0.0.1:6379)
#   arm_sim.sh stop                  ray stop inside the root, kill what is left, unmount
#   arm_sim.sh status                mounts, processes, and whether the root is built
#   arm_sim.sh run CMD...            run a command inside the root (mounts what it needs)
#
# Environment: NNSWEEP_ARM_SIM_DIR (default /var/cache/nnsweep-arm-sim; the root is its
# `root` folder), NNSWEEP_ARM_SIM_DEVICE (default arm64-sim), NNSWEEP_ARM_SIM_CPUS (this host's cores),
# NNSWEEP_ARM_SIM_DASHBOARD_AGENT_PORT (52366), NNSWEEP_TOKEN_FILE (default ~/.ray/auth_token),
# NNSWEEP_ARM_SIM_AGENT: full (every runtime, as install.sh) or lite (install.sh --lite: no
# PyTorch, ExecuTorch through the torch-free runner; minutes to build instead of up to ~50). Unset, the root keeps the
# agent it has (full on a new root). A full agent serves a lite request: never downgraded.
# NNSWEEP_ARM_SIM_CPU: the core the board emulates, cortex-a72 (default; Raspberry Pi 4),
# cortex-a76 (Raspberry Pi 5) or neoverse-n1 (AWS Graviton2). Changing it rewrites the /sys
# CPU tree only; the root and the agent stay.
set -euo pipefail

here="$(cd "$(dirname "$0")/.." && pwd)"
cache="${NNSWEEP_ARM_SIM_DIR:-/var/cache/nnsweep-arm-sim}"
root="$cache/root"
device="${NNSWEEP_ARM_SIM_DEVICE:-arm64-sim}"
cpus="${NNSWEEP_ARM_SIM_CPUS:-$(nproc)}"
agent_port="${NNSWEEP_ARM_SIM_DASHBOARD_AGENT_PORT:-52366}"
token_file="${NNSWEEP_TOKEN_FILE:-$HOME/.ray/auth_token}"
profile="${NNSWEEP_ARM_SIM_AGENT:-}"
suite=bookworm
cpu="${NNSWEEP_ARM_SIM_CPU:-cortex-a72}"
# What the board runs besides the agent's venv: Arm NN from Debian, in the system python3.
armnn_packages="python3-pyarmnn libarmnn-cpuacc-backend22 libarmnn-cpuref-backend22 libarmnntfliteparser22"
# What install.sh --lite compiles the torch-free ExecuTorch runner with (device_agents/etlite).
build_packages="g++"
# Inside the root the agent lives where install.sh puts it for root: $HOME/nnsweep-agent.
agent_bin=/root/nnsweep-agent/venv/bin

log() { echo "arm-sim: $*" >&2; }
die() { echo "arm-sim: $*" >&2; exit 1; }

# MIDR_EL1 of qemu 7.2's model of each core (what `mrs x0, midr_el1` returns on the board
# under that model); the /sys tree shows the same, since cpuinfo (ONNX Runtime, XNNPACK)
# reads the register from there to pick kernels.
midr_of() {
    case "$1" in
        cortex-a72) echo 0x00000000410fd083 ;;  # r0p3, as the Raspberry Pi 4's BCM2711
        cortex-a76) echo 0x00000000414fd0b1 ;;  # r4p1, as the Raspberry Pi 5's BCM2712
        neoverse-n1) echo 0x00000000414fd0c1 ;; # r4p1 (Graviton2's cores are r3p1)
        *) return 1 ;;
    esac
}

# qemu-user's default CPU (`max`) advertises features these cores lack (dot product, SVE,
# i8mm), and XNNPACK's int8 kernels then compute wrong results (docs/how-to/emulated-board.md). qemu
# reads QEMU_CPU at every exec, so it is exported here (debootstrap, chroot) and passed
# again through the `env -i` of in_root; Ray's processes and the agent's inherit it.
midr=$(midr_of "$cpu") || { echo "arm-sim: unknown NNSWEEP_ARM_SIM_CPU '$cpu' (cortex-a72, cortex-a76 or neoverse-n1)" >&2; exit 2; }
export QEMU_CPU="$cpu"

need_root() { [ "$(id -u)" = 0 ] || die "needs root (binfmt_misc, debootstrap, chroot)"; }

host_arch_is_arm() { case "$(uname -m)" in aarch64|arm64) return 0 ;; *) return 1 ;; esac; }

# qemu-user-static + binfmt_misc: the kernel runs aarch64 ELF files through qemu-aarch64.
setup_binfmt() {
    host_arch_is_arm && return 0
    local missing=""
    for p in qemu-user-static binfmt-support debootstrap; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing="$missing $p"
    done
    if [ -n "$missing" ]; then
        log "installing host packages:$missing"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >/dev/null
    fi
    if [ ! -e /proc/sys/fs/binfmt_misc/status ]; then
        mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
    fi
    if [ ! -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ]; then
        update-binfmts --enable qemu-aarch64 >/dev/null 2>&1 || update-binfmts --import qemu-aarch64 >/dev/null 2>&1 || true
    fi
    [ -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ] || die "qemu-aarch64 is not registered in binfmt_misc"
}

# A minimal /sys CPU tree: the host's /sys makes cpuinfo read x86 CPUs (ONNX Runtime
# segfaults under qemu); no /sys at all makes XNNPACK refuse to start (status 0x5).
# The tree is rewritten only when the CPU or the core count changed ($cache/.cpu records
# them); a running board is never given another CPU under its feet.
write_cpu_tree() {
    local sysdir="$root/sys/devices/system/cpu" last=$((cpus - 1)) i stamp="$cache/.cpu"
    local want="$cpu $midr $cpus" have=""
    [ -e "$stamp" ] && have=$(cat "$stamp")
    [ "$have" = "$want" ] && [ -e "$sysdir/cpu$last/regs/identification/midr_el1" ] && return 0
    if [ -n "$have" ] && board_running; then
        die "the board is running as '$have' (cpu midr cores); \`$0 stop\` before changing NNSWEEP_ARM_SIM_CPU or _CPUS"
    fi
    rm -rf "$root/sys/devices"
    mkdir -p "$sysdir"
    for f in possible present online; do echo "0-$last" >"$sysdir/$f"; done
    for i in $(seq 0 "$last"); do
        mkdir -p "$sysdir/cpu$i/regs/identification"
        echo "$midr" >"$sysdir/cpu$i/regs/identification/midr_el1"
        echo 1 >"$sysdir/cpu$i/online"
    done
    echo "$want" >"$stamp"
    log "CPU tree: $cpus x $cpu (MIDR $midr)"
}

copy_host_files() {
    # The host's CA bundle (pip and apt behind this network's TLS) and resolver.
    mkdir -p "$root/etc/ssl/certs"
    cp /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/ca-certificates.crt"
    cp -L /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
}

is_mounted() { grep -q " $1 " /proc/mounts; }

mount_root() {
    is_mounted "$root/proc" || mount -t proc proc "$root/proc"
    is_mounted "$root/dev" || mount --bind /dev "$root/dev"
    is_mounted "$root/dev/pts" || mount --bind /dev/pts "$root/dev/pts"
    # Ray's object store lives in /dev/shm; a private tmpfs keeps the host's out of reach.
    mkdir -p "$root/dev/shm"
    is_mounted "$root/dev/shm" || mount -t tmpfs -o size=50% shm "$root/dev/shm"
    # The host's measurement lock (nnsweep.bench._machine_lock): the board shares this
    # machine's cores, so its measurements and the host's never overlap.
    if [ -d /run/lock ]; then
        mkdir -p "$root/run/lock"
        is_mounted "$root/run/lock" || mount --bind /run/lock "$root/run/lock"
    fi
}

umount_root() {
    local m
    for m in run/lock dev/shm dev/pts dev proc; do
        if is_mounted "$root/$m"; then umount "$root/$m" || umount -l "$root/$m"; fi
    done
}

# Runs a command inside the root with a clean environment: what a board's shell has.
in_root() {
    chroot "$root" /usr/bin/env -i QEMU_CPU="$cpu" HOME=/root LANG=C.UTF-8 TERM=dumb \
        PATH=/root/nnsweep-agent/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        RAY_DEFAULT_PYTHON_VERSION_MATCH_LEVEL=minor PIP_CERT=/etc/ssl/certs/ca-certificates.crt \
        PIP_DEFAULT_TIMEOUT=180 PIP_DISABLE_PIP_VERSION_CHECK=1 "$@"
}

build_root() {
    if [ -e "$cache/.root-built" ]; then return 0; fi
    mkdir -p "$cache"
    local tmp="$cache/root.partial"
    umount_root_of() { local r=$1 m; for m in run/lock dev/shm dev/pts dev proc; do
        grep -q " $r/$m " /proc/mounts && umount -l "$r/$m"; done; true; }
    umount_root_of "$tmp"
    rm -rf "$tmp"
    log "debootstrap $suite arm64 (minbase) into $tmp"
    local t0=$SECONDS
    debootstrap --arch=arm64 --variant=minbase \
        --include=python3,python3-venv,python3-pip,ca-certificates "$suite" "$tmp" http://deb.debian.org/debian >"$cache/debootstrap.log" 2>&1 \
        || { tail -20 "$cache/debootstrap.log" >&2; die "debootstrap failed (log: $cache/debootstrap.log)"; }
    log "debootstrap took $((SECONDS - t0)) s"
    rm -rf "$root"
    mv "$tmp" "$root"
    copy_host_files
    write_cpu_tree
    mount_root
    log "installing Arm NN from Debian: $armnn_packages"
    t0=$SECONDS
    in_root apt-get update -qq
    in_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $armnn_packages >/dev/null
    in_root apt-get clean
    log "Arm NN took $((SECONDS - t0)) s"
    touch "$cache/.root-built"
}

# Copies this checkout's files (tracked and new, not ignored) into the root, the way a
# board gets a checkout, and runs install.sh there. pip reinstalls only what changed.
install_agent() {
    local src="$root/opt/nnsweep-src" digest stamp="$cache/.agent-installed"
    rm -rf "$src"
    mkdir -p "$src"
    (cd "$here" && git ls-files -co --exclude-standard -z | xargs -0 -r tar -cf - 2>/dev/null) | tar -xf - -C "$src"
    # What pip installs: the package, its data, and how it is built (not docs or tests).
    digest=$(cd "$src" && find pyproject.toml nnsweep dashboards device_agents/install.sh device_agents/etlite -type f \
        ! -name '*.pyc' -print0 | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -c1-64)
    # The stamp holds "DIGEST PROFILE" (a stamp without a profile is from a full install).
    local installed=() want
    [ -e "$stamp" ] && read -r -a installed <"$stamp"
    if [ -n "${installed[0]:-}" ]; then
        # what the root has, unless a full agent is asked for
        want=${installed[1]:-full}
        [ "$profile" = full ] && want=full
    else
        want=${profile:-full}
    fi
    if [ "${installed[0]:-}" = "$digest" ] && [ "${installed[1]:-full}" = "$want" ] \
        && [ -x "$root$agent_bin/nnsweep" ]; then
        log "agent up to date ($want, $digest)"
        [ "$want" = full ] || log "lite agent: no PyTorch, ExecuTorch torch-free (NNSWEEP_ARM_SIM_AGENT=full adds PyTorch)"
        return 0
    fi
    local flag=""
    [ "$want" = lite ] && flag=--lite
    mount_root
    if [ "$want" = lite ] && ! in_root dpkg-query -W -f='${Status}' $build_packages 2>/dev/null | grep -q "ok installed"; then
        log "installing $build_packages from Debian (for the torch-free ExecuTorch runner)"
        in_root apt-get update -qq
        in_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $build_packages >/dev/null
        in_root apt-get clean
    fi
    log "installing the agent ($want) with device_agents/install.sh $flag (pip under emulation: minutes)"
    local t0=$SECONDS
    mount_root
    in_root bash /opt/nnsweep-src/device_agents/install.sh $flag /opt/nnsweep-src >"$cache/install.log" 2>&1 \
        || { tail -30 "$cache/install.log" >&2; die "install.sh failed (log: $cache/install.log)"; }
    log "install.sh took $((SECONDS - t0)) s"
    echo "$digest $want" >"$stamp"
}

cmd_build() {
    need_root
    case "$profile" in full|lite|"") ;; *) die "NNSWEEP_ARM_SIM_AGENT must be full or lite, got '$profile'" ;; esac
    setup_binfmt
    build_root
    copy_host_files
    write_cpu_tree
    install_agent
    # Leave nothing mounted behind a build unless the board is running.
    board_running || umount_root
}

# Processes whose root directory is the board's root.
root_pids() {
    local p r
    for p in /proc/[0-9]*; do
        r=$(readlink "$p/root" 2>/dev/null) || continue
        [ "$r" = "$root" ] && echo "${p#/proc/}"
    done
    true
}

# Whether any process runs in the root. Not `root_pids | grep -q .`: under pipefail, grep's
# early exit can kill root_pids with SIGPIPE, and the pipeline then says "nothing runs".
board_running() { [ -n "$(root_pids)" ]; }

cmd_start() {
    local address="${1:-127.0.0.1:6379}"
    cmd_build
    [ -f "$token_file" ] || die "no Ray token at $token_file (the head's ~/.ray/auth_token; set NNSWEEP_TOKEN_FILE)"
    if board_running; then
        die "already running (pids: $(root_pids | tr '\n' ' ')); \`$0 stop\` first"
    fi
    mount_root
    mkdir -p "$root/etc/nnsweep"
    install -m 0600 "$token_file" "$root/etc/nnsweep/auth_token"
    local t0=$SECONDS attempt
    # Under emulation `ray start` takes 12 s (idle host) to 30 s (4 busy cores' worth of
    # load) and gives the node 30 s to register: allow 120 s. The raylet itself gives Ray's
    # dashboard agent a fixed 15 s to start (ray-project/ray#65983; 6 to 14 s measured
    # here): when it misses, `agent join` says so and the next attempt starts warmer.
    # RAY_agent_register_timeout_ms: how long the raylet keeps trying its runtime-env agent.
    for attempt in 1 2 3; do
        if in_root env RAY_raylet_start_wait_time_s=120 RAY_agent_register_timeout_ms=300000 \
            nnsweep agent join --address "$address" --device "$device" \
            --token-file /etc/nnsweep/auth_token --dashboard-agent-port "$agent_port"; then
            log "joined $address as $device in $((SECONDS - t0)) s (emulated aarch64; attempt $attempt)"
            return 0
        fi
        log "join attempt $attempt failed; cleaning up the board's processes"
        kill_root_pids
    done
    die "could not join $address"
}

# Not `ray stop`: the chroot shares the host's PID namespace, and `ray stop` (run inside
# the root or not) kills every Ray process it can see, the head and other clusters
# included. The board's processes are exactly those whose root is the board's root.
kill_root_pids() {
    local pids i
    for i in $(seq 1 20); do
        pids=$(root_pids)
        [ -z "$pids" ] && break
        # shellcheck disable=SC2086
        if [ "$i" -le 10 ]; then kill -TERM $pids 2>/dev/null || true; else kill -KILL $pids 2>/dev/null || true; fi
        sleep 1
    done
}

cmd_stop() {
    need_root
    local pids
    kill_root_pids
    pids=$(root_pids)
    [ -z "$pids" ] || log "processes left in the root: $pids"
    umount_root
    rm -f "$root/etc/nnsweep/auth_token"
    [ -z "$pids" ] && log "stopped: no process left in $root, nothing mounted"
    [ -z "$pids" ]
}

cmd_status() {
    if [ -e "$cache/.root-built" ]; then echo "root: $root (built)"; else echo "root: $root (not built)"; fi
    [ -e "$cache/.agent-installed" ] && echo "agent: $(cat "$cache/.agent-installed")"
    [ -e "$cache/.cpu" ] && echo "cpu: $(cat "$cache/.cpu")"
    grep " $root/" /proc/mounts | awk '{print "mounted: " $2}' || true
    local pids
    pids=$(root_pids)
    if [ -n "$pids" ]; then
        echo "running:"
        # shellcheck disable=SC2086
        ps -o pid=,rss=,args= -p $(echo $pids | tr ' ' ',') | cut -c1-150
    else
        echo "running: nothing"
    fi
}

cmd_run() {
    need_root
    [ -e "$cache/.root-built" ] || die "build the root first: $0 build"
    copy_host_files
    write_cpu_tree
    mount_root
    in_root "$@"
}

case "${1:-}" in
    build) cmd_build ;;
    start) shift; cmd_start "$@" ;;
    stop) cmd_stop ;;
    status) cmd_status ;;
    run) shift; cmd_run "$@" ;;
    *) echo "usage: $0 build|start [HEAD:PORT]|stop|status|run CMD..." >&2; exit 2 ;;
esac
