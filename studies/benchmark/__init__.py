"""The posterior benchmark (issue 56): a real network small enough for an exact sampler, its reference posterior
predictive (:mod:`.reference`, ``make reference-network``), and the task both read (:mod:`.task`)."""
