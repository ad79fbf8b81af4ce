# Runs in the DGL venv built by benchmarks/peers/setup_dgl.sh ($HOME/peers/dglvenv/bin/python);
# started by run_distdgl.sh (dgl 2.1.0, torch 2.2.1).
"""DistDGL GraphSAGE trainer/server (same file; the role comes from DGL_ROLE).

Started by run_distdgl.sh, which sets the DGL_* variables by hand (what DGL's
tools/launch.py would do).  SIM_MACHINE_ID overrides DGL's machine detection,
which matches the client's interface IPs against ip_config and so cannot tell
two simulated machines on 127.0.0.1 apart.
"""

import argparse
import json
import os
import statistics
import time

import dgl
import dgl.distributed.rpc_client as rpc_client
import torch
import torch.nn as nn
import torch.nn.functional as F
from dgl_model import SAGE  # the script's folder is on sys.path when run as a file

if os.environ.get("SIM_MACHINE_ID") is not None:
    _mid = int(os.environ["SIM_MACHINE_ID"])
    rpc_client.get_local_machine_id = lambda namebook: _mid


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--ip-config", required=True)
    p.add_argument("--part-config", required=True)
    p.add_argument("--fanouts", default="10,10,10")
    p.add_argument("--batch", type=int, default=1024)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--classes", type=int, default=40)
    p.add_argument("--epochs", type=int, default=3)
    a = p.parse_args()

    dgl.distributed.initialize(a.ip_config)  # a server never returns from here
    torch.distributed.init_process_group("gloo")
    rank, world = torch.distributed.get_rank(), torch.distributed.get_world_size()
    name = json.load(open(a.part_config))["graph_name"]
    t = time.perf_counter()
    g = dgl.distributed.DistGraph(name, part_config=a.part_config)
    pb = g.get_partition_book()
    train_nid = dgl.distributed.node_split(g.ndata["train_mask"], pb, force_even=True)
    local = int((pb.nid2partid(train_nid) == pb.partid).sum())
    print(
        f"[rank {rank}/{world} part {pb.partid}] dgl {dgl.__version__} torch {torch.__version__} "
        f"threads {torch.get_num_threads()} train_nid={len(train_nid)} local={local} "
        f"graph n={g.num_nodes()} m={g.num_edges()} init {time.perf_counter() - t:.1f}s",
        flush=True,
    )
    fanouts = [int(x) for x in a.fanouts.split(",")]
    sampler = dgl.dataloading.NeighborSampler(fanouts)
    loader = dgl.dataloading.DistNodeDataLoader(
        g, train_nid, sampler, batch_size=a.batch, shuffle=True, drop_last=False
    )
    nb = torch.tensor([(len(train_nid) + a.batch - 1) // a.batch])
    torch.distributed.all_reduce(nb, torch.distributed.ReduceOp.MIN)  # equal steps for DDP
    nb = int(nb)
    feat_dim = g.ndata["feat"].shape[1]
    model = nn.parallel.DistributedDataParallel(SAGE(feat_dim, a.hidden, a.classes, len(fanouts)))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    times = []
    for ep in range(a.epochs):
        torch.distributed.barrier()
        t0 = time.perf_counter()
        nedges = step = 0
        for input_nodes, seeds, blocks in loader:
            if step >= nb:
                continue  # drain the loader
            x = g.ndata["feat"][input_nodes]
            y = g.ndata["label"][seeds].long()
            nedges += sum(b.num_edges() for b in blocks)
            loss = F.cross_entropy(model(blocks, x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            step += 1
        dt = torch.tensor([time.perf_counter() - t0])
        ne = torch.tensor([nedges])
        torch.distributed.all_reduce(dt, torch.distributed.ReduceOp.MAX)
        torch.distributed.all_reduce(ne)
        times.append(float(dt))
        if rank == 0:
            print(
                f"epoch {ep}: {float(dt):.2f}s (max over trainers) steps/trainer={step} "
                f"sampled_edges(all)={int(ne)} edges/s={int(ne) / float(dt):.3e} "
                f"loss={loss.item():.3f}",
                flush=True,
            )
    if rank == 0:
        print(
            "RESULT "
            + json.dumps(
                {
                    "bench": "distdgl_sage_train",
                    "runs_s": [round(x, 3) for x in times],
                    "median_s": round(statistics.median(times), 3),
                    "trainers": world,
                    "part_config": a.part_config,
                    "fanouts": fanouts,
                    "batch": a.batch,
                    "hidden": a.hidden,
                }
            ),
            flush=True,
        )
    torch.distributed.barrier()


if __name__ == "__main__":
    main()
