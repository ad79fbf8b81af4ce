"""Training: the recipes that decide the kind of training (:mod:`.recipes`), the one loop every
kind runs in (:mod:`.loop`), the steps of each kind (one process and on workers), checkpoints,
stop signals, reporting and the config."""
