#!/usr/bin/env bash
# Builds the micro-VM guest for `type: firecracker` scalers (both the firecracker and the qemu VMM):
#   <out>/vmlinux         ELF kernel from Debian's linux-image package (PVH entry: boots directly in 64-bit
#                         mode, which Firecracker needs and which is ~3x faster under QEMU/TCG)
#   <out>/initrd.cpio.gz  busybox + the virtio/overlay modules; mounts the read-only rootfs (vda) under a
#                         per-VM writable overlay (vdb) and switches to it
#   <out>/rootfs.ext4     read-only, shared by all VMs: Node, the kici agent, busybox as /bin/sh
# Credentials never go into these files: the guest reads them at boot from MMDS (firecracker) or a
# per-VM config drive (qemu).
# Usage: scripts/build-vm-guest.sh <out-dir>      (run `npm run build` first)
# Env: KICI_VM_KERNEL_DEB=<path to a linux-image-*.deb> skips the download;
#      KICI_VM_KERNEL_PKG=<meta package> (default linux-image-amd64); KICI_VM_NODE=<node binary>.
set -euo pipefail
OUT=${1:?usage: build-vm-guest.sh <out-dir>}
REPO=$(cd "$(dirname "$0")/.." && pwd)
NODE_BIN=${KICI_VM_NODE:-$(readlink -f "$REPO/node_modules/.bin/node" 2>/dev/null || command -v node)}
BUSYBOX=${KICI_VM_BUSYBOX:-/bin/busybox}
T0=$(date +%s%N)
ms() { echo $((($(date +%s%N) - $1) / 1000000)); }
die() { echo "build-vm-guest: $*" >&2; exit 1; }

[[ -f "$REPO/dist/cli/agent.js" ]] || die "dist/cli/agent.js is missing: run npm run build first"
[[ -x "$NODE_BIN" ]] || die "no node binary (set KICI_VM_NODE)"
{ ldd "$BUSYBOX" 2>&1 || true; } | grep -qE 'not a dynamic executable|statically linked' || die "$BUSYBOX is not a static busybox (apt-get install busybox-static)"
for t in mke2fs python3 dpkg; do command -v $t >/dev/null || die "$t is not on PATH"; done
# util-linux setpriv (busybox's cannot change the bounding set): the guest starts its agent with it.
SETPRIV=${KICI_VM_SETPRIV:-$(command -v setpriv || true)}
[[ -n "$SETPRIV" ]] && "$SETPRIV" --help 2>&1 | grep -- --bounding-set >/dev/null ||
  die "no setpriv with --bounding-set (apt-get install util-linux, or set KICI_VM_SETPRIV)"
