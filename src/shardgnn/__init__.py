"""shardgnn: graph neural network training on graphs that outgrow one process, GPU or machine.

Layers, one direction (a lower layer never imports a higher one)::

    graph <- partition <- distributed <- store <- sampling <- loader <- nn / fullgraph <- train <- cli
"""

__version__ = "0.1.0"
