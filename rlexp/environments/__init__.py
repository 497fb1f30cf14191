"""Environment tasks: the interface an episode is played against, the episode loop, rewards and the judge."""
