"""py-spy every restarted vLLM EngineCore (the 2nd, 4th, ... seen) from start to exit: raw folded stacks in argv[1]."""
import os
import subprocess
import sys
import time

out = sys.argv[1]
seen: list[int] = []
procs = []
while True:
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as fh:
                s = fh.read()
        except OSError:
            continue
        comm = s[s.index("(") + 1: s.rindex(")")]
        pid = int(d)
        if comm.startswith("VLLM::EngineCor") and pid not in seen:
            seen.append(pid)
            if len(seen) % 2 == 0:
                f = f"{out}/spy-{len(seen) // 2}-{pid}.txt"
                procs.append(subprocess.Popen(["/tmp/spyenv/bin/py-spy", "record", "--nonblocking", "--rate", "40",
                                               "--threads", "--format", "raw", "-o", f, "--pid", str(pid)],
                                              stdout=subprocess.DEVNULL, stderr=open(f + ".err", "w")))
    time.sleep(0.3)