mkdir -p "$OUT"
WORK=$(mktemp -d "$OUT/.build.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

# --- kernel: the Debian package, unpacked (not installed)
deb=${KICI_VM_KERNEL_DEB:-}
if [[ -z "$deb" ]]; then
  meta=${KICI_VM_KERNEL_PKG:-linux-image-amd64}
  pkg=$(apt-cache depends "$meta" | awk '/Depends: linux-image-/{print $2; exit}')
  [[ -n "$pkg" ]] || die "apt-cache knows no kernel behind $meta (apt-get update?)"
  deb=$(ls /var/cache/apt/archives/"$pkg"_*.deb 2>/dev/null | head -1 || true)
  if [[ -z "$deb" ]]; then
    (cd "$WORK" && apt-get download -qq "$pkg") || die "apt-get download $pkg failed"
    deb=$(ls "$WORK"/"$pkg"_*.deb | head -1)
  fi
fi
dpkg -x "$deb" "$WORK/k"
python3 - "$WORK/k" "$OUT/vmlinux" <<'PY'
# Debian ships an XZ-compressed bzImage; the ELF vmlinux inside it is what a PVH boot needs.
import glob, lzma, sys
d = open(glob.glob(sys.argv[1] + '/boot/vmlinuz-*')[0], 'rb').read()
start = d.find(b'\xfd7zXZ\x00')
if start < 0: sys.exit('kernel image is not XZ-compressed')
open(sys.argv[2], 'wb').write(lzma.LZMADecompressor().decompress(d[start:]))
PY
KVER=$(ls "$WORK/k/lib/modules")
KMOD="$WORK/k/lib/modules/$KVER/kernel"

# --- initramfs: load drivers, stack the overlay, switch root
I="$WORK/initrd"
mkdir -p "$I"/{bin,dev,proc,sys,lib/modules,ro,rw,newroot}
cp "$BUSYBOX" "$I/bin/busybox"
# The drivers the guest needs, each after its dependencies (read from the modules' own modinfo;
# crc32c_generic is a soft dependency of ext4 that modinfo does not list).
python3 - "$KMOD" "$I/lib/modules" virtio_mmio virtio_blk virtio_net crc32c_generic ext4 overlay >"$WORK/mods" <<'PY'
import lzma, os, sys
root, dest, wanted = sys.argv[1], sys.argv[2], sys.argv[3:]
files = {}
for d, _, fs in os.walk(root):
    for f in fs:
        if '.ko' in f: files[f.split('.ko')[0].replace('-', '_')] = os.path.join(d, f)
order, seen = [], set()
def add(name):
    name = name.replace('-', '_')
    if name in seen: return
    seen.add(name)
    if name not in files: return  # built into the kernel
    data = open(files[name], 'rb').read()
    if files[name].endswith('.xz'): data = lzma.decompress(data)
    deps = data.split(b'\0depends=', 1)[1].split(b'\0', 1)[0].decode() if b'\0depends=' in data else ''
    for dep in filter(None, deps.split(',')): add(dep)
    open(os.path.join(dest, name + '.ko'), 'wb').write(data)
    order.append(name)
for w in wanted: add(w)
print(' '.join(order))
PY
MODS=$(cat "$WORK/mods")
{ echo '#!/bin/busybox sh'; echo "MODS='$MODS'"; cat; } >"$I/init" <<'EOF'
B=/bin/busybox
$B mount -t proc proc /proc; $B mount -t sysfs sys /sys; $B mount -t devtmpfs dev /dev
for m in $MODS; do
  $B insmod /lib/modules/$m.ko || echo "kici-guest: insmod $m failed"
done
i=0; while [ ! -b /dev/vdb ] && [ $i -lt 100 ]; do $B sleep 0.05; i=$((i+1)); done
fail() { echo "kici-guest: $1"; $B sleep 1; $B poweroff -f; }
$B mount -t ext4 -o ro /dev/vda /ro || fail "unable to mount root fs (vda)"
$B mount -t ext4 /dev/vdb /rw || fail "unable to mount the overlay drive (vdb)"
$B mkdir -p /rw/upper /rw/work
$B mount -t overlay overlay -o lowerdir=/ro,upperdir=/rw/upper,workdir=/rw/work /newroot || fail "overlay mount failed"
$B umount /proc /sys; $B mount --move /dev /newroot/dev
exec $B switch_root /newroot /sbin/kici-init
EOF
chmod +x "$I/init"
(cd "$I" && find . | "$BUSYBOX" cpio -o -H newc 2>/dev/null | gzip -1) >"$OUT/initrd.cpio.gz"

# --- rootfs: busybox userland, node + its libraries, the agent
R="$WORK/rootfs"
mkdir -p "$R"/{bin,sbin,dev,proc,sys,tmp,run,etc,root,work,opt/kici,lib64,usr/bin}
cp "$BUSYBOX" "$R/bin/busybox"
for a in $("$BUSYBOX" --list); do [[ -e "$R/bin/$a" ]] || ln -s busybox "$R/bin/$a"; done
cp "$NODE_BIN" "$R/usr/bin/node"
cp "$SETPRIV" "$R/usr/bin/setpriv"
for lib in $({ ldd "$NODE_BIN"; ldd "$SETPRIV"; } | awk '/=>/{print $3} /ld-linux/{print $1}' | sort -u); do
  mkdir -p "$R$(dirname "$lib")"; cp -L "$lib" "$R$lib"
done
cp -r "$REPO/dist" "$REPO/package.json" "$R/opt/kici/"
mkdir -p "$R/opt/kici/node_modules"
cp -rL "$REPO/node_modules/ws" "$R/opt/kici/node_modules/ws"
printf 'root:x:0:0:root:/root:/bin/sh\n' >"$R/etc/passwd"
printf 'root:x:0:\n' >"$R/etc/group"
printf '127.0.0.1 localhost\n' >"$R/etc/hosts"
cat >"$R/sbin/kici-init" <<'EOF'
#!/bin/sh
# PID 1 in the guest: network from the kernel command line, credentials from the config drive (qemu)
# or MMDS (firecracker), then the agent; the VM powers off when the agent exits.
export PATH=/usr/bin:/bin
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t tmpfs tmp /tmp
for kv in $(cat /proc/cmdline); do case "$kv" in kici.net=*) NET=${kv#kici.net=} ;; esac; done
IP=${NET%%,*}; R=${NET#*,}; GW=${R%%,*}; PREFIX=${R#*,}
ip link set lo up; ip link set eth0 up
ip addr add "$IP/$PREFIX" dev eth0 && ip route add default via "$GW"
echo "kici-guest: eth0 $IP/$PREFIX via $GW"
ENVF=/run/kici.env
if [ -b /dev/vdc ]; then
  tr -d '\000' </dev/vdc >"$ENVF"
  # The host zeroes the drive once the agent has registered; drop the cached copy so later reads see that.
  blockdev --flushbufs /dev/vdc 2>/dev/null
else
  ip route add 169.254.169.254 dev eth0 2>/dev/null
  # Node, not busybox wget: the static busybox's resolver needs NSS libraries the guest lacks.
  node -e 'fetch("http://169.254.169.254/latest/meta-data/kici-env-file").then(r=>r.text()).then(t=>process.stdout.write(t),()=>{console.error("kici-guest: MMDS unreachable");process.exit(1)})' >"$ENVF"
fi
chmod 600 "$ENVF"
set -a; . "$ENVF"; set +a
rm -f "$ENVF"
# The token must not reach the agent's environment: /proc/<pid>/environ would show it to every step
# for the agent's whole life. It goes into a file on the tmpfs, which the agent removes once read.
if [ -n "$KICI_AGENT_TOKEN" ]; then
  (umask 077; printf '%s\n' "$KICI_AGENT_TOKEN" >/tmp/.kici-agent-token)
  export KICI_AGENT_TOKEN_FILE=/tmp/.kici-agent-token
  unset KICI_AGENT_TOKEN
fi
# The scaler's extraHosts, as /etc/hosts lines (the root is an overlay, so this stays in this VM).
[ -n "$KICI_GUEST_HOSTS" ] && printf '%s\n' "$KICI_GUEST_HOSTS" >>/etc/hosts
unset KICI_GUEST_HOSTS
echo "kici-guest: starting agent $KICI_AGENT_ID"
# Steps run as root, like the agent, which makes itself non-dumpable; without these capabilities
# (ptrace, the tracing SYS_ADMIN and PERFMON allow, BPF, /proc/kcore, modules) no step can read its
# memory, where its token and session proof live. Dropped from the bounding set, so neither the
# agent nor anything it starts can get them back; the agent itself needs none of them.
cd /work && /usr/bin/setpriv --bounding-set -sys_ptrace,-sys_admin,-perfmon,-bpf,-sys_rawio,-sys_module \
  -- node /opt/kici/dist/cli/agent.js
echo "kici-guest: agent exited with $?"
sync; poweroff -f
EOF
chmod +x "$R/sbin/kici-init"
kb=$(du -sk "$R" | cut -f1)
mke2fs -q -t ext4 -O ^has_journal -L kici-rootfs -d "$R" "$OUT/rootfs.ext4" "$((kb * 11 / 10 + 16384))k"

echo "kernel $KVER from $(basename "$deb")"
ls -l "$OUT/vmlinux" "$OUT/initrd.cpio.gz" "$OUT/rootfs.ext4" | awk '{printf "%s %d MiB\n", $9, $5/1048576}'
echo "build-vm-guest: done in $(ms "$T0") ms"
