"""The pytest side of pytest-npufuse, one module per job, as pytest-xdist and pytest-benchmark split theirs.

- :mod:`.options`   every command-line option with its ini key and help, registered from one table;
- :mod:`.settings`  the run's settings (targets, op catalog, gate, output files) resolved once at configure;
- :mod:`.targets`   which target a test item runs on, and its target-independent key;
- :mod:`.sessions`  the modeled process: one session per run on ``config.stash``, one per test inside it;
- :mod:`.markers`   the markers, parsed once per item into typed expectations kept on the item;
- :mod:`.fixture`   the ``npufuse`` and ``npu_target`` fixtures;
- :mod:`.recorder`  every test's outcome and check rows, aggregated once on the controller;
- :mod:`.terminal`  the terminal tables;
- :mod:`.benchmark` the pytest-benchmark mirror on a modeled clock.

:mod:`pytest_npufuse.plugin` holds only the hook entry points that tie these together.
"""
