"""The program IR: the immutable description of what a captured graph asks the device to do.

Capture writes it, every later stage reads it. Nothing here imports torch."""
