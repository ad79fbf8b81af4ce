"""Models and layers: GraphSAGE, GCN, GAT, GATv2 and GIN stacks and the decoupled APPNP and SGC on
sampled blocks and on the full graph, PyG layers through ``PyGLayer``, a model of the user's own
(:mod:`shardgnn.nn.user`), R-GCN and heterogeneous SAGE for typed graphs, TGN/JODIE/TGAT memory
and attention for temporal graphs, T-GCN on snapshots, link predictors, metapath2vec's
skip-gram. Models only: the loops that train them are in :mod:`shardgnn.train`."""
