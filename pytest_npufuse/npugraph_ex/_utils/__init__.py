"""``npugraph_ex._utils``: npugraph_ex's private helpers; of them the model has
:mod:`.graph_transform_observer`, the numbering and files of the ``TORCH_COMPILE_DEBUG=1`` debug folder."""
