"""Reference TGN link-prediction numbers from PyG's own TGN (benchmark only).

A faithful re-implementation of pytorch_geometric's ``examples/tgn.py`` as a function, so a
benchmark can train it on the same events as shardgnn's TGN: ``TGNMemory`` with
``IdentityMessage`` and ``LastAggregator``, ``LastNeighborLoader(size=10)``, a
``GraphAttentionEmbedding`` (one ``TransformerConv``, 2 heads, dropout 0.1, edge features = time
encoding of ``last_update[src] - t`` and the raw message), the 3-linear ``LinkPredictor``, Adam and
BCE-with-logits on one negative per positive. The split is ``TemporalData.train_val_test_split``'s
(computed on the int64 times), batches are chronological slices (``TemporalDataLoader``), each
epoch resets memory and neighbour loader, trains, then evaluates val continuing from the memory it
ended with; test runs after the last epoch's val pass, continuing from there, as in the example.

Differences from the example:

- training negatives are drawn uniformly from all nodes (the example uses ``[min_dst, max_dst]``)
  with a ``torch.Generator`` seeded with ``seed``;
- evaluation uses given negatives ``eval_neg_dst[event]`` instead of random ones, so that two
  systems can be scored on identical negatives;
- AP/AUC come from ``shardgnn.train.linkmetrics`` (no sklearn); besides the example's per-batch
  mean, pooled and inductive (an endpoint unseen in training) numbers are reported;
- without event features the raw message is ``[E, 1]`` zeros: ``TGNMemory`` fails with a
  zero-width message (``_compute_msg`` drops the empty message tensors of all but the first node,
  so the concatenation in ``IdentityMessage`` gets mismatched row counts).

Run on CollegeMsg (the JSON result goes to stdout, the per-epoch progress lines to stderr):

    python benchmarks/pyg_tgn_reference.py --epochs 2 --seed 0 > out/pyg_tgn.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np
import torch
from torch.nn import Linear
from torch_geometric.nn import TGNMemory, TransformerConv
from torch_geometric.nn.models.tgn import IdentityMessage, LastAggregator, LastNeighborLoader

from shardgnn.train.linkmetrics import auc, average_precision


class GraphAttentionEmbedding(torch.nn.Module):
    def __init__(self, in_channels, out_channels, msg_dim, time_enc):
        super().__init__()
        self.time_enc = time_enc
        edge_dim = msg_dim + time_enc.out_channels
        self.conv = TransformerConv(
            in_channels, out_channels // 2, heads=2, dropout=0.1, edge_dim=edge_dim
        )

    def forward(self, x, last_update, edge_index, t, msg):
        rel_t = last_update[edge_index[0]] - t
        rel_t_enc = self.time_enc(rel_t.to(x.dtype))
        edge_attr = torch.cat([rel_t_enc, msg], dim=-1)
        return self.conv(x, edge_index, edge_attr)


class LinkPredictor(torch.nn.Module):
    def __init__(self, in_channels):
        super().__init__()
        self.lin_src = Linear(in_channels, in_channels)
        self.lin_dst = Linear(in_channels, in_channels)
        self.lin_final = Linear(in_channels, 1)

    def forward(self, z_src, z_dst):
        h = self.lin_src(z_src) + self.lin_dst(z_dst)
        h = h.relu()
        return self.lin_final(h)


def _metrics(pos: list, neg: list, new: np.ndarray) -> dict:
    p, n = np.concatenate(pos), np.concatenate(neg)
    return {
        "events": int(p.size),
        "ap_batch_mean": float(np.mean([average_precision(a, b) for a, b in zip(pos, neg)])),
        "auc_batch_mean": float(np.mean([auc(a, b) for a, b in zip(pos, neg)])),
        "ap": average_precision(p, n),
        "auc": auc(p, n),
        "new_node_events": int(new.sum()),
        "new_node_ap": average_precision(p[new], n[new]),
        "new_node_auc": auc(p[new], n[new]),
    }


def train_pyg_tgn(src, dst, t, num_nodes, *, seed, epochs, eval_neg_dst, batch_size=200, lr=1e-4,
                  memory_dim=100, time_dim=100, embedding_dim=100, neighbors=10,
                  val_ratio=0.15, test_ratio=0.15, msg=None, progress=False) -> dict:  # fmt: skip
    """Train PyG's example TGN on the events and return per-epoch loss/timing/val metrics, the
    final val and test metrics, the split ``[val_idx, test_idx, E]`` and the config."""
    config = dict(locals())  # the scalar arguments
    for name in ("src", "dst", "t", "eval_neg_dst", "msg"):
        del config[name]
    t64 = np.asarray(t).astype(np.int64)
    num_events = t64.size
    val_time, test_time = np.quantile(t64, [1.0 - val_ratio - test_ratio, 1.0 - test_ratio])
    val_idx, test_idx = int((t64 <= val_time).sum()), int((t64 <= test_time).sum())

    src_all = torch.as_tensor(np.asarray(src, np.int64))
    dst_all = torch.as_tensor(np.asarray(dst, np.int64))
    t_all = torch.as_tensor(t64)
    if msg is None:
        msg = np.zeros((num_events, 1), np.float32)
    msg_all = torch.as_tensor(np.asarray(msg, np.float32))
    neg_all = torch.as_tensor(np.asarray(eval_neg_dst, np.int64))
    seen = np.zeros(num_nodes, bool)
    seen[np.asarray(src[:val_idx])] = seen[np.asarray(dst[:val_idx])] = True
    new_all = ~(seen[np.asarray(src)] & seen[np.asarray(dst)])

    torch.manual_seed(seed)
    msg_dim = msg_all.size(-1)
    config.update(num_nodes=int(num_nodes), msg_dim=int(msg_dim))
    memory = TGNMemory(
        num_nodes,
        msg_dim,
        memory_dim,
        time_dim,
        message_module=IdentityMessage(msg_dim, memory_dim, time_dim),
        aggregator_module=LastAggregator(),
    )
    gnn = GraphAttentionEmbedding(memory_dim, embedding_dim, msg_dim, memory.time_enc)
    link_pred = LinkPredictor(embedding_dim)
    params = set(memory.parameters()) | set(gnn.parameters()) | set(link_pred.parameters())
    optimizer = torch.optim.Adam(params, lr=lr)
    criterion = torch.nn.BCEWithLogitsLoss()
    neighbor_loader = LastNeighborLoader(num_nodes, size=neighbors)
    assoc = torch.empty(num_nodes, dtype=torch.long)
    gen = torch.Generator().manual_seed(seed)

    def embed(s, pos_dst, neg_dst):
        n_id = torch.cat([s, pos_dst, neg_dst]).unique()
        n_id, edge_index, e_id = neighbor_loader(n_id)
        assoc[n_id] = torch.arange(n_id.size(0))
        z, last_update = memory(n_id)
        z = gnn(z, last_update, edge_index, t_all[e_id], msg_all[e_id])
        pos_out = link_pred(z[assoc[s]], z[assoc[pos_dst]])
        neg_out = link_pred(z[assoc[s]], z[assoc[neg_dst]])
        return pos_out, neg_out

    def train() -> float:
        memory.train()
        gnn.train()
        link_pred.train()
        memory.reset_state()  # Start with a fresh memory.
        neighbor_loader.reset_state()  # Start with an empty graph.
        total_loss = 0.0
        for lo in range(0, val_idx, batch_size):
            sl = slice(lo, min(lo + batch_size, val_idx))
            s, pos_dst, bt, bmsg = src_all[sl], dst_all[sl], t_all[sl], msg_all[sl]
            optimizer.zero_grad()
            neg_dst = torch.randint(0, num_nodes, (s.size(0),), dtype=torch.long, generator=gen)
            pos_out, neg_out = embed(s, pos_dst, neg_dst)
            loss = criterion(pos_out, torch.ones_like(pos_out))
            loss += criterion(neg_out, torch.zeros_like(neg_out))
            # Update memory and neighbor loader with ground-truth state.
            memory.update_state(s, pos_dst, bt, bmsg)
            neighbor_loader.insert(s, pos_dst)
            loss.backward()
            optimizer.step()
            memory.detach()
            total_loss += float(loss.detach()) * s.size(0)
        return total_loss / val_idx

    @torch.no_grad()
    def test(start: int, stop: int) -> dict:
        memory.eval()
        gnn.eval()
        link_pred.eval()
        torch.manual_seed(12345)  # as the example (reseeds the next epoch's dropout too)
        pos, neg = [], []
        for lo in range(start, stop, batch_size):
            sl = slice(lo, min(lo + batch_size, stop))
            s, pos_dst, bt, bmsg = src_all[sl], dst_all[sl], t_all[sl], msg_all[sl]
            pos_out, neg_out = embed(s, pos_dst, neg_all[sl])
            pos.append(pos_out.sigmoid().view(-1).numpy())
            neg.append(neg_out.sigmoid().view(-1).numpy())
            memory.update_state(s, pos_dst, bt, bmsg)
            neighbor_loader.insert(s, pos_dst)
        return _metrics(pos, neg, new_all[start:stop])

    history = []
    for epoch in range(1, epochs + 1):
        t0 = time.perf_counter()
        loss = train()
        t1 = time.perf_counter()
        val = test(val_idx, test_idx)
        t2 = time.perf_counter()
        history.append(
            {"epoch": epoch, "loss": loss, "train_s": t1 - t0, "val_s": t2 - t1, "val": val}
        )
        if progress:
            print(
                f"epoch {epoch:02d} loss {loss:.4f} train {t1 - t0:.1f}s val {t2 - t1:.1f}s "
                f"val AP {val['ap_batch_mean']:.4f} AUC {val['auc_batch_mean']:.4f}",
                file=sys.stderr,
                flush=True,
            )
    return {
        "epochs": history,
        "test": test(test_idx, num_events) if epochs else None,
        "val": history[-1]["val"] if history else None,
        "split": [val_idx, test_idx, num_events],
        "config": config,
    }


def main() -> None:
    from shardgnn.graph.datasets import load_temporal_dataset

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--data-dir", default="/work/shared/data")
    args = ap.parse_args()
    g = load_temporal_dataset("collegemsg", args.data_dir)
    eval_neg_dst = np.random.default_rng(0).integers(0, g.num_nodes, g.num_events)
    result = train_pyg_tgn(
        g.src,
        g.dst,
        g.t,
        g.num_nodes,
        seed=args.seed,
        epochs=args.epochs,
        eval_neg_dst=eval_neg_dst,
        msg=g.edge_feat,
        progress=True,
    )
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
