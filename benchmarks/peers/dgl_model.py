# Runs in the DGL venv built by benchmarks/peers/setup_dgl.sh ($HOME/peers/dglvenv/bin/python);
# imported by dgl_sage.py and dgl_dist_sage.py (dgl 2.1.0, torch 2.2.1).
"""The DGL side's model: GraphSAGE-mean with ReLU between layers and no dropout."""

import dgl.nn as dglnn
import torch.nn as nn
import torch.nn.functional as F


class SAGE(nn.Module):
    def __init__(self, din, dh, dout, nlayers):
        super().__init__()
        dims = [din] + [dh] * (nlayers - 1) + [dout]
        self.layers = nn.ModuleList(
            dglnn.SAGEConv(dims[i], dims[i + 1], "mean") for i in range(nlayers)
        )

    def forward(self, blocks, x):
        h = x
        for i, (layer, block) in enumerate(zip(self.layers, blocks)):
            h = layer(block, h)
            if i != len(self.layers) - 1:
                h = F.relu(h)
        return h
