"""Agent Q's search over page states (docs/method.md §9.1): the tree, UCB1 and backup (``mcts``) and the critic's
ranking (``critic``)."""
