"""Files the package reads and writes: atomic writes of files users own, and TOML data with errors that name the file."""
