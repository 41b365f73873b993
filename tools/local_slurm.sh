#!/usr/bin/env bash
# A real Slurm cluster on this machine for tests and for trying configs/slurm/dtrain.sbatch:
# N hosts from tools/netns_hosts.sh (namespaces TAG-h1..TAG-hN, 10.77.0.i), each with its own
# host name (a UTS namespace) and a slurmd, slurmctld on host 1, one munged for all of them
# (its socket is a file, which every namespace sees). Debian's slurmctld, slurmd, slurm-client
# and munge (22.05); needs root. Slurm's config, state and logs are under DIR; the slurmds'
# spools and munge's key and socket under /run/dtrain-slurm-TAG (a socket's path has at most
# 108 bytes).
#
#   tools/local_slurm.sh up TAG N DIR [CPUS] [GPUS]
#                                   start it (CPUS a node, default 1; GPUS a gres of that many
#                                   GPUs a node, stand-in files for devices, default none);
#                                   exit 77 when this machine cannot (no Slurm, no namespaces)
#   tools/local_slurm.sh run TAG DIR CMD...    run CMD on host 1 with SLURM_CONF set (sbatch ...)
#   tools/local_slurm.sh down TAG N DIR        stop it and delete the hosts
set -uo pipefail
cmd=${1:-}; tag=${2:-}
here="$(cd "$(dirname "$0")" && pwd)"
run="/run/dtrain-slurm-$tag" munge="/run/dtrain-slurm-$tag/munge"
usage() { sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; }

# write_conf DIR N CPUS GPUS: slurm.conf, gres.conf and cgroup.conf. No cgroups (proctrack/linuxproc,
# task/none): the namespaces are not containers, and the test machine's cgroup tree is not ours.
write_conf() {
  local dir=$1 n=$2 cpus=$3 gpus=$4 gres=""
  if [[ $gpus -gt 0 ]]; then
    # Slurm hands out a GPU by its device file, a character device: stand-ins with the numbers
    # of /dev/null, /dev/zero, /dev/full and /dev/random (no cgroup ever opens them).
    local minors=(3 5 7 8)
    [[ $gpus -le 4 ]] || { echo "at most 4 GPUs a node" >&2; return 2; }
    for g in $(seq 0 $((gpus - 1))); do mknod "$run/gpu$g" c 1 "${minors[$g]}" || return 1; done
    echo "NodeName=h[1-$n] Name=gpu File=$run/gpu[0-$((gpus - 1))]" > "$dir/gres.conf"
    gres=" Gres=gpu:$gpus"
  fi
  cat > "$dir/slurm.conf" <<EOF
ClusterName=dtraintest
SlurmctldHost=h1(10.77.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$munge/munge.sock
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$run/spool/%n
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd-%n.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd-%n.log
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/builtin
MpiDefault=none
GresTypes=gpu
ReturnToService=2
SlurmdParameters=config_overrides
EOF
  for i in $(seq 1 "$n"); do
    echo "NodeName=h$i NodeAddr=10.77.0.$i CPUs=$cpus RealMemory=1000$gres State=UNKNOWN" >> "$dir/slurm.conf"
    mkdir -p "$run/spool/h$i"
  done
  echo "PartitionName=test Nodes=h[1-$n] Default=YES MaxTime=INFINITE State=UP" >> "$dir/slurm.conf"
  printf 'CgroupPlugin=cgroup/v1\nCgroupAutomount=no\n' > "$dir/cgroup.conf"
}

# on_host I NAME CMD...: CMD in host I's namespace under host name NAME.
on_host() {
  local i=$1 name=$2
  shift 2
  ip netns exec "$tag-h$i" unshare --uts bash -c 'hostname "$0" && exec "$@"' "$name" "$@"
}

up() {
  local n=$1 dir=$2 cpus=${3:-1} gpus=${4:-0}
  for bin in slurmctld slurmd sbatch munged; do
    command -v "$bin" > /dev/null ||
      { echo "no $bin here (apt-get install slurmctld slurmd slurm-client munge)" >&2; exit 77; }
  done
  "$here/netns_hosts.sh" up "$tag" "$n" 10gbit || exit $?
  mkdir -p "$dir/state" "$munge" && chmod 700 "$munge"
  head -c 1024 /dev/urandom > "$munge/munge.key" && chmod 400 "$munge/munge.key"
  write_conf "$dir" "$n" "$cpus" "$gpus" || exit 1
  munged -F -f --socket="$munge/munge.sock" --key-file="$munge/munge.key" \
    --log-file="$munge/munged.log" --pid-file="$munge/munged.pid" \
    --seed-file="$munge/seed" > "$dir/munged.out" 2>&1 &
  echo "$! munged" > "$dir/pids"
  on_host 1 h1 slurmctld -D -f "$dir/slurm.conf" > "$dir/slurmctld.out" 2>&1 &
  echo "$! slurmctld" >> "$dir/pids"
  for i in $(seq 1 "$n"); do
    on_host "$i" "h$i" slurmd -D -N "h$i" -f "$dir/slurm.conf" > "$dir/slurmd-$i.out" 2>&1 &
    echo "$! slurmd-h$i" >> "$dir/pids"
  done
  wait_idle "$n" "$dir"
}

# wait_idle N DIR: until sinfo shows N idle nodes (30 s at most; says what it saw otherwise).
wait_idle() {
  local idle=0 end=$((SECONDS + 30))
  while ((SECONDS < end)); do
    idle=$(run_on_h1 "$2" sinfo -h -t idle -o '%D' 2> /dev/null | head -n 1)
    [[ ${idle:-0} -ge $1 ]] && { echo "slurm: $1 nodes idle (h1..h$1; SLURM_CONF=$2/slurm.conf)"; return 0; }
    sleep 0.2
  done
  echo "slurm: ${idle:-0} of $1 nodes idle after 30 s; sinfo says:" >&2
  run_on_h1 "$2" sinfo >&2
  tail -n 5 "$2"/slurmctld.out "$2"/slurmd-*.out >&2
  return 1
}

run_on_h1() {
  local dir=$1
  shift
  ip netns exec "$tag-h1" env SLURM_CONF="$dir/slurm.conf" "$@"
}

down() {
  local n=$1 dir=$2
  if [[ -f $dir/pids ]]; then
    while read -r pid _; do kill -TERM "$pid" 2> /dev/null; done < "$dir/pids"
    while read -r pid _; do  # 5 s each, then SIGKILL
      for _ in $(seq 1 50); do kill -0 "$pid" 2> /dev/null || break; sleep 0.1; done
      kill -KILL "$pid" 2> /dev/null
    done < "$dir/pids"
    rm -f "$dir/pids"
  fi
  # What the hosts still run (a job step's slurmstepd and its tasks outlive slurmd).
  for i in $(seq 1 "$n"); do
    ip netns pids "$tag-h$i" 2> /dev/null | xargs -r kill -KILL 2> /dev/null
  done
  "$here/netns_hosts.sh" down "$tag" "$n"
  rm -rf "$run"
}

case $cmd in
  up) [[ $# -ge 4 ]] || { usage; exit 2; }; up "$3" "$4" "${5:-1}" "${6:-0}" ;;
  run) [[ $# -ge 4 ]] || { usage; exit 2; }; dir=$3; shift 3; run_on_h1 "$dir" "$@" ;;
  down) [[ $# -eq 4 ]] || { usage; exit 2; }; down "$3" "$4" ;;
  *) usage; exit 2 ;;
esac
