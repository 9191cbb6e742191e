"""CPU of each vLLM server's processes while a grid runs, dumped when its EngineCore exits.

Per server (keyed by the EngineCore pid): EngineCore threads by name (digits folded, its main
thread as "main"), the model worker process (EngineCore's python child) and the API server
(EngineCore's parent) totals, and the /proc/stat deltas over the EngineCore's life.
Output: one JSON line per server in argv[1]. This copy (r16) adds ``run_wait_s``: per thread name, seconds on a
CPU and seconds runnable but waiting for one (``/proc/<pid>/task/<tid>/schedstat``), and the EngineCore's CPU affinity.
"""
import json
import os
import re
import sys
import time

HZ = os.sysconf("SC_CLK_TCK")
OUT = sys.argv[1]

def stat_cpu():
    with open("/proc/stat") as f:
        v = [int(x) / HZ for x in f.readline().split()[1:]]
    return dict(user=v[0] + v[1], system=v[2], idle=v[3], iowait=v[4], softirq=v[6])

def read(path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return None

def pstat(pid, tid=None):
    s = read(f"/proc/{pid}/task/{tid}/stat" if tid else f"/proc/{pid}/stat")
    if s is None:
        return None
    s = s.decode()
    comm = s[s.index("(") + 1: s.rindex(")")]
    rest = s[s.rindex(")") + 2:].split()
    return comm, int(rest[1]), (int(rest[11]) + int(rest[12])) / HZ  # comm, ppid, cpu s (self only)

live = {}
while True:
    procs = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            st = pstat(int(d))
            if st:
                procs[int(d)] = st
    for pid, (comm, ppid, _) in procs.items():
        if comm.startswith("VLLM::EngineCor") and pid not in live:
            live[pid] = {"start": time.strftime("%H:%M:%S"), "cpu0": stat_cpu(), "threads": {}, "api": ppid,
                         "worker": {}, "api_cpu": 0.0}
    for pid in list(live):
        rec = live[pid]
        if pid in procs:
            try:
                for t in os.listdir(f"/proc/{pid}/task"):
                    st = pstat(pid, int(t))
                    if st:
                        ss = read(f"/proc/{pid}/task/{t}/schedstat")
                        run_ns, wait_ns = (int(x) for x in ss.split()[:2]) if ss else (0, 0)
                        rec["threads"][int(t)] = (st[0], st[2], run_ns / 1e9, wait_ns / 1e9)
                        if "aff" not in rec:
                            for ln in (read(f"/proc/{pid}/status") or b"").decode().splitlines():
                                if ln.startswith("Cpus_allowed_list"):
                                    rec["aff"] = ln
            except OSError:
                pass
            for cpid, (ccomm, cppid, cs) in procs.items():
                if cppid == pid and ccomm == "python":
                    rec["worker"][cpid] = cs
            if rec["api"] in procs:
                rec["api_cpu"] = procs[rec["api"]][2]
            rec["cpu1"] = stat_cpu()
            continue
        live.pop(pid)
        by = {}
        waits = {}
        for tid, (comm, s, run_s, wait_s) in rec["threads"].items():
            name = "main" if tid == pid else re.sub(r"\d+", "#", comm)
            by[name] = round(by.get(name, 0) + s, 2)
            w = waits.setdefault(name, [0.0, 0.0])
            w[0] = round(w[0] + run_s, 2)
            w[1] = round(w[1] + wait_s, 2)
        c0, c1 = rec["cpu0"], rec.get("cpu1", rec["cpu0"])
        line = {"engine_pid": pid, "start": rec["start"], "end": time.strftime("%H:%M:%S"),
                "system_delta": {k: round(c1[k] - c0[k], 1) for k in c0},
                "engine_threads": dict(sorted(by.items(), key=lambda kv: -kv[1])),
                "engine_total": round(sum(by.values()), 1),
                "worker_total": round(sum(rec["worker"].values()), 1), "api_total": round(rec["api_cpu"], 1),
                "run_wait_s": waits, "aff": rec.get("aff")}
        with open(OUT, "a") as f:
            f.write(json.dumps(line) + "\n")
    time.sleep(0.5)
