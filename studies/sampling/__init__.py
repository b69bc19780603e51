"""Does the chain sample? The experiments that say why (issue 73): studies.sampling.study."""
