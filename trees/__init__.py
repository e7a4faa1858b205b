"""Trees, process rewards and the dataset builder (docs/method.md §2–§6)."""
