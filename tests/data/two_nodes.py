"""Two "nodes" on this machine, for the multi-node tests of the doctor and the tuner: two torchrun agents of one
job (--nnodes 2, a c10d rendezvous on localhost), each starting --nproc-per-node ranks of SCRIPT; the ranks join
gloo. The whole multi-node command, as `srun` is on a cluster: it ends as the worse of the two agents ended
(the first failure's exit code, or its signal), and passes SIGINT, SIGTERM and SIGHUP on to both.

usage: python two_nodes.py [--nproc-per-node N] SCRIPT [ARGS...]
"""
import os
import signal
import socket
import subprocess
import sys
import uuid

argv = sys.argv[1:]
nproc = "2"
if argv[:1] == ["--nproc-per-node"]:
    nproc, argv = argv[1], argv[2:]
with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
rendezvous = ["--nnodes", "2", "--nproc-per-node", nproc, "--rdzv-backend", "c10d",
              "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", uuid.uuid4().hex[:12]]
env = os.environ | {"OMP_NUM_THREADS": "1"}
agents = [subprocess.Popen([sys.executable, "-m", "torch.distributed.run", *rendezvous, *argv], env=env)
          for _ in range(2)]


def forward(sig, _frame):
    for agent in agents:
        if agent.poll() is None:
            agent.send_signal(sig)


for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
    signal.signal(sig, forward)
codes = [agent.wait() for agent in agents]
worst = next((c for c in codes if c != 0), 0)
if worst < 0:
    signal.signal(-worst, signal.SIG_DFL)
    os.kill(os.getpid(), -worst)
sys.exit(worst)
