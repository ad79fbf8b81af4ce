"""Training: the recipes that decide the kind of training (:mod:`.recipes`) and what depends
on the graph kind alone (:mod:`.kinds`: config checks, partitioning, inference, ``shardgnn
info``), the one loop every kind runs in (:mod:`.loop`), the steps of each kind (one process and
on workers), checkpoints, stop signals, metrics, reporting and the config; the metapath2vec
training loop (:mod:`.metapath2vec`); and ``shardgnn infer`` in its own package
(:mod:`.inference`)."""
