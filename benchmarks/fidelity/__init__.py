"""The workloads of the published measurements (benchmarks/data/published.toml), built from each row's fields.

``rows`` reads the dataset and picks each row's target; ``kernels`` builds kernel and collective rows,
``models`` the decoder steps (one builder per model family, configured from the row and the model's public
config), ``evaluate`` turns a row into a published and a modeled number, ``fit`` moves the profile's
estimates on training rows only. ``benchmarks/calibration.py`` prints the result.
"""
