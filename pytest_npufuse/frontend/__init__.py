"""The front end, which captures: a model under ``torch.compile`` becomes aten graphs and their program IR.

The backend (:mod:`.backend`) only captures; lowering (:mod:`.lower`) builds the IR; scope and sync
markers (:mod:`.scopes`, :mod:`.syncs`) are the graph ops the TorchAir API leaves in the graph."""
