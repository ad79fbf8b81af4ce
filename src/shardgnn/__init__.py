"""shardgnn: graph neural network training on graphs that outgrow one process, GPU or machine.

Layers, one direction (a module imports only from its own layer or those below it; no import
cycles; ``tests/test_layers.py`` enforces both, imports inside functions included)::

    base (errors, atomic, timing, options, seeding, heap, devicemem, precision, journal)
      <- graph <- partition <- distributed <- store <- sampling <- loader <- nn <- fullgraph
      <- train <- cli (and run, the worker entry point under torchrun; torchrun, the agent)
"""

__version__ = "0.2.0"
