"""Models and layers: GraphSAGE, GCN and GAT on sampled blocks and on the full graph, PyG layers
through ``PyGLayer``, R-GCN and heterogeneous SAGE for typed graphs, TGN/JODIE/TGAT memory and
attention for temporal graphs, T-GCN on snapshots, link predictors, metapath2vec's skip-gram."""
