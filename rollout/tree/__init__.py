"""Trees, process rewards and the dataset builder (METHOD §2–§4)."""
