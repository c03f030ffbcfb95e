"""Execute: a captured graph run on the CPU in a legal order of its plan, racy reads poisoned."""
