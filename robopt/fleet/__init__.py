"""Fleet learning: many robots (Ray actors) feed one off-policy learner through an experience hub."""
